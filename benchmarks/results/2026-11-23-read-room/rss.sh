#!/usr/bin/env bash
# How the record in rss.txt was taken (run by hand, not part of the suite):
# one Larder build under `always`, 100k keys of 100 bytes preloaded, then
# 5.5 s of sets from 500 connections (2 threads of 250); the server's
# resident memory (VmRSS) before the run, 1 s into it and 4 s into it.
#
# Usage: benchmarks/results/2026-11-23-read-room/rss.sh BINARY [LOADGEN]
set -euo pipefail
BIN=$1
BENCH=${2:-target/release/larder}
PORT=${PORT:-22179}
# record_larder; run from the repository root.
source benchmarks/lib.sh
record_larder "$BIN" "$BENCH" always "$PORT" 100000
WORK=$RECORD_DIR
rss() { awk '/^VmRSS/ {print $2}' "/proc/$RECORD_PID/status"; }
before=$(rss)
"$BENCH" bench -s "127.0.0.1:$PORT" -k 100000 -v 100 -q -t 2 -c 250 -P 1 --ratio 0:1 \
    -d 5s --warmup 500ms --json >"$WORK/bench.json" &
LOAD=$!
sleep 1
at1=$(rss)
sleep 3
at4=$(rss)
wait $LOAD
echo "VmRSS KiB: before $before, at 1 s $at1, at 4 s $at4; 1 s to 4 s: +$((at4 - at1))"
