#!/usr/bin/env bash
# How the record in syscalls.txt was taken (run by hand, not part of the
# suite; needs perf and the syscall tracepoints, so root): a fresh Larder
# under `everysec`, then memcached, each with KEYS keys of 100 bytes
# preloaded and the 90:10 mix at 500 connections without pipelining for
# 4 s; per server, the system calls it made per request (perf stat over the
# run, warm-up included, divided by ops/s times 4.5 s).
#
# Usage: benchmarks/results/2026-11-23-mix-cpu/syscalls.sh BINARY [KEYS] [LOADGEN]
set -euo pipefail
BIN=$1
KEYS=${2:-1000000}
BENCH=${3:-target/release/larder}
PORT=${PORT:-22185}
EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,context-switches
# record_larder, settle, stop_pid; run from the repository root.
source benchmarks/lib.sh
measure() {
    local pid=$1 name=$2 counts ops
    settle 30 >/dev/null
    counts=$(mktemp)
    perf stat -x, -e "$EVENTS" -p "$pid" -o "$counts" -- sleep 4.6 &
    local perf_pid=$!
    ops=$("$BENCH" bench -s "127.0.0.1:$PORT" -k "$KEYS" -v 100 -q -t 2 -c 250 -P 1 --ratio 9:1 \
        -d 4s --warmup 500ms --seed 1 --json | ops_per_second)
    wait "$perf_pid"
    echo "$name: $ops ops/s; per request:"
    awk -F, -v ops="$ops" '/^[0-9]/ { printf "  %-32s %6.3f\n", $3, $1 / (ops * 4.5) }' "$counts"
    rm -f "$counts"
}
record_larder "$BIN" "$BENCH" everysec "$PORT" "$KEYS"
measure "$RECORD_PID" larder
stop_pid "$RECORD_PID" larder
rm -rf "$RECORD_DIR"
trap - EXIT
memcached -l 127.0.0.1 -p "$PORT" -t 2 -m 1024 -c 4096 -u nobody &
MEMCACHED_PID=$!
trap 'stop_pid "$MEMCACHED_PID" memcached' EXIT
wait_for_port "$PORT" "$MEMCACHED_PID"
"$BENCH" bench -s "127.0.0.1:$PORT" -k "$KEYS" -v 100 -q --preload -t 2 -c 4 --ratio 1:0 -n 1 >/dev/null
measure "$MEMCACHED_PID" memcached
