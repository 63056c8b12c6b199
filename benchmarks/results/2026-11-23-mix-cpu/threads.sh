#!/usr/bin/env bash
# How the record in threads.txt was taken (run by hand, not part of the
# suite): RUNS times, a fresh Larder under `everysec` with KEYS keys of 100
# bytes preloaded, the wait for a quiet machine, then the 90:10 mix at 500
# connections without pipelining for 4 s; per run, ops/s and the CPU time
# each of the server's threads (by name) used during the measured run.
#
# Usage: benchmarks/results/2026-11-23-mix-cpu/threads.sh BINARY [RUNS] [KEYS] [LOADGEN]
set -euo pipefail
BIN=$1
RUNS=${2:-6}
KEYS=${3:-1000000}
BENCH=${4:-target/release/larder}
PORT=${PORT:-22183}
MS_PER_TICK=$((1000 / $(getconf CLK_TCK)))
# record_larder, thread_ticks, settle, stop_pid; run from the repository root.
source benchmarks/lib.sh
for ((run = 1; run <= RUNS; run++)); do
    record_larder "$BIN" "$BENCH" everysec "$PORT" "$KEYS"
    settle 30 >/dev/null
    thread_ticks "$RECORD_PID" >"$RECORD_DIR/before"
    ops=$("$BENCH" bench -s "127.0.0.1:$PORT" -k "$KEYS" -v 100 -q -t 2 -c 250 -P 1 --ratio 9:1 \
        -d 4s --warmup 500ms --seed "$run" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["ops_per_second"]))')
    thread_ticks "$RECORD_PID" >"$RECORD_DIR/after"
    printf 'run %d: %s ops/s; ms of CPU: ' "$run" "$ops"
    join "$RECORD_DIR/before" "$RECORD_DIR/after" | awk -v ms="$MS_PER_TICK" '{ d = ($3 - $2) * ms; if (d > 0) printf "%s %d  ", $1, d }'
    echo
    stop_pid "$RECORD_PID" larder
    rm -rf "$RECORD_DIR"
    trap - EXIT
done
