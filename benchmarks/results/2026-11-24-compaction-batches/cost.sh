#!/usr/bin/env bash
# How cost.txt was taken (run by hand, not part of the suite): for each
# BINARY in turn, RUNS times, a fresh Larder under `everysec` with 1M keys of
# 100 bytes preloaded, the wait for a quiet machine, then sets at 50
# connections, pipeline 16, for 4 s after 0.5 s of warm-up; per run, ops/s,
# the compactor thread's CPU over the run, the bytes compaction read, and
# the compactor's CPU per MB read, and the segment files' bytes per live
# byte at the end.
#
# Usage: benchmarks/results/2026-11-24-compaction-batches/cost.sh RUNS LOADGEN BINARY...
set -euo pipefail
RUNS=$1
LOADGEN=$2
shift 2
PORT=${PORT:-22189}
# record_larder, settle, thread_ticks, thread_ms, server_stats, stat_value,
# ops_per_second, stop_pid; run from the repository root.
source benchmarks/lib.sh
for ((run = 1; run <= RUNS; run++)); do
    for bin in "$@"; do
        record_larder "$bin" "$LOADGEN" everysec "$PORT" 1000000
        settle 30 >/dev/null
        read_before=$(server_stats "$PORT" | stat_value larder_compaction_bytes_read)
        thread_ticks "$RECORD_PID" >"$RECORD_DIR/before"
        ops=$("$LOADGEN" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 2 -c 25 -P 16 --ratio 0:1 \
            -d 4s --warmup 500ms --seed "$run" --json | ops_per_second)
        thread_ticks "$RECORD_PID" >"$RECORD_DIR/after"
        server_stats "$PORT" >"$RECORD_DIR/stats"
        read_after=$(stat_value larder_compaction_bytes_read <"$RECORD_DIR/stats")
        disk=$(stat_value larder_disk_bytes <"$RECORD_DIR/stats")
        live=$(stat_value larder_live_bytes <"$RECORD_DIR/stats")
        compact_ms=$(thread_ms "$RECORD_DIR/before" "$RECORD_DIR/after" | awk '$1 == "larder-compact" { print $2 }')
        awk -v bin="$bin" -v run="$run" -v ops="$ops" -v ms="${compact_ms:-0}" \
            -v bytes="$((read_after - read_before))" -v disk="$disk" -v live="$live" 'BEGIN {
            mb = bytes / 1e6
            printf "%s run %d: %d ops/s; compactor %d ms, read %.0f MB, %.2f ms per MB; disk %.2fx live\n",
                bin, run, ops, ms, mb, (mb > 0 ? ms / mb : 0), disk / live
        }'
        stop_pid "$RECORD_PID" larder
        rm -rf "$RECORD_DIR"
        trap - EXIT
    done
done
