#!/usr/bin/env bash
# How rotations.txt was taken (run by hand, not part of the suite; needs
# strace): for each BINARY, a fresh Larder under `everysec` (or DURABILITY,
# as for ../2026-11-24-none-rotation/rotations.txt) with 1M keys of
# 100 bytes preloaded, the wait for a quiet machine, then sets at 50
# connections, pipeline 16, for 4 s after 0.5 s of warm-up, with strace
# timing the server's fdatasync calls. Prints how long each fdatasync on a
# request thread took: those are the rotations', made under the log lock
# while every append waits. strace slows the server several times over, so
# the throughput printed is not comparable with other runs.
#
# Usage: benchmarks/results/2026-11-24-presync/rotations.sh LOADGEN BINARY...
set -euo pipefail
LOADGEN=$1
shift
PORT=${PORT:-22192}
DURABILITY=${DURABILITY:-everysec}
# record_larder, settle, ops_per_second, stop_pid; run from the repository root.
source benchmarks/lib.sh
for bin in "$@"; do
    record_larder "$bin" "$LOADGEN" "$DURABILITY" "$PORT" 1000000
    settle 30 >/dev/null
    workers=$(for task in /proc/"$RECORD_PID"/task/*; do
        if [[ "$(cat "$task/comm")" == larder-worker ]]; then basename "$task"; fi
    done | tr '\n' ' ')
    strace -f -qq -e trace=fdatasync -T -p "$RECORD_PID" -o "$RECORD_DIR/strace" &
    strace_pid=$!
    sleep 0.5
    ops=$("$LOADGEN" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 2 -c 25 -P 16 --ratio 0:1 \
        -d 4s --warmup 500ms --json | ops_per_second)
    stop_pid "$strace_pid" strace
    echo "$bin: $ops ops/s under strace; fdatasync on request threads (ms):" \
        "$(awk -v workers=" $workers" 'index(workers, " " $1 " ") && /fdatasync/ {
            gsub(/[<>]/, "", $NF); printf "%.1f ", $NF * 1000 }' "$RECORD_DIR/strace")"
    stop_pid "$RECORD_PID" larder
    rm -rf "$RECORD_DIR"
    trap - EXIT
done
