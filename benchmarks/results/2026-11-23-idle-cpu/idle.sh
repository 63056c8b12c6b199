#!/usr/bin/env bash
# How the record in idle.txt was taken (run by hand, not part of the suite):
# one Larder build under `everysec`, KEYS keys of 100 bytes that never
# expire preloaded, 5 s of rest, then the CPU time each of the server's
# threads (by name) used over 10 s of idleness, from /proc/PID/task/*/stat
# (10 ms ticks).
#
# Usage: benchmarks/results/2026-11-23-idle-cpu/idle.sh BINARY [KEYS] [LOADGEN]
set -euo pipefail
BIN=$1
KEYS=${2:-1000000}
BENCH=${3:-target/release/larder}
PORT=${PORT:-22182}
WORK=$(mktemp -d)
"$BIN" serve -l 127.0.0.1 -p "$PORT" -t 2 -m 1024 -c 4096 --data-dir "$WORK/data" \
    --durability everysec >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 0.5
"$BENCH" bench -s "127.0.0.1:$PORT" -k "$KEYS" -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
sleep 5
# "thread-name ticks" per thread name, summed over threads of that name.
ticks() {
    for task in /proc/"$SERVER"/task/*; do
        echo "$(cat "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
    done | awk '{sum[$1] += $2} END {for (name in sum) print name, sum[name]}' | sort
}
ticks >"$WORK/before"
sleep 10
ticks >"$WORK/after"
join "$WORK/before" "$WORK/after" | awk '$1 ~ /^larder-/ && $1 != "larder" {printf "%s %d ms  ", $1, ($3 - $2) * 10}'
echo
