#!/usr/bin/env bash
# Alternating pairs: two servers (or two builds of Larder) measured one after
# the other on one cell, again and again, so that a small difference can be
# told from this machine's drift. Gives the median of the per-pair ratios
# B/A of throughput and of p99, each side's server CPU per request and the
# CPU the host stole; for a Larder, also the bytes compaction wrote per byte
# logged and its compactor thread's CPU per request.
#
# Usage: A=SPEC B=SPEC benchmarks/pairs.sh          (see BENCHMARKS.md)
#
# SPEC is a server name as compare.sh knows it (memcached, redis-none,
# redis-everysec, redis-always, larder-none, larder-everysec, larder-always,
# each Larder also with -uring for --io uring or -epoll for --io epoll, e.g.
# larder-everysec-epoll, and without either on its default, --io auto),
# and for Larder optionally ":BINARY", e.g.
#   A=larder-always:/tmp/old/larder B=larder-always benchmarks/pairs.sh
# A Larder without a binary is LARDER (below).
#
# Settings (environment variables, defaults in brackets):
#   PAIRS [6]             pairs to run; the order alternates (A B, B A, ...)
#   WORKLOAD [set]        get = 1:0, set = 0:1, mix = 90:10 gets:sets
#   CONNS [500]           connections, spread over CLIENT_THREADS
#   PIPELINE [1]          requests in flight per connection
#   KEYS [100000]         distinct keys, all preloaded
#   VALUE_SIZE [100]      value bytes
#   MEMCACHED_PROTOCOL [memcached]  what larder bench speaks to memcached and
#                         Larder: memcached (the text protocol) or binary
#   ZIPF_SKEW [unset]     keys of the measured phase drawn uniformly; set, drawn
#                         zipfian with this skew (0.99: a few hot keys)
#   DURATION [4s]         measured phase of each run
#   WARMUP [500ms]        warm-up before it (not counted)
#   CLIENT_THREADS [2]    larder bench worker threads
#   SERVER_THREADS [2]    memcached -t / larder -t
#   MEMORY_MB [1024]      memcached -m / larder -m
#   SERVER_CPUS [unset]   CPU list (taskset -c) to pin every server to
#   CLIENT_CPUS [unset]   CPU list to pin every measured larder bench run to
#   LARDER [target/release/larder]  the load generator, and the Larder of a
#                         side that names no binary; when not given, the
#                         script runs cargo build --release -p larder first
#   RESULTS_DIR [benchmarks/results/<date>-pairs]  where results go
#   WORK_DIR [mktemp -d under $TMPDIR or /tmp]  data directories and logs
#   INSTALL [1]           0: never apt-get; fail if a server is missing
#   SETTLE_SECONDS_MAX [30]  after each preload, wait until the machine is
#                         quiet (see settle in lib.sh), at most this long;
#                         0: no wait
#
# Each run starts its server afresh on a free port of 127.0.0.1 with an
# empty data directory, preloads every key, measures, and stops the server
# by its PID (a trap stops whatever is still running on exit). The server's
# CPU (all threads, from /proc/PID/stat) is read around the larder bench run.

set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"

A="${A:-}"
B="${B:-}"
PAIRS="${PAIRS:-6}"
WORKLOAD="${WORKLOAD:-set}"
CONNS="${CONNS:-500}"
PIPELINE="${PIPELINE:-1}"
KEYS="${KEYS:-100000}"
VALUE_SIZE="${VALUE_SIZE:-100}"
ZIPF_SKEW="${ZIPF_SKEW:-}"
DURATION="${DURATION:-4s}"
WARMUP="${WARMUP:-500ms}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"
MEMORY_MB="${MEMORY_MB:-1024}"
SERVER_CPUS="${SERVER_CPUS:-}"
CLIENT_CPUS="${CLIENT_CPUS:-}"
INSTALL="${INSTALL:-1}"
SETTLE_SECONDS_MAX="${SETTLE_SECONDS_MAX:-30}"
PYTHON="${PYTHON:-python3}"
TREE_LARDER="$REPO/target/release/larder"

log() { printf '[pairs %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- settings
[[ -n "$A" && -n "$B" ]] || die "set A and B to the two servers to compare, e.g. A=larder-always:/tmp/old/larder B=larder-always"
for setting in PAIRS CONNS PIPELINE KEYS VALUE_SIZE CLIENT_THREADS SERVER_THREADS MEMORY_MB; do
    positive "$setting" "${!setting}"
done
RATIO="$(ratio_of "$WORKLOAD")"
KEY_PATTERN=()
if [[ -n "$ZIPF_SKEW" ]]; then
    [[ "$ZIPF_SKEW" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "ZIPF_SKEW must be a number like 0.99, not '$ZIPF_SKEW'"
    KEY_PATTERN=(--key-pattern zipfian --zipf-skew "$ZIPF_SKEW")
fi
whole_number SETTLE_SECONDS_MAX "$SETTLE_SECONDS_MAX"
(( CONNS % CLIENT_THREADS == 0 )) || die "CONNS ($CONNS) must be a multiple of CLIENT_THREADS ($CLIENT_THREADS)"

# The load generator, and the Larder of a side that names no binary: the
# tree's build unless LARDER names another.
LARDER_GIVEN="${LARDER:-}"
LARDER="${LARDER:-$TREE_LARDER}"

# side_name SPEC / side_binary SPEC: the server name and Larder binary of a
# SPEC (the binary is empty for other servers).
side_name() { echo "${1%%:*}"; }
side_binary() {
    local spec="$1"
    case "$spec" in
        larder-*:*) echo "${spec#*:}";;
        larder-*) echo "$LARDER";;
        *) echo "";;
    esac
}
for spec in "$A" "$B"; do
    known_server "$(side_name "$spec")"
    if [[ "$spec" == *:* && "$spec" != larder-*:* ]]; then
        die "only a Larder server takes a binary: '$spec'"
    fi
    if [[ "$spec" == *: ]]; then die "no binary after ':' in '$spec'"; fi
    if [[ "$spec" == larder-*:* && ! -x "${spec#*:}" ]]; then die "no larder binary at ${spec#*:}"; fi
done

SERVER_PIN=() CLIENT_PIN=()   # taskset prefixes, empty when not pinned
cpu_pin SERVER_PIN "$SERVER_CPUS"
cpu_pin CLIENT_PIN "$CLIENT_CPUS"

# ------------------------------------------------------------ dependencies
needed=()
for spec in "$A" "$B"; do
    case "$(side_name "$spec")" in
        memcached) needed+=(memcached);;
        redis-*) needed+=(redis-server);;
    esac
done
[[ ${#needed[@]} -gt 0 ]] && install_packages "${needed[@]}"
if [[ -z "$LARDER_GIVEN" ]]; then
    # Build (a no-op when up to date) so the binary used is the tree's.
    log "building larder (cargo build --release -p larder)"
    (cd "$REPO" && cargo build --release -p larder)
fi
[[ -x "$LARDER" ]] || die "no larder binary at $LARDER"
command -v "$PYTHON" >/dev/null || die "python3 is needed for the report"
want_descriptors $(( CONNS * 2 + 256 ))

# ------------------------------------------------------------- directories
if [[ -z "${RESULTS_DIR:-}" ]]; then
    RESULTS_DIR="$(fresh_results_dir "$SCRIPT_DIR/results/$(date +%Y-%m-%d)-pairs")"
fi
RAW="$RESULTS_DIR/raw"
if compgen -G "$RAW/pair*" >/dev/null; then
    die "$RESULTS_DIR already holds a run; give a new RESULTS_DIR"
fi
mkdir -p "$RAW"
COMMANDS="$RAW/commands.txt"   # every server and larder bench command, in order
: >"$COMMANDS"
use_work_dir pairs

declare -A SERVER_PID=()   # side (A or B) -> pid of its running server
on_exit_stop stop_all_servers

# ------------------------------------------------------------ machine info
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    machine_facts
    kv_server_versions
    for side in A B; do
        spec="${!side}"
        binary="$(side_binary "$spec")"
        if [[ -n "$binary" ]]; then
            echo "larder_$side: $(larder_facts "$binary"), sha256 $(sha256sum "$binary" | cut -c1-16)"
        fi
    done
    echo "load_generator: $(larder_facts "$LARDER")"
    # Larder reads no LARDER_* variables, but an experimental build might.
    echo "environment: $(env | grep -E '^LARDER_' | sort | tr '\n' ' ')"
    echo "settings: A='$A' B='$B' PAIRS=$PAIRS WORKLOAD=$WORKLOAD CONNS=$CONNS PIPELINE=$PIPELINE KEYS=$KEYS VALUE_SIZE=$VALUE_SIZE MEMCACHED_PROTOCOL=${MEMCACHED_PROTOCOL:-memcached} ZIPF_SKEW='$ZIPF_SKEW' DURATION=$DURATION WARMUP=$WARMUP SETTLE_SECONDS_MAX=$SETTLE_SECONDS_MAX CLIENT_THREADS=$CLIENT_THREADS SERVER_THREADS=$SERVER_THREADS MEMORY_MB=$MEMORY_MB SERVER_CPUS='$SERVER_CPUS' CLIENT_CPUS='$CLIENT_CPUS'"
} >"$RESULTS_DIR/machine.txt"
log "machine: $(tr '\n' '|' <"$RESULTS_DIR/machine.txt")"

# ------------------------------------------------------------------- runs
# run_side SIDE PAIR: one run of side A or B: start, preload, measure, stop.
# Writes raw/pairPAIR-SIDE.json (larder bench), .cpu (the server's CPU
# seconds over the whole larder bench run: connecting, warm-up, measuring;
# for Larder also its compactor thread's, `larder-compact`)
# .steal (the percent of the machine's CPU time the host stole then) and
# .settle (how long it waited after the preload for the machine to be quiet).
run_side() {
    local side="$1" pair="$2" spec name binary port dir logf pid cmd=()
    spec="${!side}"
    name="$(side_name "$spec")"
    binary="$(side_binary "$spec")"
    port="$(free_port)"
    dir="$WORK_DIR/pair$pair-$side"
    logf="$dir.log"
    mkdir -p "$dir"
    server_command cmd "$name" "$port" "$dir" "$binary"
    cmd=("${SERVER_PIN[@]}" "${cmd[@]}")
    record "pair $pair $side start" "${cmd[@]}"
    "${cmd[@]}" >"$logf" 2>&1 &
    pid=$!
    SERVER_PID[$side]=$pid
    if ! wait_for_port "$port" "$pid"; then
        tail -n 20 "$logf" >&2 || true
        die "$spec did not start listening on 127.0.0.1:$port"
    fi
    [[ "$name" == larder-* ]] && note_larder_io "$side" "$logf" "$RESULTS_DIR/machine.txt"
    local bench=("$LARDER" bench -s "127.0.0.1:$port" --protocol "$(protocol_of "$name")" -k "$KEYS" -v "$VALUE_SIZE" -q)
    local preload=("${bench[@]}" --preload -t "$CLIENT_THREADS" -c 4 --ratio 1:0 -n 1 --seed "$pair" --json)
    record "pair $pair $side preload" "${preload[@]}"
    "${preload[@]}" >"$RAW/pair$pair-$side.preload.json" 2>"$logf.preload" \
        || die "preload of $spec failed: $(tail -n 3 "$logf.preload" | tr '\n' ' ')"
    local settled
    settled="$(settle "$SETTLE_SECONDS_MAX")"
    echo "$settled" >"$RAW/pair$pair-$side.settle"
    local measure=("${CLIENT_PIN[@]}" "${bench[@]}" -t "$CLIENT_THREADS" -c "$((CONNS / CLIENT_THREADS))"
        -P "$PIPELINE" --ratio "$RATIO" "${KEY_PATTERN[@]}" -d "$DURATION" --warmup "$WARMUP" --seed "$pair" --json)
    record "pair $pair $side measure" "${measure[@]}"
    local cpu_before cpu_after ticks_before
    larder_stats "$name" "$port" "$RAW/pair$pair-$side.stats-before"
    cpu_before="$(cpu_reading "$name" "$pid")" || die "$spec (pid $pid) exited before its run"
    ticks_before="$(host_ticks)"
    "${measure[@]}" >"$RAW/pair$pair-$side.json.tmp" 2>"$logf.bench" \
        || die "larder bench against $spec failed: $(tail -n 3 "$logf.bench" | tr '\n' ' ')"
    write_steal "$RAW/pair$pair-$side.steal" "$ticks_before" "$(host_ticks)"
    cpu_after="$(cpu_reading "$name" "$pid")" || die "$spec (pid $pid) exited during its run"
    larder_stats "$name" "$port" "$RAW/pair$pair-$side.stats-after"
    mv "$RAW/pair$pair-$side.json.tmp" "$RAW/pair$pair-$side.json"
    write_cpu "$RAW/pair$pair-$side.cpu" "$cpu_before" "$cpu_after"
    stop_server "$side"
    rm -rf -- "$dir"
    local summary
    summary="$("$PYTHON" "$SCRIPT_DIR/pairs_report.py" --line "$RAW/pair$pair-$side.json")" \
        || die "cannot read the run in $RAW/pair$pair-$side.json"
    log "  pair $pair $side ($spec): $summary; after the preload, waited ${settled/ / s, machine }"
}

# larder_stats NAME PORT FILE: for a Larder, its `stats` into FILE (the
# report takes the bytes logged and compacted during the run from them).
larder_stats() {
    [[ "$1" == larder-* ]] || return 0
    server_stats "$2" >"$3" || die "cannot read the stats of $1 on 127.0.0.1:$2"
}

log "$PAIRS pairs of $WORKLOAD, $CONNS connections, pipeline $PIPELINE, $DURATION each: A=$A B=$B; results in $RESULTS_DIR"
for ((pair = 1; pair <= PAIRS; pair++)); do
    if (( pair % 2 == 1 )); then order=(A B); else order=(B A); fi
    for side in "${order[@]}"; do run_side "$side" "$pair"; done
done

"$PYTHON" "$SCRIPT_DIR/pairs_report.py" "$RESULTS_DIR"
log "report: $RESULTS_DIR/pairs.md"
