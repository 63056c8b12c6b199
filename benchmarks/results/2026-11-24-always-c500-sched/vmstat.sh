#!/bin/bash
# usage: MODE=always|everysec vmstat.sh LARDER_BIN  (vmstat during the 500-connection sets)
BIN=$1; MODE=${MODE:-always}
rm -rf ${WORK:-/tmp/larder-sched}/d1; mkdir -p ${WORK:-/tmp/larder-sched}/d1
$BIN serve -l 127.0.0.1 -p 22122 -t 2 -m 1024 -c 4096 --data-dir ${WORK:-/tmp/larder-sched}/d1 --durability $MODE >${WORK:-/tmp/larder-sched}/server.log 2>&1 &
PID=$!
sleep 0.5
$BIN bench -s 127.0.0.1:22122 -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --preload --duration 1s >/dev/null 2>&1
$BIN bench -s 127.0.0.1:22122 -t 2 -c 250 -P 1 --ratio 0:1 -k 1000000 --duration 6s 2>/dev/null | grep -E "^throughput" &
B=$!
sleep 3
vmstat 1 4
wait $B
kill $PID; wait $PID
