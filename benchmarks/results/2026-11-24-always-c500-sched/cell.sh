#!/bin/bash
# usage: cell.sh LARDER_BIN default|nice10
# compare.sh-like sequence: preload, set c50 P16 4.5 s, then set c500 P1 4.5 s (measured)
BIN=$1; PRIO=$2; MODE=${MODE:-always}
rm -rf ${WORK:-/tmp/larder-sched}/d1; mkdir -p ${WORK:-/tmp/larder-sched}/d1
$BIN serve -l 127.0.0.1 -p 22122 -t 2 -m 1024 -c 4096 --data-dir ${WORK:-/tmp/larder-sched}/d1 --durability $MODE >${WORK:-/tmp/larder-sched}/server.log 2>&1 &
PID=$!
sleep 0.5
COMP=$(for t in /proc/$PID/task/*; do [ "$(cat $t/comm)" = larder-compact ] && basename $t; done)
case $PRIO in
  nice*) renice -n ${PRIO#nice} -p $COMP >/dev/null;;
  batch) chrt -b -p 0 $COMP;;
esac
$BIN bench -s 127.0.0.1:22122 -t 2 -c 4 --ratio 1:0 -n 1 -k 1000000 --preload >/dev/null 2>&1
sleep 2
$BIN bench -s 127.0.0.1:22122 -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --duration 4s --warmup 500ms >/dev/null 2>&1
C0=$(awk '{print $14+$15}' /proc/$PID/task/$COMP/stat)
R=$($BIN bench -s 127.0.0.1:22122 -t 2 -c 250 -P 1 --ratio 0:1 -k 1000000 --duration 4s --warmup 500ms 2>/dev/null | awk '/^throughput/ {t=$2} /^all/ {p50=$2; p99=$4} END {print t, p50, p99}')
C1=$(awk '{print $14+$15}' /proc/$PID/task/$COMP/stat)
echo "$PRIO $R compactor_ticks $((C1-C0))"
kill $PID; wait $PID
