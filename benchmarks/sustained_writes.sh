#!/usr/bin/env bash
# Experiment D, sustained writes: does Larder keep its write throughput and
# bound its disk use while compaction runs under a long stream of overwrites?
#
# Starts `larder serve --durability everysec` on its own data directory,
# preloads KEYS keys with VALUE_SIZE-byte values, then overwrites uniformly
# chosen keys of that same set (100% sets) for DURATION, printing and
# recording throughput and latency every INTERVAL (`larder bench --interval`).
# In parallel, every SAMPLE_INTERVAL it records the data directory's disk use
# (du), the server's live/dead bytes, segment count and compaction counters
# (`stats`), and CPU time: the machine's (/proc/stat, steal included) and
# the server's and the load generator's own (/proc/PID/stat), so that a slow
# interval can be put down to the server or to the machine.
# benchmarks/sustained_report.py then writes RESULTS_DIR/<name>.json,
# <name>.md and <name>.svg, and says whether the targets were met: last
# minute's throughput within 10% of the first minute's, and disk use at
# most 2x the live data.
#
# Usage: benchmarks/sustained_writes.sh     (from anywhere; see BENCHMARKS.md)
#
# Settings (environment variables, defaults in brackets):
#   DURATION [10m]          length of the overwrite phase (larder bench -d syntax)
#   INTERVAL [10s]          larder bench --interval
#   SAMPLE_INTERVAL [1s]    time between disk and stats samples (seconds, or
#                           with an ms/s/m suffix)
#   KEYS [1000000]          distinct keys, all preloaded, all overwritten
#   VALUE_SIZE [100]        value bytes
#   CONNS [50]              client connections
#   PIPELINE [1]            requests in flight per connection
#   CLIENT_THREADS [2]      larder bench worker threads
#   SERVER_THREADS [2]      larder serve -t
#   MEMORY_MB [1024]        larder serve -m (value cache)
#   SEGMENT_BYTES []        segment_bytes_max in a --config file; empty: the
#                           server's default (32 MiB)
#   SEED [1]                larder bench --seed
#   LARDER [target/release/larder]  the binary; when not given, the script
#                           runs cargo build --release -p larder first
#   RESULTS_DIR [benchmarks/results/<date>]  where results go; files are
#                           named sustained-writes.* (sustained-writes-2.*, ...
#                           if taken), raw data in <name>-raw/
#   WORK_DIR [mktemp -d under $TMPDIR or /tmp]  the server's data dir and log;
#                           put it on the disk you want measured
#
# The server listens on 127.0.0.1 on a free port and is stopped by its PID
# (a trap stops it and the sampler whatever happens). The script fails if
# the preload or the overwrite phase fails or the server dies; a target that
# is not met is reported, not an error.

set -euo pipefail
# $EPOCHREALTIME and awk print a decimal point whatever the user's locale.
export LC_NUMERIC=C

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
SCRIPT_ARGS=("$0" "$@")

DURATION="${DURATION:-10m}"
INTERVAL="${INTERVAL:-10s}"
SAMPLE_INTERVAL="${SAMPLE_INTERVAL:-1s}"
KEYS="${KEYS:-1000000}"
VALUE_SIZE="${VALUE_SIZE:-100}"
CONNS="${CONNS:-50}"
PIPELINE="${PIPELINE:-1}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"
MEMORY_MB="${MEMORY_MB:-1024}"
SEGMENT_BYTES="${SEGMENT_BYTES:-}"
SEED="${SEED:-1}"
LARDER_GIVEN="${LARDER:-}"
LARDER="${LARDER:-$REPO/target/release/larder}"
PYTHON="${PYTHON:-python3}"
KEY_PREFIX="key:"

log() { printf '[sustained %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- settings
duration_like() {
    [[ "$2" =~ ^[0-9]+(\.[0-9]+)?(ms|s|m|min|h)?$ ]] || die "$1 must be a duration like 500ms, 10s or 10m, not '$2'"
}
positive KEYS "$KEYS"
positive VALUE_SIZE "$VALUE_SIZE"
positive CONNS "$CONNS"
positive PIPELINE "$PIPELINE"
positive CLIENT_THREADS "$CLIENT_THREADS"
positive SERVER_THREADS "$SERVER_THREADS"
positive MEMORY_MB "$MEMORY_MB"
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$SEED'"
[[ -z "$SEGMENT_BYTES" ]] || positive SEGMENT_BYTES "$SEGMENT_BYTES"
duration_like DURATION "$DURATION"
duration_like INTERVAL "$INTERVAL"
duration_like SAMPLE_INTERVAL "$SAMPLE_INTERVAL"

# Seconds (possibly fractional) in a duration like 500ms, 10s, 2m or 1h.
seconds_of() {
    local text="$1" number unit
    number="${text%%[a-z]*}"
    unit="${text#"$number"}"
    case "$unit" in
        ms) awk -v n="$number" 'BEGIN { printf "%.3f", n / 1000 }';;
        ""|s) awk -v n="$number" 'BEGIN { printf "%.3f", n }';;
        m|min) awk -v n="$number" 'BEGIN { printf "%.3f", n * 60 }';;
        h) awk -v n="$number" 'BEGIN { printf "%.3f", n * 3600 }';;
    esac
}
SAMPLE_SECONDS="$(seconds_of "$SAMPLE_INTERVAL")"
awk -v s="$SAMPLE_SECONDS" 'BEGIN { exit !(s >= 0.5) }' || die "SAMPLE_INTERVAL must be at least 500ms, not '$SAMPLE_INTERVAL'"

# The command that repeats this run, every setting spelled out.
INVOCATION="$(printf '%q ' DURATION="$DURATION" INTERVAL="$INTERVAL" SAMPLE_INTERVAL="$SAMPLE_INTERVAL" \
    KEYS="$KEYS" VALUE_SIZE="$VALUE_SIZE" CONNS="$CONNS" PIPELINE="$PIPELINE" \
    CLIENT_THREADS="$CLIENT_THREADS" SERVER_THREADS="$SERVER_THREADS" MEMORY_MB="$MEMORY_MB" \
    SEGMENT_BYTES="$SEGMENT_BYTES" SEED="$SEED" "${SCRIPT_ARGS[@]}")"

# Threads and connections per thread giving exactly CONNS connections.
threads=$CLIENT_THREADS
(( threads > CONNS )) && threads=$CONNS
while (( CONNS % threads != 0 )); do threads=$((threads - 1)); done
per_thread=$((CONNS / threads))

# ------------------------------------------------------------ dependencies
if [[ -z "$LARDER_GIVEN" && "$LARDER" == "$REPO/target/release/larder" ]]; then
    log "building larder (cargo build --release -p larder)"
    (cd "$REPO" && cargo build --release -p larder)
fi
[[ -x "$LARDER" ]] || die "no larder binary at $LARDER"
command -v "$PYTHON" >/dev/null || die "python3 is needed for the report"
"$LARDER" bench --help | grep -q -- '--interval' || die "$LARDER has no 'bench --interval'; rebuild it"

# ------------------------------------------------------------- directories
DATE="$(date +%Y-%m-%d)"
RESULTS_DIR="${RESULTS_DIR:-$SCRIPT_DIR/results/$DATE}"
mkdir -p "$RESULTS_DIR"
NAME=sustained-writes
n=2
while [[ -e "$RESULTS_DIR/$NAME.json" || -e "$RESULTS_DIR/$NAME-raw" ]]; do
    NAME="sustained-writes-$n"
    n=$((n + 1))
done
RAW="$RESULTS_DIR/$NAME-raw"
mkdir -p "$RAW"

if [[ -z "${WORK_DIR:-}" ]]; then
    WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/larder-sustained.XXXXXX")"
    REMOVE_WORK_DIR=1
else
    mkdir -p "$WORK_DIR"
    WORK_DIR="$(mktemp -d "$WORK_DIR/larder-sustained.XXXXXX")"
    REMOVE_WORK_DIR=1
fi
DATA_DIR="$WORK_DIR/data"
mkdir -p "$DATA_DIR"
SAMPLER_STOP="$WORK_DIR/sampler.stop"

# ------------------------------------------------------- process lifecycle
SERVER_PID=""
SAMPLER_PID=""
BENCH_PID=""

stop_everything() {
    touch "$SAMPLER_STOP" 2>/dev/null || true
    stop_pid "$BENCH_PID" "larder bench"
    stop_pid "$SAMPLER_PID" sampler
    stop_pid "$SERVER_PID" larder
}
on_exit_stop stop_everything

# ------------------------------------------------------------------ server
PORT="$(free_port)"
SERVER_LOG="$RAW/server.log"
serve_args=(serve -l 127.0.0.1 -p "$PORT" -t "$SERVER_THREADS" -m "$MEMORY_MB" -c 4096
    --data-dir "$DATA_DIR" --durability everysec)
if [[ -n "$SEGMENT_BYTES" ]]; then
    printf 'segment_bytes_max = %s\n' "$SEGMENT_BYTES" >"$RAW/larder.toml"
    serve_args+=(--config "$RAW/larder.toml")
fi
"$LARDER" "${serve_args[@]}" >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
if ! wait_for_port "$PORT" "$SERVER_PID" 400; then
    tail -n 20 "$SERVER_LOG" >&2 || true
    die "larder did not start listening on 127.0.0.1:$PORT"
fi
log "larder on 127.0.0.1:$PORT (pid $SERVER_PID), data in $DATA_DIR"

common_bench=(bench -s "127.0.0.1:$PORT" -k "$KEYS" -v "$VALUE_SIZE" --key-prefix "$KEY_PREFIX"
    --ratio 0:1 --json)
preload_args=("${common_bench[@]}" --preload -t "$threads" -c 4 -n 1 -q --seed "$SEED")
overwrite_args=("${common_bench[@]}" --key-pattern uniform -t "$threads" -c "$per_thread"
    -P "$PIPELINE" -d "$DURATION" --interval "$INTERVAL" --seed "$SEED")

# ------------------------------------------------------------ machine info
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2}') ($(free -b | awk '/^Mem:/ {print $2}') bytes)"
    echo "kernel: $(uname -sr)"
    echo "work_dir_fs: $(df -T "$WORK_DIR" | awk 'NR==2 {print $1" "$2}')"
    if command -v lsblk >/dev/null; then
        echo "disks: $(lsblk -d -n -o NAME,TYPE,ROTA,SIZE 2>/dev/null | tr -s ' ' | paste -sd ';' -)"
    fi
    echo "larder: $("$LARDER" --version), binary built $(date -u -r "$LARDER" +%Y-%m-%dT%H:%M:%SZ), tree HEAD $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ has uncommitted changes)')"
    echo "settings: DURATION=$DURATION INTERVAL=$INTERVAL SAMPLE_INTERVAL=$SAMPLE_INTERVAL KEYS=$KEYS VALUE_SIZE=$VALUE_SIZE CONNS=$CONNS PIPELINE=$PIPELINE CLIENT_THREADS=$CLIENT_THREADS SERVER_THREADS=$SERVER_THREADS MEMORY_MB=$MEMORY_MB SEGMENT_BYTES=${SEGMENT_BYTES:-default} SEED=$SEED"
    echo "key_prefix: $KEY_PREFIX"
    echo "sample_interval: $SAMPLE_SECONDS"
    echo "clock_ticks_per_second: $(getconf CLK_TCK)"
    echo "invocation: $INVOCATION"
    echo "server_command: $(printf '%q ' "$LARDER" "${serve_args[@]}")"
    echo "preload_command: $(printf '%q ' "$LARDER" "${preload_args[@]}")"
    echo "overwrite_command: $(printf '%q ' "$LARDER" "${overwrite_args[@]}")"
    if [[ -n "$SEGMENT_BYTES" ]]; then echo "server_config: $(tr '\n' ' ' <"$RAW/larder.toml")"; fi
} >"$RAW/machine.txt"
log "machine: $(grep -E '^(nproc|memory|work_dir_fs):' "$RAW/machine.txt" | tr '\n' ' ')"
note_larder_io larder "$SERVER_LOG" "$RAW/machine.txt"
log "larder serves its connections on $(sed -n 's/^io_larder: //p' "$RAW/machine.txt")"

# ----------------------------------------------------------------- preload
log "preloading $KEYS keys of $VALUE_SIZE bytes"
"$LARDER" "${preload_args[@]}" >"$RAW/preload.json" 2>"$RAW/preload.stderr" \
    || die "preload failed: $(tail -n 3 "$RAW/preload.stderr" | tr '\n' ' ')"

# ----------------------------------------------------------------- sampler
# One JSON object per line: wall time, du of the data dir (allocated and
# apparent bytes), the server's figures about live and dead data, segments
# and compaction, and cumulative CPU ticks: the machine's ("cpu_ticks", the
# first line of /proc/stat by name) and the server's and the load
# generator's user + system time ("server_cpu_ticks", "client_cpu_ticks").
STAT_FIELDS="curr_items bytes larder_disk_bytes larder_live_bytes larder_dead_bytes larder_segments
larder_compactions larder_compaction_bytes_read larder_compaction_bytes_written
larder_log_bytes_written larder_write_errors larder_writes_failing"

CPU_FIELDS=(user nice system idle iowait irq softirq steal)

# utime + stime of a process in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the parenthesised command name), or null.
process_ticks() {
    local pid="$1" stat
    [[ -n "$pid" ]] && stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || { echo null; return; }
    stat="${stat##*) }"
    awk '{ print $12 + $13 }' <<<"$stat"
}

sample_once() {
    local now du_bytes apparent_bytes stats field value json json_cpu cpu i
    local server_ticks client_ticks
    # The CPU figures first and together, so that they describe one moment.
    now="$EPOCHREALTIME"
    read -r -a cpu </proc/stat
    server_ticks="$(process_ticks "$SERVER_PID")"
    client_ticks="$(process_ticks "$BENCH_PID")"
    json_cpu=""
    for i in "${!CPU_FIELDS[@]}"; do
        json_cpu+="${json_cpu:+, }\"${CPU_FIELDS[$i]}\": ${cpu[$((i + 1))]}"
    done
    # Files come and go under compaction: du may complain about one it
    # listed and could not stat; its total is still the directory's.
    du_bytes="$(du -s -B1 "$DATA_DIR" 2>/dev/null | awk '{print $1}')" || true
    apparent_bytes="$(du -s -b "$DATA_DIR" 2>/dev/null | awk '{print $1}')" || true
    stats="$(server_stats "$PORT" 2>/dev/null)" || stats=""
    json="{\"time\": $now, \"du_bytes\": ${du_bytes:-null}, \"du_apparent_bytes\": ${apparent_bytes:-null}"
    json+=", \"cpu_ticks\": {$json_cpu}, \"server_cpu_ticks\": $server_ticks, \"client_cpu_ticks\": $client_ticks"
    for field in $STAT_FIELDS; do
        value="$(stat_value "$field" <<<"$stats")"
        [[ "$value" =~ ^[0-9]+$ ]] || value=null
        json+=", \"$field\": $value"
    done
    printf '%s}\n' "$json"
}

sampler() {
    local next now
    next="$EPOCHREALTIME"
    while [[ ! -e "$SAMPLER_STOP" ]]; do
        sample_once
        next="$(awk -v t="$next" -v s="$SAMPLE_SECONDS" 'BEGIN { printf "%.6f", t + s }')"
        # Sleep in short steps so that a stop request is seen quickly.
        while [[ ! -e "$SAMPLER_STOP" ]]; do
            now="$EPOCHREALTIME"
            awk -v n="$now" -v t="$next" 'BEGIN { exit !(n < t) }' || break
            sleep 0.2
        done
    done
}

# -------------------------------------------------------------- overwrites
log "overwriting uniformly chosen keys for $DURATION, $CONNS connections, pipeline $PIPELINE; a line every $INTERVAL"
echo "$EPOCHREALTIME" >"$RAW/overwrite-start.txt"
# In the background, so that a signal to this script runs its trap at once
# instead of after the whole phase (bash defers traps while a foreground
# command runs, but not while it waits).
"$LARDER" "${overwrite_args[@]}" >"$RAW/overwrite.json" 2> >(tee "$RAW/overwrite.stderr" >&2) &
BENCH_PID=$!
# The sampler starts once the load generator's PID is known (it reads
# $BENCH_PID), so that its first sample already has its CPU time. The last
# sample, taken here after the load generator has exited, has none.
sampler >"$RAW/samples.jsonl" &
SAMPLER_PID=$!
bench_status=0
wait "$BENCH_PID" || bench_status=$?
BENCH_PID=""
echo "$EPOCHREALTIME" >"$RAW/overwrite-end.txt"
# One more sample after the last write, then stop the sampler.
sample_once >>"$RAW/samples.jsonl.end"
touch "$SAMPLER_STOP"
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""
cat "$RAW/samples.jsonl.end" >>"$RAW/samples.jsonl"
rm -f "$RAW/samples.jsonl.end"

kill -0 "$SERVER_PID" 2>/dev/null || die "larder died during the run; see $SERVER_LOG"
server_stats "$PORT" >"$RAW/stats-end.txt" || log "warning: could not read the final stats"
(( bench_status == 0 )) || die "the overwrite phase failed (exit $bench_status); see $RAW/overwrite.stderr"
stop_pid "$SERVER_PID" larder
SERVER_PID=""

# ------------------------------------------------------------------ report
"$PYTHON" "$SCRIPT_DIR/sustained_report.py" "$RESULTS_DIR" "$NAME"
log "report: $RESULTS_DIR/$NAME.md"
