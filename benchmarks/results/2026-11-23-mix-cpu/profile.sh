#!/usr/bin/env bash
# How profile-run1.txt and profile-run3.txt were taken (run by hand, not
# part of the suite; needs perf): RUNS times, a fresh Larder under
# `everysec` with KEYS keys of 100 bytes preloaded, the wait for a quiet
# machine, then the 90:10 mix at 500 connections without pipelining for 4 s
# while `perf record` samples the server; prints each run's ops/s and
# leaves OUT/perfN.data for `perf report` (the records are the reports of
# the fastest and the slowest run).
#
# Usage: benchmarks/results/2026-11-23-mix-cpu/profile.sh BINARY OUT [RUNS] [KEYS] [LOADGEN]
set -euo pipefail
BIN=$1
OUT=$2
RUNS=${3:-6}
KEYS=${4:-1000000}
BENCH=${5:-target/release/larder}
PORT=${PORT:-22184}
# record_larder, settle, stop_pid; run from the repository root.
source benchmarks/lib.sh
mkdir -p "$OUT"
for ((run = 1; run <= RUNS; run++)); do
    record_larder "$BIN" "$BENCH" everysec "$PORT" "$KEYS"
    settle 30 >/dev/null
    perf record -q -F 499 -g -p "$RECORD_PID" -o "$OUT/perf$run.data" -- sleep 4.6 >/dev/null 2>&1 &
    perf_pid=$!
    ops=$("$BENCH" bench -s "127.0.0.1:$PORT" -k "$KEYS" -v 100 -q -t 2 -c 250 -P 1 --ratio 9:1 \
        -d 4s --warmup 500ms --seed "$run" --json | ops_per_second)
    wait "$perf_pid"
    echo "run $run: $ops ops/s, profile in $OUT/perf$run.data"
    stop_pid "$RECORD_PID" larder
    rm -rf "$RECORD_DIR"
    trap - EXIT
done
