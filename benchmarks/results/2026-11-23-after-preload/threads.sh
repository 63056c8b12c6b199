#!/bin/bash
# Larder with one worker thread (t1), two (t2) and memcached (mc), one after
# the other, 5 rounds: 1-connection gets without pipelining, 1M keys; three
# 2 s measurements per server process, the first right after the preload.
# Each figure: gets/s / percent of the machine's CPU stolen by the host.
set -u
BENCH=${LARDER:-target/release/larder}; PORT=22151
# host_ticks and steal_percent; run from the repository root. (The
# records were made with the same arithmetic, printed to one decimal.)
source benchmarks/lib.sh
one() {
  local name=$1 D
  D=$(mktemp -d)
  case $name in
    mc) memcached -l 127.0.0.1 -p $PORT -U 0 -t 2 -m 1024 -c 4096 -u root & ;;
    t1) $BENCH serve -l 127.0.0.1 -p $PORT -t 1 -m 1024 -c 4096 --data-dir $D --durability everysec >/dev/null 2>&1 & ;;
    t2) $BENCH serve -l 127.0.0.1 -p $PORT -t 2 -m 1024 -c 4096 --data-dir $D --durability everysec >/dev/null 2>&1 & ;;
  esac
  local sp=$!; sleep 0.5
  $BENCH bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
  local line=$name
  for i in 1 2 3; do
    local a=$(host_ticks)
    local o=$($BENCH bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -q -t 1 -c 1 -P 1 --ratio 1:0 -d 2s --warmup 300ms --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["ops_per_second"]))')
    local b=$(host_ticks)
    line="$line $o/$(steal_percent "$a" "$b")"
  done
  kill $sp; wait $sp 2>/dev/null; rm -rf $D
  echo "$line"
}
for r in 1 2 3 4 5; do one mc; one t1; one t2; done
