# Helpers shared by the benchmark scripts (compare.sh, pairs.sh,
# sustained_writes.sh, sql_experiments.sh) and the record scripts under
# results/. Sourced, never run; the caller defines PYTHON and INSTALL before
# calling them, COMMANDS before `record`, SERVER_THREADS and MEMORY_MB before
# `server_command`, WORK_DIR before `machine_facts` and REPO before
# `larder_facts`, and may define its own `log` and `die` (plain ones below
# otherwise).

declare -F log >/dev/null || log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
declare -F die >/dev/null || die() { log "error: $*"; exit 1; }

# positive NAME VALUE: dies unless VALUE is a positive integer.
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, not '$2'"; }

# whole_number NAME VALUE: dies unless VALUE is 0 or a positive integer.
whole_number() { [[ "$2" =~ ^(0|[1-9][0-9]*)$ ]] || die "$1 must be a whole number, not '$2'"; }

# on_exit_stop FUNCTION: whenever the script exits (also on SIGINT and
# SIGTERM, with status 130 and 143), calls FUNCTION to stop what it started,
# removes WORK_DIR if REMOVE_WORK_DIR is 1, and keeps the exit status.
on_exit_stop() {
    EXIT_STOP_FUNCTION="$1"
    trap exit_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

exit_cleanup() {
    local status=$?
    "$EXIT_STOP_FUNCTION"
    if [[ "${REMOVE_WORK_DIR:-0}" == 1 && -d "$WORK_DIR" ]]; then rm -rf -- "$WORK_DIR"; fi
    exit "$status"
}

# stop_server NAME: stops the server the caller's SERVER_PID map holds
# under NAME (a script with other needs defines its own after sourcing).
stop_server() {
    stop_pid "${SERVER_PID[$1]:-}" "$1"
    unset 'SERVER_PID[$1]'
}

# stop_all_servers: stops every server in the caller's SERVER_PID map
# (name -> pid) with stop_server NAME.
stop_all_servers() {
    local name
    for name in "${!SERVER_PID[@]}"; do stop_server "$name"; done
}

# stop_pid PID NAME [GRACE_TENTHS]: SIGTERM, wait up to GRACE_TENTHS tenths
# of a second (default 150: 15 s), then SIGKILL; reaps the process.
stop_pid() {
    local pid="$1" name="$2" grace="${3:-150}" i
    [[ -n "$pid" ]] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < grace; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name (pid $pid) ignored SIGTERM for $((grace / 10)) s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
}

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    "$PYTHON" - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

# wait_for_port PORT PID [TRIES]: until 127.0.0.1:PORT accepts a connection
# (TRIES x 50 ms, default 200: 10 s); fails at once if PID has exited.
wait_for_port() {
    local port="$1" pid="$2" tries="${3:-200}" i
    for ((i = 0; i < tries; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    return 1
}

# install_packages PKG...: installs the Debian packages that are missing
# (apt-get update first), as root or through sudo; with INSTALL=0 it fails
# naming them instead.
install_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ "$INSTALL" == 1 ]] || die "missing packages: ${missing[*]} (INSTALL=0)"
    local sudo=()
    [[ "$(id -u)" -eq 0 ]] || sudo=(sudo)
    log "installing ${missing[*]} from Debian packages"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

# cpu_pin ARRAY CPUS: sets the array named ARRAY to a command prefix that
# pins what follows to CPUS (a list as `taskset -c` takes it, e.g. "1" or
# "0,2-3"), or to nothing when CPUS is empty. taskset execs the command, so
# `"${ARRAY[@]}" cmd &` leaves cmd's own PID in $!.
cpu_pin() {
    local -n prefix="$1"
    local cpus="$2"
    prefix=()
    [[ -z "$cpus" ]] && return 0
    command -v taskset >/dev/null || die "taskset (util-linux) is needed to pin to CPUs '$cpus'"
    taskset -c "$cpus" true 2>/dev/null || die "cannot pin to CPUs '$cpus' on this machine ($(nproc) CPUs)"
    prefix=(taskset -c "$cpus")
}

# shell_word WORD: prints WORD as a shell would need it typed: bare when
# safe, else in single quotes, else in double quotes with \ " $ ` escaped.
shell_word() {
    local word="$1" escaped
    if [[ "$word" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
        printf '%s' "$word"
    elif [[ "$word" != *"'"* ]]; then
        printf "'%s'" "$word"
    else
        escaped="${word//\\/\\\\}"
        escaped="${escaped//\"/\\\"}"
        escaped="${escaped//\$/\\\$}"
        escaped="${escaped//\`/\\\`}"
        printf '"%s"' "$escaped"
    fi
}

# record LABEL COMMAND...: appends "LABEL: COMMAND" to the file named by
# $COMMANDS, each word quoted as a shell would need it.
record() {
    local label="$1" line="" word
    shift
    for word in "$@"; do line+="${line:+ }$(shell_word "$word")"; done
    printf '%s: %s\n' "$label" "$line" >>"$COMMANDS"
}

# cpu_split PID: "TOTAL SYSTEM", the CPU seconds (user + system, all
# threads) PID has used so far and the part of them spent in the kernel;
# fails if it cannot be read.
cpu_split() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    # Fields after the ") " that ends the command name: utime is 12th, stime 13th.
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f %.2f\n", ($12 + $13) / hz, $13 / hz }' <<<"${stat##*) }"
}

# cpu_seconds PID: CPU seconds (user + system, all threads) PID has used so
# far; fails if it cannot be read.
cpu_seconds() {
    local split
    split="$(cpu_split "$1")" || return 1
    echo "${split%% *}"
}

# seconds_between BEFORE AFTER: AFTER - BEFORE, two readings in seconds
# (of cpu_seconds, say), to the hundredth.
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", b - a }'; }

# thread_cpu_seconds PID NAME: CPU seconds (user + system) of the threads of
# process PID named NAME (their `comm`), summed; 0.00 if it has none.
thread_cpu_seconds() {
    thread_ticks "$1" | awk -v name="$2" -v hz="$(getconf CLK_TCK)" \
        '$1 == name { ticks = $2 } END { printf "%.2f\n", ticks / hz }'
}

# cpu_reading NAME PID: "PROCESS COMPACTOR", the CPU seconds server NAME
# (process PID) has used so far over all its threads, and for a Larder its
# compactor thread's (`larder-compact`), "-" for other servers; fails if
# /proc/PID/stat cannot be read (PID gone). Two readings make a run's .cpu
# file (write_cpu).
cpu_reading() {
    local process compactor=-
    process="$(cpu_seconds "$2")" || return 1
    if [[ "$1" == larder-* ]]; then compactor="$(thread_cpu_seconds "$2" larder-compact)"; fi
    echo "$process $compactor"
}

# write_cpu FILE BEFORE AFTER: from two cpu_reading readings taken around a
# run, writes {"server_cpu_s": S, "compactor_cpu_s": C} to FILE, C null for
# a server without a compactor. report.py turns it into CPU per request.
write_cpu() {
    local file="$1" process_before compactor_before process_after compactor_after compactor=null
    read -r process_before compactor_before <<<"$2"
    read -r process_after compactor_after <<<"$3"
    if [[ "$compactor_before" != - && "$compactor_after" != - ]]; then
        compactor="$(seconds_between "$compactor_before" "$compactor_after")"
    fi
    printf '{"server_cpu_s": %s, "compactor_cpu_s": %s}\n' \
        "$(seconds_between "$process_before" "$process_after")" "$compactor" >"$file"
}

# server_stats PORT: the `stats` reply of the memcached-protocol server on
# 127.0.0.1:PORT as "NAME VALUE" lines; fails if it cannot connect.
server_stats() {
    local port="$1" line
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'stats\r\n' >&3
    while IFS= read -r -t 5 line <&3; do
        line="${line%$'\r'}"
        [[ "$line" == END || "$line" == ERROR* ]] && break
        [[ "$line" == STAT\ * ]] && printf '%s\n' "${line#STAT }"
    done
    exec 3<&-
}

# stat_value NAME: the value of NAME in server_stats output read from stdin.
stat_value() { awk -v name="$1" '$1 == name { print $2 }'; }

# thread_ticks PID: one "NAME TICKS" line per thread name of process PID,
# the CPU clock ticks (user + system) its threads of that name have used so
# far, sorted by name (for join).
thread_ticks() {
    local task comm ticks
    for task in /proc/"$1"/task/*; do
        # A thread that ends meanwhile is left out (and fails nothing).
        if comm="$(cat "$task/comm" 2>/dev/null)" \
            && ticks="$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$task/stat" 2>/dev/null)"; then
            echo "$comm $ticks"
        fi
    done | awk '{ sum[$1] += $2 } END { for (name in sum) print name, sum[name] }' | sort
}

# thread_ms BEFORE AFTER: from two files of thread_ticks output, one
# "NAME MS" line per thread name: the CPU its threads used between them.
thread_ms() {
    join "$1" "$2" | awk -v ms="$((1000 / $(getconf CLK_TCK)))" '{ print $1, ($3 - $2) * ms }'
}

# ops_per_second: the ops/s of the `larder bench --json` report on stdin,
# rounded.
ops_per_second() { python3 -c 'import json, sys; print(round(json.load(sys.stdin)["ops_per_second"]))'; }

# thread_cpu_runs BINARY LOADGEN RUNS KEYS BENCH_ARG...: for the record
# scripts under results/: RUNS times, a fresh Larder under `everysec` with
# KEYS keys preloaded (record_larder on port PORT, 22183 by default), the
# wait for a quiet machine, then `LOADGEN bench` with BENCH_ARG... (and the
# run number as seed); prints per run its ops/s and the milliseconds of CPU
# each of the server's threads (by name) used over it, where any.
thread_cpu_runs() {
    local bin="$1" loadgen="$2" runs="$3" keys="$4" port="${PORT:-22183}" run ops
    shift 4
    for ((run = 1; run <= runs; run++)); do
        record_larder "$bin" "$loadgen" everysec "$port" "$keys"
        settle 30 >/dev/null
        thread_ticks "$RECORD_PID" >"$RECORD_DIR/before"
        ops=$("$loadgen" bench -s "127.0.0.1:$port" -k "$keys" -v 100 -q "$@" --seed "$run" --json \
            | ops_per_second)
        thread_ticks "$RECORD_PID" >"$RECORD_DIR/after"
        echo "run $run: $ops ops/s; ms of CPU: $(thread_ms "$RECORD_DIR/before" "$RECORD_DIR/after" | awk '$2 > 0' | tr '\n' ' ')"
        stop_pid "$RECORD_PID" larder
        rm -rf "$RECORD_DIR"
        trap - EXIT
    done
}

# record_larder BINARY LOADGEN DURABILITY PORT KEYS: for the record scripts
# under results/: starts BINARY (2 threads, 1 GiB, 4096 connections) on
# 127.0.0.1:PORT with DURABILITY in a new temporary directory, sets
# RECORD_PID and RECORD_DIR, arranges for both to be stopped and removed on
# exit, and preloads KEYS keys of 100 bytes with LOADGEN.
record_larder() {
    local bin="$1" loadgen="$2" durability="$3" port="$4" keys="$5"
    RECORD_DIR="$(mktemp -d)"
    "$bin" serve -l 127.0.0.1 -p "$port" -t 2 -m 1024 -c 4096 --data-dir "$RECORD_DIR/data" \
        --durability "$durability" >"$RECORD_DIR/server.log" 2>&1 &
    RECORD_PID=$!
    trap 'kill "$RECORD_PID" 2>/dev/null || true; wait "$RECORD_PID" 2>/dev/null || true; rm -rf "$RECORD_DIR"' EXIT
    wait_for_port "$port" "$RECORD_PID" \
        || die "$bin did not start listening on port $port: $(tail -n 3 "$RECORD_DIR/server.log" | tr '\n' ' ')"
    "$loadgen" bench -s "127.0.0.1:$port" -k "$keys" -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
}

# host_ticks: "TOTAL STEAL", the machine's CPU time so far in clock ticks
# summed over all CPUs (user to steal in /proc/stat), and the part of it
# the host stole: time a vCPU of this virtual machine wanted to run while
# the host ran something else. Prints nothing where /proc/stat is missing.
host_ticks() {
    [[ -r /proc/stat ]] || return 0
    awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9; exit }' /proc/stat
}

# steal_percent BEFORE AFTER: the percent of the machine's CPU time the host
# stole between two host_ticks readings, to two decimals.
steal_percent() {
    awk -v b="$1" -v a="$2" 'BEGIN {
        split(b, x, " "); split(a, y, " ")
        total = y[1] - x[1]
        printf "%.2f\n", (total > 0 ? 100 * (y[2] - x[2]) / total : 0)
    }'
}

# write_steal FILE BEFORE AFTER: writes {"host_steal_percent": P} to FILE,
# P being steal_percent BEFORE AFTER; writes nothing if either reading is
# empty.
write_steal() {
    local file="$1" before="$2" after="$3"
    [[ -n "$before" && -n "$after" ]] || return 0
    printf '{"host_steal_percent": %s}\n' "$(steal_percent "$before" "$after")" >"$file"
}

# settle SECONDS_MAX: before a measured run (after a preload, or after the
# last run), waits until the machine has been quiet for one whole second
# (busy CPU time, all of it but idle, iowait and steal, under a tenth of
# one CPU) or SECONDS_MAX seconds have passed, and prints "SECONDS quiet"
# or "SECONDS busy". A bulk load or a run can leave work running after it:
# memcached grows its hash table in a background thread, Redis may rewrite
# its append-only file in a child process, Larder compacts. The run starts
# after what is running then, whichever server it belongs to; work that
# starts later (the kernel's writeback of dirty pages after half a minute,
# say) is not waited for. SECONDS_MAX 0: no wait ("0 skipped");
# where /proc/stat is missing, "0 unknown".
settle() {
    local seconds_max="$1" tenth waited=0 before after
    if (( seconds_max == 0 )); then echo "0 skipped"; return 0; fi
    [[ -r /proc/stat ]] || { echo "0 unknown"; return 0; }
    tenth=$(( $(getconf CLK_TCK) / 10 ))
    before="$(busy_ticks)"
    while (( waited < seconds_max )); do
        sleep 1
        waited=$((waited + 1))
        after="$(busy_ticks)"
        if (( after - before < tenth )); then
            echo "$waited quiet"
            return 0
        fi
        before="$after"
    done
    echo "$seconds_max busy"
}

# busy_ticks: the machine's busy CPU time so far in clock ticks, summed over
# all CPUs (user, nice, system, irq and softirq in /proc/stat).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat; }

# server_command ARRAY NAME PORT DIR LARDER_BINARY: sets the array named
# ARRAY to the command that starts server NAME (memcached, redis-none,
# redis-everysec, redis-always, larder-none, larder-everysec or
# larder-always, each Larder also with -uring for --io uring or -epoll for
# --io epoll, and without either on the default, --io auto) on
# 127.0.0.1:PORT with its data in DIR, with SERVER_THREADS
# worker threads (Redis is single-threaded by design) and MEMORY_MB of
# memory; Larder is LARDER_BINARY. ARRAY must not be one of its own locals
# (out, name, port, dir, larder, aof, durability, io).
server_command() {
    local -n out="$1"
    local name="$2" port="$3" dir="$4" larder="$5"
    case "$name" in
        memcached)
            out=(memcached -l 127.0.0.1 -p "$port" -U 0 -t "$SERVER_THREADS" -m "$MEMORY_MB"
                -c 4096 -u "$(id -un)")
            ;;
        redis-none|redis-everysec|redis-always)
            local aof=()
            case "$name" in
                redis-none) aof=(--appendonly no);;
                redis-everysec) aof=(--appendonly yes --appendfsync everysec);;
                redis-always) aof=(--appendonly yes --appendfsync always);;
            esac
            out=(redis-server --bind 127.0.0.1 --port "$port" --daemonize no --save ''
                "${aof[@]}" --dir "$dir" --maxclients 4096 --logfile '')
            ;;
        larder-*)
            local durability="${name#larder-}" io=()
            case "$durability" in
                *-nopoll) durability="${durability%-nopoll}"; io=(--idle-poll-us 0);;
            esac
            case "$durability" in
                *-uring) durability="${durability%-uring}"; io+=(--io uring);;
                *-epoll) durability="${durability%-epoll}"; io+=(--io epoll);;
            esac
            out=("$larder" serve -l 127.0.0.1 -p "$port" -t "$SERVER_THREADS" -m "$MEMORY_MB"
                -c 4096 --data-dir "$dir" --durability "$durability" "${io[@]}")
            ;;
        *) die "no command for server '$name'";;
    esac
}

# machine_facts: "key: value" lines on this machine's CPUs, memory, kernel,
# the file system of WORK_DIR and the disks.
machine_facts() {
    echo "nproc: $(nproc)"
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
    echo "kernel: $(uname -sr)"
    echo "work_dir_fs: $(df -T "$WORK_DIR" | awk 'NR==2 {print $1" "$2}')"
    if command -v lsblk >/dev/null; then
        echo "disks: $(lsblk -d -n -o NAME,TYPE,ROTA,SIZE 2>/dev/null | tr -s ' ' | paste -sd ';' -)"
    fi
}

# larder_facts BINARY: the binary's version and build time, and the commit
# the repository at REPO is at (flagged when its crates/ or benchmarks/
# differ from it); that is the binary's commit only for the tree's build.
larder_facts() {
    local binary="$1"
    printf '%s, binary built %s, tree HEAD %s%s\n' "$("$binary" --version)" \
        "$(date -u -r "$binary" +%Y-%m-%dT%H:%M:%SZ)" \
        "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        "$(git -C "$REPO" diff --quiet HEAD -- crates benchmarks 2>/dev/null || echo ' (crates/ or benchmarks/ has uncommitted changes)')"
}

# use_work_dir NAME: WORK_DIR as given (created if missing, kept at exit),
# or a new temporary one named after NAME (removed at exit).
use_work_dir() {
    if [[ -z "${WORK_DIR:-}" ]]; then
        WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/larder-$1.XXXXXX")"
        REMOVE_WORK_DIR=1
    else
        mkdir -p "$WORK_DIR"
        REMOVE_WORK_DIR=0
    fi
}

# want_descriptors N: raises the open-file limit to N if it is lower (a
# warning, not an error, when it cannot).
want_descriptors() {
    if (( $(ulimit -n) < $1 )); then
        ulimit -n "$1" 2>/dev/null || log "warning: could not raise the descriptor limit to $1"
    fi
}

# The servers compare.sh and pairs.sh know how to start (server_command); a
# Larder name ending in -uring serves its connections on io_uring rings
# (larder serve --io uring), one ending in -epoll on tokio's epoll tasks
# (--io epoll), and one with neither as the default chooses (--io auto:
# rings where the kernel allows them).
KV_SERVERS="memcached redis-none redis-everysec redis-always larder-none larder-everysec larder-always
larder-none-uring larder-everysec-uring larder-always-uring
larder-none-epoll larder-everysec-epoll larder-always-epoll
larder-none-nopoll larder-everysec-nopoll larder-always-nopoll
larder-none-uring-nopoll larder-everysec-uring-nopoll larder-always-uring-nopoll"
KV_SERVERS="${KV_SERVERS//$'\n'/ }"

# known_server NAME: dies unless NAME is one of KV_SERVERS.
known_server() {
    [[ " $KV_SERVERS " == *" $1 "* ]] || die "unknown server '$1' (one of: $KV_SERVERS)"
}

# protocol_of NAME: the protocol larder bench speaks to server NAME: RESP
# to Redis; to memcached and Larder, MEMCACHED_PROTOCOL (memcached, the text
# protocol, unless set to binary).
protocol_of() { case "$1" in redis-*) echo redis;; *) echo "${MEMCACHED_PROTOCOL:-memcached}";; esac; }

# ratio_of WORKLOAD: the gets:sets ratio of a workload (get, set or mix).
ratio_of() {
    case "$1" in
        get) echo "1:0";;
        set) echo "0:1";;
        mix) echo "90:10";;
        *) die "unknown workload '$1' (get, set, mix)";;
    esac
}

# fresh_results_dir BASE: BASE, or BASE-2, BASE-3, ... whichever does not
# exist yet.
fresh_results_dir() {
    local dir="$1" n=2
    while [[ -e "$dir" ]]; do dir="$1-$n"; n=$((n + 1)); done
    echo "$dir"
}

# kv_server_versions: "key: value" lines with the memcached and Redis versions.
kv_server_versions() {
    echo "memcached: $(memcached -V 2>/dev/null || echo n/a)"
    echo "redis: $(redis-server --version 2>/dev/null | awk '{print $3}' || echo n/a)"
}

# note_larder_io NAME LOG FILE: once per NAME, appends "io_NAME: CHOICE" to
# FILE, where CHOICE is how the Larder whose start line is in LOG serves
# its connections (`uring`, `epoll`, or `epoll: io_uring refused here
# (...)`): what --io auto, the default, settled on this kernel.
note_larder_io() {
    local name="$1" log="$2" file="$3" choice="" try
    grep -q "^io_$name: " "$file" 2>/dev/null && return 0
    # The start line is written just after the socket listens.
    for try in $(seq 100); do
        choice="$(sed -n 's/^larder .* listening on .*, io \(.*\))$/\1/p' "$log" | head -n1)"
        [[ -n "$choice" ]] && break
        sleep 0.02
    done
    echo "io_$name: ${choice:-unknown (no start line in $log)}" >>"$file"
}
