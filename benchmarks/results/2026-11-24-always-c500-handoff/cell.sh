#!/usr/bin/env bash
# One measured cell of the handoff experiment: `always`, sets only, 1M keys,
# preloaded, then 4 s at CONNS_PER_THREAD x 2 connections and PIPELINE deep,
# with perf counting the server's fdatasyncs, context switches and CPU time
# and vmstat sampling the machine.
#
# Usage: MODE=0|1|2 WORK=/tmp/handoff PROTO=<larder built with handoff.patch>
#        BENCH=<any larder> cell.sh CONNS_PER_THREAD [PIPELINE]
#   MODE 0: as shipped (the connection task awaits the commit)
#   MODE 1: HANDOFF=1, the sync thread sends the replies after the sync
#   MODE 2: HANDOFF=1 REPLIER=1, one replier thread sends them
set -euo pipefail
C=$1; P=${2:-1}; MODE=${MODE:-0}; PORT=${PORT:-22122}
mkdir -p "$WORK"; rm -rf "$WORK/data"
env_mode=()
[[ $MODE != 0 ]] && env_mode+=(HANDOFF=1)
[[ $MODE == 2 ]] && env_mode+=(REPLIER=1)
env "${env_mode[@]}" "$PROTO" serve -p "$PORT" --durability always --data-dir "$WORK/data" \
    > "$WORK/server.log" 2>&1 &
SP=$!
sleep 1
"$BENCH" bench -s "127.0.0.1:$PORT" -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 \
    --requests 1000000 --duration 20s > /dev/null 2>&1
timeout -s INT 5 perf stat -p "$SP" -e syscalls:sys_exit_fdatasync -e context-switches \
    -e task-clock -o "$WORK/perf.txt" &
PERF=$!
sleep 0.3
(sleep 1; vmstat 1 3 | tail -2 | awk '{print "us sy id wa st:", $13, $14, $15, $16, $17}' \
    > "$WORK/vmstat.txt") &
VM=$!
line=$("$BENCH" bench -s "127.0.0.1:$PORT" -t 2 -c "$C" -P "$P" --ratio 0:1 -k 1000000 \
    --duration 4s 2>&1 | grep throughput)
wait "$PERF" "$VM" || true
echo "mode=$MODE $line $(grep -E 'fdatasync|context|task-clock' "$WORK/perf.txt" \
    | awk '{print $1, $2}' | tr '\n' ' ') $(tr '\n' ' ' < "$WORK/vmstat.txt")"
kill "$SP"; wait "$SP" || true
