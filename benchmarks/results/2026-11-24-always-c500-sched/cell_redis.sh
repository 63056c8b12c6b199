#!/bin/bash
# usage: cell_redis.sh LARDER_BIN  (Redis AOF always through the sequence of cell.sh; larder bench is the client)
BIN=$1
rm -rf ${WORK:-/tmp/larder-sched}/r1; mkdir -p ${WORK:-/tmp/larder-sched}/r1
redis-server --bind 127.0.0.1 --port 22124 --dir ${WORK:-/tmp/larder-sched}/r1 --appendonly yes --appendfsync always --save '' --maxclients 4096 --daemonize no >${WORK:-/tmp/larder-sched}/redis.log 2>&1 &
PID=$!
sleep 0.5
$BIN bench -s 127.0.0.1:22124 --protocol redis -t 2 -c 4 --ratio 1:0 -n 1 -k 1000000 --preload >/dev/null 2>&1
sleep 2
$BIN bench -s 127.0.0.1:22124 --protocol redis -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --duration 4s --warmup 500ms >/dev/null 2>&1
R=$($BIN bench -s 127.0.0.1:22124 --protocol redis -t 2 -c 250 -P 1 --ratio 0:1 -k 1000000 --duration 4s --warmup 500ms 2>/dev/null | awk '/^throughput/ {t=$2} /^all/ {p50=$2; p99=$4} END {print t, p50, p99}')
echo "redis $R"
kill $PID; wait $PID
