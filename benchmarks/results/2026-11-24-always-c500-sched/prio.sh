#!/bin/bash
# usage: prio.sh LARDER_BIN none|nice-10|nice-20|fifo|sliceN DURATION  (the sync thread: as shipped, reniced, SCHED_FIFO 1, or SCHED_OTHER with an N-µs slice)
BIN=$1; PRIO=$2; DUR=${3:-8s}; MODE=${MODE:-always}
rm -rf ${WORK:-/tmp/larder-sched}/d1; mkdir -p ${WORK:-/tmp/larder-sched}/d1
$BIN serve -l 127.0.0.1 -p 22122 -t ${SERVER_THREADS:-2} -m 1024 -c 4096 --data-dir ${WORK:-/tmp/larder-sched}/d1 --durability $MODE >${WORK:-/tmp/larder-sched}/server.log 2>&1 &
PID=$!
sleep 0.5
SYNC=$(for t in /proc/$PID/task/*; do [ "$(cat $t/comm)" = larder-sync ] && basename $t; done)
case $PRIO in
  nice-10) renice -n -10 -p $SYNC >/dev/null;;
  nice-20) renice -n -20 -p $SYNC >/dev/null;;
  fifo) chrt -f -p 1 $SYNC;;
  slice*) "$(dirname "$0")"/setslice $SYNC $(( ${PRIO#slice} * 1000 )) 2>/dev/null;;
esac
$BIN bench -s 127.0.0.1:22122 -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --preload --duration 1s >/dev/null 2>&1
S0=$(cat /proc/$PID/task/$SYNC/schedstat); read -r _ u n s i w rest < /proc/stat; I0=$((i+w)); A0=$((u+n+s+i+w))
R=$($BIN bench -s 127.0.0.1:22122 -t 2 -c 250 -P 1 --ratio 0:1 -k 1000000 --duration $DUR 2>/dev/null | awk '/^throughput/ {t=$2} /^all/ {p50=$2; p99=$4} END {print t, p50, p99}')
S1=$(cat /proc/$PID/task/$SYNC/schedstat); read -r _ u n s i w rest < /proc/stat; I1=$((i+w)); A1=$((u+n+s+i+w))
F=$(python3 "$(dirname "$0")"/stats.py 22122 | awk '$1=="larder_fsyncs"{f=$2} $1=="larder_fsync_micros_total"{m=$2} END {printf "%d %.0f", f, m/f}')
echo "$PRIO $R idle% $(( 100*(I1-I0)/(A1-A0) )) syncwait_ms $(( ($(echo $S1|cut -d' ' -f2) - $(echo $S0|cut -d' ' -f2))/1000000 )) fsyncs,avg_us $F"
kill $PID; wait $PID
