#!/usr/bin/env bash
# What one request costs a server, counted rather than timed: the
# instructions it executes in user space (valgrind's callgrind) and the
# system calls it makes (strace), per request, for memcached and Larder on
# the same load. Neither count depends on how fast the machine happens to be
# in a given second, so a small difference between servers or between two
# builds of Larder shows in one run, where throughput needs many.
#
# Usage: benchmarks/instructions.sh                  (see BENCHMARKS.md)
#
# Settings (environment variables, defaults in brackets):
#   SERVERS [memcached larder]  servers to count: memcached, larder, or
#                         larder:BINARY for another build of Larder, e.g.
#                         SERVERS="larder:/tmp/old/larder larder"
#   WORKLOADS [get set]   get = 1:0, set = 0:1, mix = 90:10 gets:sets
#   REQUESTS [50000]      requests counted, over all connections
#   KEYS [10000]          distinct keys, all preloaded
#   VALUE_SIZE [100]      value bytes
#   DURABILITY [everysec] Larder's --durability (always counts the syncs'
#                         work too)
#   CONNS [50]            connections, spread over CLIENT_THREADS
#   CLIENT_THREADS [2]    larder bench worker threads
#   SERVER_THREADS [2]    memcached -t / larder -t
#   LARDER [target/release/larder]  the load generator, and the Larder of
#                         `larder`; when not given, the script runs cargo
#                         build --release -p larder first
#   RESULTS_DIR [benchmarks/results/<date>-instructions]  where results go
#   WORK_DIR [mktemp -d under $TMPDIR or /tmp]  data directories and logs
#   INSTALL [1]           0: never apt-get; fail if a tool is missing
#
# Larder runs with --durability DURABILITY and --io epoll: valgrind cannot
# run its io_uring rings (the default where the kernel allows them: the
# server starts, but no request is ever answered under callgrind), so the
# counts are those of the epoll path, with the same parsing and handling.
# For each server and workload the
# script starts the server twice on a free port of 127.0.0.1 with an empty
# data directory: once under callgrind with instrumentation off, and once
# plainly with strace attached to every thread. Each time it preloads every
# key, then counts while larder bench sends REQUESTS requests in closed loop
# (instructions: instrumentation switched on for the run and the counts
# dumped after it; system calls: strace attached for the run), then stops
# the server by its PID. The client's last round of requests may still be in flight when it
# stops, so up to CONNS requests more than REQUESTS are counted (0.1% at
# the defaults). The client itself is not counted.

set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"

SERVERS="${SERVERS:-memcached larder}"
WORKLOADS="${WORKLOADS:-get set}"
REQUESTS="${REQUESTS:-50000}"
KEYS="${KEYS:-10000}"
VALUE_SIZE="${VALUE_SIZE:-100}"
DURABILITY="${DURABILITY:-everysec}"
CONNS="${CONNS:-50}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"
MEMORY_MB=1024
INSTALL="${INSTALL:-1}"
PYTHON="${PYTHON:-python3}"
TREE_LARDER="$REPO/target/release/larder"

log() { printf '[instructions %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- settings
for setting in REQUESTS KEYS VALUE_SIZE CONNS CLIENT_THREADS SERVER_THREADS; do
    positive "$setting" "${!setting}"
done
case "$DURABILITY" in always|everysec|none) ;; *) die "DURABILITY must be always, everysec or none, not '$DURABILITY'";; esac
(( CONNS % CLIENT_THREADS == 0 )) || die "CONNS ($CONNS) must be a multiple of CLIENT_THREADS ($CLIENT_THREADS)"
read -r -a SERVER_LIST <<<"$SERVERS"
read -r -a WORKLOAD_LIST <<<"$WORKLOADS"
[[ ${#SERVER_LIST[@]} -gt 0 ]] || die "SERVERS is empty"
[[ ${#WORKLOAD_LIST[@]} -gt 0 ]] || die "WORKLOADS is empty"
for workload in "${WORKLOAD_LIST[@]}"; do ratio_of "$workload" >/dev/null; done

LARDER_GIVEN="${LARDER:-}"
LARDER="${LARDER:-$TREE_LARDER}"

# binary_of SPEC: the Larder binary of a SPEC, empty for memcached.
binary_of() {
    case "$1" in
        memcached) echo "";;
        larder) echo "$LARDER";;
        larder:*) echo "${1#larder:}";;
    esac
}
declare -A SEEN=()
for spec in "${SERVER_LIST[@]}"; do
    case "$spec" in
        memcached|larder) ;;
        larder:) die "no binary after ':' in '$spec'";;
        larder:*) [[ -x "${spec#larder:}" ]] || die "no larder binary at ${spec#larder:}";;
        *) die "unknown server '$spec' (memcached, larder or larder:BINARY)";;
    esac
    [[ -z "${SEEN[$spec]:-}" ]] || die "server '$spec' is named twice in SERVERS"
    SEEN[$spec]=1
done

# ------------------------------------------------------------ dependencies
packages=(valgrind strace)
[[ -n "${SEEN[memcached]:-}" ]] && packages+=(memcached)
install_packages "${packages[@]}"
for tool in valgrind callgrind_control strace; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
if [[ -z "$LARDER_GIVEN" ]]; then
    log "building Larder (cargo build --release -p larder)"
    (cd "$REPO" && cargo build --release -p larder --quiet)
fi
[[ -x "$LARDER" ]] || die "no larder binary at $LARDER"

use_work_dir instructions
RESULTS_DIR="${RESULTS_DIR:-$(fresh_results_dir "$REPO/benchmarks/results/$(date -u +%Y-%m-%d)-instructions")}"
[[ ! -e "$RESULTS_DIR" ]] || die "results directory $RESULTS_DIR exists already"
mkdir -p "$RESULTS_DIR/raw"
COMMANDS="$RESULTS_DIR/commands.txt"
: >"$COMMANDS"

# -------------------------------------------------------- process handling
SERVER_PID=""
STRACE_PID=""
stop_everything() {
    stop_pid "$STRACE_PID" strace
    STRACE_PID=""
    stop_pid "$SERVER_PID" server 600
    SERVER_PID=""
}
on_exit_stop stop_everything

# Under valgrind memcached may not raise its descriptor limit: valgrind
# keeps a few descriptors for itself and refuses any hard limit but its own,
# which is 12 below the one it starts with. memcached sets both limits to
# its connection maximum, so that maximum must be exactly the limit
# valgrind allows.
VALGRIND_FD_LIMIT=1024
VALGRIND_MEMCACHED_CONNS=$((VALGRIND_FD_LIMIT - 12))
(( CONNS + 10 < VALGRIND_MEMCACHED_CONNS )) || die "CONNS ($CONNS) must stay under $((VALGRIND_MEMCACHED_CONNS - 10))"

# server_argv ARRAY SPEC PORT DIR: sets the array named ARRAY (not one of
# this function's locals) to the command that serves SPEC on PORT.
server_argv() {
    local -n into="$1"
    local spec="$2" port="$3" dir="$4"
    if [[ "$spec" == memcached ]]; then
        into=(memcached -l 127.0.0.1 -p "$port" -U 0 -t "$SERVER_THREADS" -m "$MEMORY_MB"
            -c "$VALGRIND_MEMCACHED_CONNS" -u "$(id -un)")
    else
        into=("$(binary_of "$spec")" serve -l 127.0.0.1 -p "$port" -t "$SERVER_THREADS"
            -m "$MEMORY_MB" --data-dir "$dir" --durability "$DURABILITY" --io epoll)
    fi
}

# bench PORT RATIO OUT [ARGS...]: larder bench against PORT; JSON to OUT.
bench() {
    local port="$1" ratio="$2" out="$3"
    shift 3
    local argv=("$LARDER" bench -s "127.0.0.1:$port" -t "$CLIENT_THREADS" -c "$((CONNS / CLIENT_THREADS))"
        -k "$KEYS" -v "$VALUE_SIZE" --ratio "$ratio" --json "$@")
    record bench "${argv[@]}"
    "${argv[@]}" >"$out" 2>"$out.log" || die "larder bench failed against port $port (see $out.log)"
}

# preload PORT DIR: writes every key once.
preload() {
    bench "$1" 0:1 "$2/preload.json" --preload -n 1
}

# start SPEC DIR WRAPPER...: starts SPEC in DIR under WRAPPER (may be empty)
# on a free port; sets SERVER_PID and PORT.
start() {
    local spec="$1" dir="$2"
    shift 2
    local command=()
    PORT="$(free_port)"
    mkdir -p "$dir/data"
    server_argv command "$spec" "$PORT" "$dir/data"
    record "start $spec" "$@" "${command[@]}"
    (
        if [[ "$spec" == memcached ]]; then ulimit -n "$VALGRIND_FD_LIMIT"; fi
        exec "$@" "${command[@]}"
    ) >"$dir/server.log" 2>&1 &
    SERVER_PID=$!
    wait_for_port "$PORT" "$SERVER_PID" 1200 || die "$spec did not start (see $dir/server.log)"
}

# requests_of FILE: the requests a larder bench JSON report counts.
requests_of() { "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["requests"])' "$1"; }

# count_instructions SPEC WORKLOAD DIR: user-space instructions per request.
count_instructions() {
    local spec="$1" workload="$2" dir="$3"
    start "$spec" "$dir" valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$dir/callgrind.out"
    preload "$PORT" "$dir"
    callgrind_control --instr=on "$SERVER_PID" >"$dir/control.log" 2>&1
    bench "$PORT" "$(ratio_of "$workload")" "$dir/run.json" -n "$REQUESTS" -d 3600s
    callgrind_control --dump "$SERVER_PID" >>"$dir/control.log" 2>&1
    stop_pid "$SERVER_PID" "$spec" 600
    SERVER_PID=""
    local dump="$dir/callgrind.out.1"
    [[ -s "$dump" ]] || die "callgrind wrote no dump for $spec (see $dir/server.log)"
    awk '/^summary:/ { print $2; exit }' "$dump" >"$dir/instructions.txt"
    requests_of "$dir/run.json" >"$dir/requests.txt"
    rm -rf "$dir/data"
}

# count_syscalls SPEC WORKLOAD DIR: system calls per request, every thread.
count_syscalls() {
    local spec="$1" workload="$2" dir="$3"
    start "$spec" "$dir"
    preload "$PORT" "$dir"
    record strace strace -f -c -q -p "$SERVER_PID" -o "$dir/strace.txt"
    strace -f -c -q -p "$SERVER_PID" -o "$dir/strace.txt" 2>"$dir/strace.log" &
    STRACE_PID=$!
    # strace attaches to the threads one by one; wait until it has them all.
    local threads i
    threads="$(ls "/proc/$SERVER_PID/task" | wc -l)"
    for ((i = 0; ; i++)); do
        [[ "$(grep -l "^TracerPid:[[:space:]]*$STRACE_PID$" /proc/"$SERVER_PID"/task/*/status 2>/dev/null | wc -l)" -ge "$threads" ]] && break
        (( i < 200 )) || die "strace did not attach to all $threads threads of $spec within 10 s (see $dir/strace.log)"
        sleep 0.05
    done
    bench "$PORT" "$(ratio_of "$workload")" "$dir/run.json" -n "$REQUESTS" -d 3600s
    kill -INT "$STRACE_PID"
    wait "$STRACE_PID" 2>/dev/null || true
    STRACE_PID=""
    stop_pid "$SERVER_PID" "$spec" 600
    SERVER_PID=""
    [[ -s "$dir/strace.txt" ]] || die "strace wrote no counts for $spec (see $dir/strace.log)"
    requests_of "$dir/run.json" >"$dir/requests.txt"
    rm -rf "$dir/data"
}

# ------------------------------------------------------------------- facts
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    machine_facts
    echo "memcached: $(memcached -V 2>/dev/null || echo n/a)"
    echo "valgrind: $(valgrind --version)"
    echo "strace: $(strace -V | head -n1)"
    for spec in "${SERVER_LIST[@]}"; do
        [[ "$spec" == memcached ]] || echo "$spec: $(larder_facts "$(binary_of "$spec")")"
    done
    echo "load: $REQUESTS requests, $KEYS keys of $VALUE_SIZE bytes, $CONNS connections over $CLIENT_THREADS client threads, pipeline 1; server threads $SERVER_THREADS; Larder --durability $DURABILITY"
} >"$RESULTS_DIR/machine.txt"

# --------------------------------------------------------------------- run
for workload in "${WORKLOAD_LIST[@]}"; do
    for spec in "${SERVER_LIST[@]}"; do
        name="${spec//[:\/]/_}"
        log "$workload, $spec: instructions"
        count_instructions "$spec" "$workload" "$WORK_DIR/$name/$workload/instructions"
        log "$workload, $spec: system calls"
        count_syscalls "$spec" "$workload" "$WORK_DIR/$name/$workload/syscalls"
        raw="$RESULTS_DIR/raw/$name/$workload"
        mkdir -p "$raw"
        cp "$WORK_DIR/$name/$workload/instructions/instructions.txt" "$raw/instructions.txt"
        cp "$WORK_DIR/$name/$workload/instructions/requests.txt" "$raw/instructions-requests.txt"
        cp "$WORK_DIR/$name/$workload/syscalls/strace.txt" "$raw/strace.txt"
        cp "$WORK_DIR/$name/$workload/syscalls/requests.txt" "$raw/syscalls-requests.txt"
        echo "$spec" >"$raw/server.txt"
    done
done

"$PYTHON" "$SCRIPT_DIR/instructions_report.py" "$RESULTS_DIR"
log "results in $RESULTS_DIR"
