#!/usr/bin/env bash
# slices.sh SERVER OUTDIR: one run of gets at 500 connections (2 client
# threads x 250, 1M keys preloaded, 8 s measured) against a fresh server
# (larder | memcached, two worker threads each), with every thread's
# scheduler figures read 2 s into the run and 5 s later: time on a CPU and
# time runnable but waiting (/proc/TID/schedstat), and voluntary and
# involuntary context switches (/proc/TID/status), for the server's and
# the load generator's threads. Prints one line per busy thread, then the
# run's throughput and latency.
#
# Environment: LARDER [target/release/larder] the server under test when
# SERVER=larder; BENCH [LARDER] the load generator; SLICE_NS [unset] a
# scheduler slice (sched_setattr, Linux 6.12+) set on the server's worker
# threads after the preload, with setslice (gcc -O2 -o setslice setslice.c).
set -euo pipefail
S=$1; OUT=$2; mkdir -p "$OUT"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
L=${LARDER:-target/release/larder}
BENCH=${BENCH:-$L}
PORT=$((20000 + RANDOM % 20000))
D=$(mktemp -d)
if [ "$S" = larder ]; then
  "$L" serve -l 127.0.0.1 -p $PORT -t 2 -m 1024 -c 4096 --data-dir "$D" --durability everysec >"$OUT/server.log" 2>&1 & SP=$!
else
  memcached -l 127.0.0.1 -p $PORT -U 0 -t 2 -m 1024 -c 4096 -u nobody & SP=$!
fi
trap 'kill $SP 2>/dev/null || true; rm -rf "$D"' EXIT
sleep 1
"$BENCH" bench -s 127.0.0.1:$PORT -t 2 -c 250 --ratio 0:1 -k 1000000 --preload -n 1 -q >/dev/null 2>&1 || true
sleep 8
if [ -n "${SLICE_NS:-}" ]; then
  for t in /proc/$SP/task/*; do
    case $(cat "$t/comm") in larder-worker|mc-worker) "$HERE/setslice" "$SLICE_NS" "$(basename "$t")";; esac
  done
fi
snap() { for t in /proc/$1/task/*; do echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(cat "$t/schedstat") $(grep -E '^(voluntary|nonvoluntary)_ctxt' "$t/status" | awk '{print $2}' | tr '\n' ' ')"; done; }
"$BENCH" bench -s 127.0.0.1:$PORT -t 2 -c 250 --ratio 1:0 -k 1000000 -d 8s --warmup 500ms --json >"$OUT/bench.json" 2>/dev/null & CP=$!
sleep 2
snap $SP > "$OUT/s0.txt"; snap $CP > "$OUT/c0.txt"
sleep 5
snap $SP > "$OUT/s1.txt"; snap $CP > "$OUT/c1.txt"
wait $CP
kill $SP; wait $SP 2>/dev/null || true
python3 - "$OUT" <<'PY'
import sys, json
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        p = l.split(); d[p[0]] = (p[1], *map(int, p[2:]))
    return d
for side in 's', 'c':
    a = rd(f'{o}/{side}0.txt'); b = rd(f'{o}/{side}1.txt')
    for t in b:
        if t not in a: continue
        n = b[t][0]; run = (b[t][1]-a[t][1])/1e9; wait = (b[t][2]-a[t][2])/1e9; sl = b[t][3]-a[t][3]
        vol = b[t][4]-a[t][4]; inv = b[t][5]-a[t][5]
        if run < 0.01: continue
        print(f"{side} {n:18s} run {run:5.2f}s wait {wait:5.2f}s slices {sl:7d} vol {vol:7d} invol {inv:6d} avg-wait/slice {wait/max(sl,1)*1e6:7.1f}us avg-run/slice {run/max(sl,1)*1e6:7.1f}us")
j = json.load(open(f'{o}/bench.json'))
a = j['latency']['all']
print(f"ops/s {j['ops_per_second']:.0f} mean {a['mean_us']:.0f} p50 {a['p50_us']:.0f} p90 {a['p90_us']:.0f} p99 {a['p99_us']:.0f} p999 {a['p999_us']:.0f}")
PY
