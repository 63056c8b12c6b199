#!/usr/bin/env bash
# How stats.txt was taken (run by hand, not part of the suite): a fresh
# Larder under `everysec` with 1M keys of 100 bytes preloaded, the wait for a
# quiet machine, 0.5 s of warm-up and 4 s of sets at 50 connections,
# pipeline 16; then the server's compaction and space figures.
# BINARY was a build of 911996e with dead-marks.diff applied
# (`git apply benchmarks/results/2026-11-24-dead-marks/dead-marks.diff`).
#
# Usage: benchmarks/results/2026-11-24-dead-marks/stats.sh BINARY [LOADGEN]
set -euo pipefail
BIN=$1
BENCH=${2:-target/release/larder}
PORT=${PORT:-22187}
# record_larder, settle, server_stats, stop_pid; run from the repository root.
source benchmarks/lib.sh
record_larder "$BIN" "$BENCH" everysec "$PORT" 1000000
settle 30 >/dev/null
"$BENCH" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 2 -c 25 -P 16 --ratio 0:1 \
    -d 4s --warmup 500ms --json >/dev/null
server_stats "$PORT" | grep -E "compaction|live_bytes|disk_bytes|segments"
stop_pid "$RECORD_PID" larder
