#!/bin/bash
# memcached: 1-connection gets without pipelining right after a 1M-key
# preload (pause 0) or 8 s after it (pause 8); two 2 s measurements each.
# Each: gets/s / percent of CPU stolen by the host [CPU ticks of memcached's
# threads by name, before -> after].
set -u
BENCH=${LARDER:-target/release/larder}; PORT=22152
# host_ticks and steal_percent; run from the repository root. (The
# records were made with the same arithmetic, printed to one decimal.)
source benchmarks/lib.sh
thr() { for t in /proc/$1/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | awk '{a[$1]+=$2} END {for (k in a) printf "%s=%d ", k, a[k]}'; }
for pause in 0 8 0 8 0 8; do
  memcached -l 127.0.0.1 -p $PORT -U 0 -t 2 -m 1024 -c 4096 -u root & sp=$!; sleep 0.5
  $BENCH bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
  sleep $pause
  line="pause $pause:"
  for i in 1 2; do
    a=$(host_ticks); c0=$(thr $sp)
    o=$($BENCH bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -q -t 1 -c 1 -P 1 --ratio 1:0 -d 2s --warmup 300ms --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["ops_per_second"]))')
    b=$(host_ticks); c1=$(thr $sp)
    line="$line $o/$(steal_percent "$a" "$b") [$c0 -> $c1]"
  done
  kill $sp; wait $sp 2>/dev/null
  echo "$line"
done
