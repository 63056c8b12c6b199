#!/bin/bash
# Redis AOF always: 1M keys preloaded, then (with HIST=1 first the set cells
# compare.sh runs before it) 4 s of sets at 500 connections; shows the AOF
# rewrites in its log. Usage: LARDER=path/to/larder [HIST=1] bash redis_rewrite.sh
D=$(mktemp -d); PORT=22499; G=${LARDER:?set LARDER to a larder binary}
redis-server --bind 127.0.0.1 --port $PORT --daemonize no --save '' --appendonly yes --appendfsync always --dir $D --maxclients 4096 --logfile '' > $D/redis.log 2>&1 &
PID=$!; sleep 1
$G bench -s 127.0.0.1:$PORT --protocol redis -k 1000000 -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
sleep 2
if [ -n "$HIST" ]; then
  for cp in 1:1:1 1:1:16 2:25:1 2:25:16; do IFS=: read t c p <<<"$cp"
    $G bench -s 127.0.0.1:$PORT --protocol redis -k 1000000 -v 100 -t $t -c $c -P $p --ratio 0:1 -d 4s --warmup 500ms -q 2>&1 | grep -i "throughput" | head -1
  done
fi
c0=$(awk '{print $14+$15}' /proc/$PID/stat)
$G bench -s 127.0.0.1:$PORT --protocol redis -k 1000000 -v 100 -t 2 -c 250 -P 1 --ratio 0:1 -d 4s --warmup 500ms -q 2>&1 | grep -E "throughput|all "
echo "redis cpu $(( $(awk '{print $14+$15}' /proc/$PID/stat) - c0 )) ticks"
grep -iE "rewrit|fork" $D/redis.log | tail -5
ls -la $D/appendonlydir
kill $PID; wait $PID; rm -rf $D
