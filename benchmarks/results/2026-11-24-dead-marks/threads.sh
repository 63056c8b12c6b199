#!/usr/bin/env bash
# How threads.txt was taken (run by hand, not part of the suite): RUNS
# times, a fresh Larder under `everysec` with 1M keys of 100 bytes
# preloaded, the wait for a quiet machine, then sets at 50 connections,
# pipeline 16, for 4 s after 0.5 s of warm-up; per run, ops/s and the CPU
# time each of the server's threads (by name) used over the run.
#
# Usage: benchmarks/results/2026-11-24-dead-marks/threads.sh BINARY [RUNS] [LOADGEN]
set -euo pipefail
BIN=$1
RUNS=${2:-3}
BENCH=${3:-target/release/larder}
PORT=${PORT:-22186}
MS_PER_TICK=$((1000 / $(getconf CLK_TCK)))
# record_larder, thread_ticks, settle, stop_pid; run from the repository root.
source benchmarks/lib.sh
for ((run = 1; run <= RUNS; run++)); do
    record_larder "$BIN" "$BENCH" everysec "$PORT" 1000000
    settle 30 >/dev/null
    thread_ticks "$RECORD_PID" >"$RECORD_DIR/before"
    ops=$("$BENCH" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 2 -c 25 -P 16 --ratio 0:1 \
        -d 4s --warmup 500ms --seed "$run" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["ops_per_second"]))')
    thread_ticks "$RECORD_PID" >"$RECORD_DIR/after"
    printf 'run %d: %s ops/s; ms of CPU: ' "$run" "$ops"
    join "$RECORD_DIR/before" "$RECORD_DIR/after" \
        | awk -v ms="$MS_PER_TICK" '{ d = ($3 - $2) * ms; if (d > 0) printf "%s %d  ", $1, d }'
    echo
    stop_pid "$RECORD_PID" larder
    rm -rf "$RECORD_DIR"
    trap - EXIT
done
