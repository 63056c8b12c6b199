#!/usr/bin/env bash
# How the record in idle.txt was taken (run by hand, not part of the suite):
# one Larder build under `everysec`, KEYS keys of 100 bytes that never
# expire preloaded, 5 s of rest, then the CPU time each of the server's
# threads (by name) used over 10 s of idleness, from /proc/PID/task/*/stat
# (10 ms ticks).
#
# Usage: benchmarks/results/2026-11-23-idle-cpu/idle.sh BINARY [KEYS] [LOADGEN]
set -euo pipefail
BIN=$1
KEYS=${2:-1000000}
BENCH=${3:-target/release/larder}
PORT=${PORT:-22182}
# record_larder and thread_ticks; run from the repository root.
source benchmarks/lib.sh
record_larder "$BIN" "$BENCH" everysec "$PORT" "$KEYS"
WORK=$RECORD_DIR
sleep 5
thread_ticks "$RECORD_PID" >"$WORK/before"
sleep 10
thread_ticks "$RECORD_PID" >"$WORK/after"
thread_ms "$WORK/before" "$WORK/after" | awk '$1 ~ /^larder-/ && $1 != "larder" {printf "%s %d ms  ", $1, $2}'
echo
