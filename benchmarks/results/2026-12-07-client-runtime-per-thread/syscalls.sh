#!/usr/bin/env bash
# The system calls of one `larder bench -t 100 -c 1` run of 100,000 gets
# (strace -f -c) against a Larder on a Unix domain socket.
# Usage: syscalls.sh CLIENT_BINARY [SERVER_BINARY, the client]
set -euo pipefail
CLIENT=$1; SERVER=${2:-$1}
WORK=$(mktemp -d); SOCK=$WORK/larder.sock
"$SERVER" serve --data-dir "$WORK/data" -s "$SOCK" -t 2 -m 2048 -c 4096 > "$WORK/log" 2>&1 &
PID=$!
trap 'kill "$PID"; wait "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
"$SERVER" bench -s "$SOCK" -t 2 -c 4 -k 100000 -v 30 --ratio 0:1 -n 1 --preload -q > /dev/null
strace -f -c -o "$WORK/strace.txt" "$CLIENT" bench -s "$SOCK" -t 100 -c 1 -k 100000 \
    --ratio 1:0 -n 100000 --warmup 0s --json -q > /dev/null
head -20 "$WORK/strace.txt"
