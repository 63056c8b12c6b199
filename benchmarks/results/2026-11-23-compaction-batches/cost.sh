#!/usr/bin/env bash
# How the record in cost.txt was taken (run by hand, not part of the suite):
# one Larder build under `everysec`, 1M keys of 100 bytes preloaded, then
# 20 s of pipelined sets (50 connections, pipeline 16) over the same keys,
# which keeps compaction busy. Reports the sets per second, the CPU time of
# the compactor thread and of the request threads over the run (from
# /proc/PID/task/*/stat; time the host stole is not in it), and the
# compaction counters of `stats`: the compactor's CPU per MiB of segments
# it read is the figure to compare between builds; per MiB it freed (read
# less written) also depends on how dead the segments were when taken.
#
# Usage: benchmarks/results/2026-11-23-compaction-batches/cost.sh BINARY [LOADGEN]
set -euo pipefail
BIN=$1
BENCH=${2:-target/release/larder}
PORT=${PORT:-22184}
# record_larder, thread_ticks, server_stats and stat_value; run from the
# repository root.
source benchmarks/lib.sh
record_larder "$BIN" "$BENCH" everysec "$PORT" 1000000
WORK=$RECORD_DIR
sleep 2
thread_ticks "$RECORD_PID" >"$WORK/before"
stats_before=$(server_stats "$PORT")
read_before=$(stat_value larder_compaction_bytes_read <<<"$stats_before")
written_before=$(stat_value larder_compaction_bytes_written <<<"$stats_before")
"$BENCH" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 2 -c 25 -P 16 --ratio 0:1 \
    -d 20s --warmup 500ms --json >"$WORK/bench.json"
thread_ticks "$RECORD_PID" >"$WORK/after"
stats_after=$(server_stats "$PORT")
read_after=$(stat_value larder_compaction_bytes_read <<<"$stats_after")
written_after=$(stat_value larder_compaction_bytes_written <<<"$stats_after")
compactor=$(thread_ms "$WORK/before" "$WORK/after" | stat_value larder-compact)
compactor=${compactor:-0}
workers=$(thread_ms "$WORK/before" "$WORK/after" | stat_value larder-worker)
workers=${workers:-0}
python3 - "$WORK/bench.json" "$compactor" "$workers" "$read_before" "$read_after" \
    "$written_before" "$written_after" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
compactor, workers = int(sys.argv[2]), int(sys.argv[3])
read_mib = (int(sys.argv[5]) - int(sys.argv[4])) / 2**20
written_mib = (int(sys.argv[7]) - int(sys.argv[6])) / 2**20
freed_mib = read_mib - written_mib
per_read = f"{compactor / read_mib:.2f} ms" if read_mib else "-"
per_freed = f"{compactor / freed_mib:.2f} ms" if freed_mib > 0 else "-"
print(f"sets/s {run['ops_per_second']:.0f}  compactor CPU {compactor} ms  request threads CPU {workers} ms  "
      f"compaction read {read_mib:.0f} MiB, wrote {written_mib:.0f} MiB  "
      f"compactor CPU per MiB read {per_read}, per MiB freed {per_freed}")
PY
