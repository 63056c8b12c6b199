#!/usr/bin/env bash
# How the record in cpu.txt was taken (run by hand, not part of the suite):
# memcached and Larder `everysec` running side by side, 1M keys of 100
# bytes preloaded into each, then RUNS alternating runs of gets at 50
# connections without pipelining (4 s after 0.5 s of warm-up, each after a
# wait for a quiet machine). Per run: ops/s, and the CPU time per request
# of the server (all threads, /proc/PID/stat) and of the load generator
# (user and system, from /usr/bin/time), both divided by ops/s x 4.5 s
# (the warm-up counted as if at the measured rate, alike for both).
#
# Usage, from the repository root:
#   benchmarks/results/2026-11-25-get-c50-cpu/cpu.sh RUNS
set -euo pipefail
# settle, free_port, server_command, wait_for_port, cpu_seconds.
source benchmarks/lib.sh
PYTHON=python3; SERVER_THREADS=2; MEMORY_MB=1024
B=target/release/larder
declare -A PID PORT
W=$(mktemp -d)
trap 'for n in "${!PID[@]}"; do kill ${PID[$n]} 2>/dev/null || true; done; wait; rm -rf $W' EXIT
for name in memcached larder-everysec; do
  port=$(free_port); mkdir -p $W/$name
  server_command cmd "$name" "$port" "$W/$name" $B
  "${cmd[@]}" > $W/$name.log 2>&1 &
  PID[$name]=$!; PORT[$name]=$port
  wait_for_port $port ${PID[$name]}
  $B bench -s 127.0.0.1:$port -k 1000000 -v 100 -q --json --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
done
for ((r = 1; r <= $1; r++)); do
  order="memcached larder-everysec"; (( r % 2 == 0 )) && order="larder-everysec memcached"
  for name in $order; do
    settle 30 >/dev/null
    s0=$(cpu_seconds ${PID[$name]})
    /usr/bin/time -f "%U %S" -o $W/time $B bench -s 127.0.0.1:${PORT[$name]} -k 1000000 -v 100 -q --json -t 2 -c 25 -P 1 --ratio 1:0 -d 4s --warmup 500ms --seed $r > $W/out.json
    s1=$(cpu_seconds ${PID[$name]})
    python3 - "$W/out.json" "$W/time" "$s0" "$s1" "$name" "$r" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); u, s = map(float, open(sys.argv[2]).read().split()[-2:])
ops = d["ops_per_second"]
n = ops * 4.5
print(f"run {sys.argv[6]} {sys.argv[5]:16s} {ops:8.0f} ops/s  server {1e6*(float(sys.argv[4])-float(sys.argv[3]))/n:5.1f} us/req  client {1e6*(u+s)/n:5.1f} us/req (user {1e6*u/n:4.1f} sys {1e6*s/n:4.1f})")
PY
  done
done
