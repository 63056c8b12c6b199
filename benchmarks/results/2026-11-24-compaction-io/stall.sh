#!/bin/bash
# Larder `always`, 1M keys preloaded, then sets at 500 connections for
# DURATION (20s); prints the run's summary and, every second, the server's
# segment count, worst fdatasync so far and compactions. See results.txt.
# Usage: BIN=path/to/larder bash stall.sh
set -u
BIN=${BIN:?set BIN to a larder binary}; PORT=${PORT:-22799}
WORK=$(mktemp -d); D=$WORK/data
"$BIN" serve -l 127.0.0.1 -p "$PORT" -t 2 -m 1024 -c 4096 --data-dir "$D" --durability always >"$WORK/serve.log" 2>&1 &
PID=$!; sleep 1
"$BIN" bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
sleep 2
stats() { python3 -c "import socket,time;s=socket.create_connection(('127.0.0.1',$PORT));s.sendall(b'stats\r\n');time.sleep(0.2);print(s.recv(65536).decode())" | grep -E "larder_compactions |fsync_micros_max|larder_segments" | tr -d '\r' | awk '{printf "%s=%s ", $2, $3}'; }
"$BIN" bench -s 127.0.0.1:$PORT -k 1000000 -v 100 -t 2 -c 250 -P 1 --ratio 0:1 -d "${DURATION:-20s}" --warmup 500ms -q >"$WORK/bench.txt" 2>&1 &
B=$!
while kill -0 $B 2>/dev/null; do echo "$(date +%S.%N | cut -c1-5) $(stats)"; sleep 1; done >"$WORK/stats.txt"
grep -E "throughput|all " "$WORK/bench.txt"; cat "$WORK/stats.txt"
kill $PID; wait $PID; rm -rf "$WORK"
