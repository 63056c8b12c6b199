#!/usr/bin/env bash
# Side-by-side comparison: memcached, Redis (no persistence, AOF everysec,
# AOF always) and Larder (durability none, everysec, always) under the same
# workloads, driven by `larder bench`, in one run on this machine.
#
# Usage: benchmarks/compare.sh            (from anywhere; see BENCHMARKS.md)
#
# Settings (environment variables, defaults in brackets):
#   RUNS [3]              runs of every cell; the report shows median, min, max
#   DURATION [5s]         measured phase of each run
#   WARMUP [500ms]        warm-up before each measured phase (not counted)
#   KEYS [100000]         distinct keys, all preloaded (the issue asks 1000000)
#   VALUE_SIZE [100]      value bytes
#   CONNS ["50"]          space-separated connection counts, e.g. "1 50 500"
#   PIPELINES ["1 16"]    space-separated pipeline depths
#   WORKLOADS ["get set mix"]  get = 1:0, set = 0:1, mix = 90:10 gets:sets
#   SERVERS [the first seven]  subset of: memcached redis-none redis-everysec
#                         redis-always larder-none larder-everysec larder-always
#                         (each Larder on its default, --io auto), and each
#                         Larder with -uring or -epoll for --io uring or
#                         --io epoll, e.g. larder-everysec-epoll
#   CLIENT_THREADS [2]    larder bench worker threads
#   SERVER_THREADS [2]    memcached -t / larder -t (Redis is single-threaded)
#   MEMORY_MB [1024]      memcached -m / larder -m
#   SERVER_CPUS [unset]   CPU list (taskset -c) to pin every server to
#   CLIENT_CPUS [unset]   CPU list to pin every measured larder bench run to
#                         (the preload's client is never pinned).
#                         SERVER_CPUS=0 CLIENT_CPUS=0 puts a one-connection
#                         client and server on one CPU, so a request does not
#                         wait for another CPU to wake (see BENCHMARKS.md and
#                         benchmarks/HISTORY.md, "Gets at one connection").
#                         Unset: servers and client share all CPUs.
#   LARDER [target/release/larder]  the binary; when not given, the script
#                         runs cargo build --release -p larder first
#   RESULTS_DIR [benchmarks/results/<date>]  where results go; the default
#                         one is also copied to benchmarks/results/latest
#   COPY_LATEST [1 with the default RESULTS_DIR, else 0]
#   WORK_DIR [mktemp -d under $TMPDIR or /tmp]  server data dirs and logs;
#                         put it on the disk you want fsync measured on
#   INSTALL [1]           0: never apt-get; fail if a server is missing
#   SETTLE_SECONDS_MAX [30]  before each measured run, wait until the
#                         machine is quiet (busy CPU under a tenth of one CPU
#                         for a second), at most this long; 0: do not wait
#
# Every server listens on 127.0.0.1 on a free port, gets its own empty data
# directory, and is started and preloaded with every key once, at the
# start; all of them run together until the end, when each is stopped by
# its PID (a trap stops whatever is still running on exit). The cells are
# measured one after another, and each cell's runs are interleaved: run 1
# against every server, then run 2, ..., even runs taking the servers in
# reverse order. So one cell's figures for all servers are taken within a
# couple of minutes of each other, and a drift of the machine over the run
# lands on every server's figures for a cell alike instead of on one
# server. Before each run the script waits for the machine to be quiet, so
# work left running by the last run or by another server (Redis rewriting
# its append-only file, Larder compacting) does not land on the next
# server's run; each wait goes next to the run
# (raw/<server>/<cell>-runN.settle), and so do the share of the
# machine's CPU the host stole during the run (<cell>-runN.steal) and the
# CPU the server's process used during it, all its threads, a Larder's
# compactor thread also on its own (<cell>-runN.cpu; a child process, such
# as Redis's rewrite of its append-only file, is not counted); the report
# lists them. A server whose preload fails is left out of the run, and the
# report says so.

set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"

RUNS="${RUNS:-3}"
DURATION="${DURATION:-5s}"
WARMUP="${WARMUP:-500ms}"
KEYS="${KEYS:-100000}"
VALUE_SIZE="${VALUE_SIZE:-100}"
CONNS="${CONNS:-50}"
PIPELINES="${PIPELINES:-1 16}"
WORKLOADS="${WORKLOADS:-get set mix}"
SERVERS="${SERVERS:-memcached redis-none redis-everysec redis-always larder-none larder-everysec larder-always}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"
MEMORY_MB="${MEMORY_MB:-1024}"
SERVER_CPUS="${SERVER_CPUS:-}"
CLIENT_CPUS="${CLIENT_CPUS:-}"
LARDER_GIVEN="${LARDER:-}"
LARDER="${LARDER:-$REPO/target/release/larder}"
INSTALL="${INSTALL:-1}"
SETTLE_SECONDS_MAX="${SETTLE_SECONDS_MAX:-30}"
PYTHON="${PYTHON:-python3}"

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- settings
positive RUNS "$RUNS"
positive KEYS "$KEYS"
whole_number SETTLE_SECONDS_MAX "$SETTLE_SECONDS_MAX"
for c in $CONNS; do [[ "$c" =~ ^[1-9][0-9]*$ ]] || die "bad connection count '$c'"; done
for p in $PIPELINES; do [[ "$p" =~ ^[1-9][0-9]*$ ]] || die "bad pipeline depth '$p'"; done
for w in $WORKLOADS; do ratio_of "$w" >/dev/null; done
for s in $SERVERS; do known_server "$s"; done
[[ -z "$(tr ' ' '\n' <<<"$SERVERS" | sed '/^$/d' | sort | uniq -d)" ]] || die "SERVERS names a server twice: '$SERVERS'"

SERVER_PIN=() CLIENT_PIN=() NO_PIN=()   # taskset prefixes, empty when not pinned
cpu_pin SERVER_PIN "$SERVER_CPUS"
cpu_pin CLIENT_PIN "$CLIENT_CPUS"

# ------------------------------------------------------------ dependencies
needed=()
[[ " $SERVERS " == *" memcached "* ]] && needed+=(memcached)
[[ " $SERVERS " == *" redis-"* ]] && needed+=(redis-server)
[[ ${#needed[@]} -gt 0 ]] && install_packages "${needed[@]}"
# The Debian packages may start their own service where systemd runs; ours
# use their own ports and data directories, so those are left alone.

if [[ -z "${LARDER_GIVEN:-}" && "$LARDER" == "$REPO/target/release/larder" ]]; then
    # Build (a no-op when up to date) so the binary measured is the tree's.
    log "building larder (cargo build --release -p larder)"
    (cd "$REPO" && cargo build --release -p larder)
fi
[[ -x "$LARDER" ]] || die "no larder binary at $LARDER"
command -v "$PYTHON" >/dev/null || die "python3 is needed for the report"

# 500 connections need more descriptors than some defaults give.
max_conns=1
for c in $CONNS; do (( c > max_conns )) && max_conns=$c; done
want_descriptors $(( max_conns * 2 + 256 ))

# ------------------------------------------------------------- directories
use_work_dir compare
# A given WORK_DIR may hold an aborted run's data: never start on it.
for s in $SERVERS; do
    [[ ! -e "$WORK_DIR/$s" ]] || die "$WORK_DIR/$s already exists (left by an earlier run?); remove it or use another WORK_DIR"
done

DATE="$(date +%Y-%m-%d)"
if [[ -z "${RESULTS_DIR:-}" ]]; then
    COPY_LATEST="${COPY_LATEST:-1}"
    RESULTS_DIR="$(fresh_results_dir "$SCRIPT_DIR/results/$DATE")"
fi
COPY_LATEST="${COPY_LATEST:-0}"
mkdir -p "$RESULTS_DIR/raw"
RAW="$RESULTS_DIR/raw"
COMMANDS="$RAW/commands.txt"   # every server and larder bench command, in order
: >"$COMMANDS"

# ------------------------------------------------------- server lifecycle
declare -A SERVER_PID=()   # name -> pid of the running server
CURRENT_PORT=""

on_exit_stop stop_all_servers

start_server() {
    local name="$1" port dir logf pid
    port="$(free_port)"
    dir="$WORK_DIR/$name"
    mkdir -p "$dir"
    logf="$WORK_DIR/$name.log"
    local cmd=()
    server_command cmd "$name" "$port" "$dir" "$LARDER"
    cmd=("${SERVER_PIN[@]}" "${cmd[@]}")
    record "start $name" "${cmd[@]}"
    "${cmd[@]}" >"$logf" 2>&1 &
    pid=$!
    SERVER_PID[$name]=$pid
    if ! wait_for_port "$port" "$pid"; then
        tail -n 20 "$logf" >&2 || true
        die "$name did not start listening on 127.0.0.1:$port"
    fi
    [[ "$name" == larder-* ]] && note_larder_io "$name" "$logf" "$RESULTS_DIR/machine.txt"
    CURRENT_PORT="$port"
}

# Threads and connections per thread giving exactly $1 connections.
split_conns() {
    local conns="$1" t="$CLIENT_THREADS"
    (( t > conns )) && t=$conns
    while (( conns % t != 0 )); do t=$((t - 1)); done
    echo "$t $((conns / t))"
}

bench() {
    # bench PIN OUTFILE PORT PROTOCOL ARGS...: PIN names the taskset prefix
    # array to run under (CLIENT_PIN for measured runs, NO_PIN for preloads).
    local -n pin="$1"
    local out="$2" port="$3" proto="$4"
    shift 4
    local cmd=("${pin[@]}" "$LARDER" bench -s "127.0.0.1:$port" --protocol "$proto" -k "$KEYS"
        -v "$VALUE_SIZE" --json -q "$@")
    record "${out#"$RAW/"}" "${cmd[@]}"
    local ticks_before
    ticks_before="$(host_ticks)"
    if ! "${cmd[@]}" >"$out.tmp" 2>"$out.err"; then
        # Recorded, not fatal: report.py lists failed runs, and a server that
        # fails one workload still gets measured on the others.
        log "larder bench failed for $out: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        mv "$out.err" "$out.failed"
        rm -f "$out.tmp"
        return 1
    fi
    # How much CPU the host took from this machine during the run, next to
    # it (raw/<server>/<cell>-runN.steal): report.py shows it per cell.
    write_steal "${out%.json}.steal" "$ticks_before" "$(host_ticks)"
    mv "$out.tmp" "$out"
    if [[ -s "$out.err" ]]; then mv "$out.err" "$out.stderr"; else rm -f "$out.err"; fi
}

# ------------------------------------------------------------ machine info
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    machine_facts
    kv_server_versions
    echo "larder: $(larder_facts "$LARDER")"
    echo "settings: RUNS=$RUNS DURATION=$DURATION WARMUP=$WARMUP SETTLE_SECONDS_MAX=$SETTLE_SECONDS_MAX KEYS=$KEYS VALUE_SIZE=$VALUE_SIZE CONNS='$CONNS' PIPELINES='$PIPELINES' WORKLOADS='$WORKLOADS' CLIENT_THREADS=$CLIENT_THREADS SERVER_THREADS=$SERVER_THREADS MEMORY_MB=$MEMORY_MB SERVER_CPUS='$SERVER_CPUS' CLIENT_CPUS='$CLIENT_CPUS'"
    echo "servers: $SERVERS"
} >"$RESULTS_DIR/machine.txt"
log "machine: $(tr '\n' '|' <"$RESULTS_DIR/machine.txt")"

# ------------------------------------------------------------------- runs
cells=0
for _ in $WORKLOADS; do for _ in $CONNS; do for _ in $PIPELINES; do cells=$((cells + 1)); done; done; done
nservers=$(wc -w <<<"$SERVERS")
log "$nservers servers x $cells cells x $RUNS runs of $DURATION (+$WARMUP warm-up) each; results in $RESULTS_DIR"

start_time=$SECONDS
declare -A PORT_OF=()   # name -> port of every server started and preloaded
measured=()             # those servers, in the order of SERVERS
reversed=()             # and in the reverse order, for even runs
for server in $SERVERS; do
    proto="$(protocol_of "$server")"
    start_server "$server"
    mkdir -p "$RAW/$server"
    log "$server on 127.0.0.1:$CURRENT_PORT (pid ${SERVER_PID[$server]}): preloading $KEYS keys"
    if ! bench NO_PIN "$RAW/$server/preload.json" "$CURRENT_PORT" "$proto" \
        --preload -t "$CLIENT_THREADS" -c 4 --ratio 1:0 -n 1 --seed 1; then
        log "preload of $server failed; leaving it out of the run (results.md lists it)"
        stop_server "$server"
        rm -rf -- "${WORK_DIR:?}/$server"
        continue
    fi
    PORT_OF[$server]="$CURRENT_PORT"
    measured+=("$server")
    reversed=("$server" "${reversed[@]}")
done
[[ ${#measured[@]} -gt 0 ]] || die "no server could be preloaded"

for workload in $WORKLOADS; do
    ratio="$(ratio_of "$workload")"
    for conns in $CONNS; do
        read -r threads per_thread <<<"$(split_conns "$conns")"
        for pipeline in $PIPELINES; do
            for ((round = 1; round <= RUNS; round++)); do
                order=("${measured[@]}")
                ((round % 2 == 0)) && order=("${reversed[@]}")
                for server in "${order[@]}"; do
                    out="$RAW/$server/$workload-c$conns-p$pipeline-run$round.json"
                    # What the last run (or the preloads) left running, the
                    # measured server's or another's, ends before this one
                    # starts, unless it outlasts SETTLE_SECONDS_MAX.
                    settle "$SETTLE_SECONDS_MAX" >"${out%.json}.settle"
                    # The server's CPU over the run, next to it
                    # (<cell>-runN.cpu): report.py gives it per request.
                    pid="${SERVER_PID[$server]}"
                    cpu_before="$(cpu_reading "$server" "$pid")" || cpu_before=""
                    if ! bench CLIENT_PIN "$out" "${PORT_OF[$server]}" "$(protocol_of "$server")" \
                        -t "$threads" -c "$per_thread" -P "$pipeline" --ratio "$ratio" \
                        -d "$DURATION" --warmup "$WARMUP" --seed "$round"; then
                        continue
                    fi
                    if [[ -n "$cpu_before" ]] && cpu_after="$(cpu_reading "$server" "$pid")"; then
                        write_cpu "${out%.json}.cpu" "$cpu_before" "$cpu_after"
                    else
                        log "  no CPU reading of $server (pid $pid) around its $workload c=$conns P=$pipeline run $round"
                    fi
                    log "  $workload c=$conns P=$pipeline run $round $server: $("$PYTHON" "$SCRIPT_DIR/report.py" --line "$out")"
                done
            done
        done
    done
done

for server in "${measured[@]}"; do
    if [[ "$(protocol_of "$server")" != redis ]]; then
        # Server counters at the end (Larder's include fsyncs and group
        # commits), for explaining the figures.
        server_stats "${PORT_OF[$server]}" >"$RAW/$server/stats.txt" || true
    fi
    du -sk "$WORK_DIR/$server" | awk '{print $1}' >"$RAW/$server/disk-kib.txt"
    stop_server "$server"
    rm -rf -- "${WORK_DIR:?}/$server"
done
log "runs took $(( (SECONDS - start_time) / 60 )) min $(( (SECONDS - start_time) % 60 )) s"

# ----------------------------------------------------------------- report
"$PYTHON" "$SCRIPT_DIR/report.py" "$RESULTS_DIR"

if [[ "$COPY_LATEST" == 1 ]]; then
    latest="$SCRIPT_DIR/results/latest"
    mkdir -p "$SCRIPT_DIR/results"
    rm -rf -- "$latest"
    cp -r "$RESULTS_DIR" "$latest"
    log "report: $RESULTS_DIR/results.md (copied to $latest)"
else
    log "report: $RESULTS_DIR/results.md"
fi
