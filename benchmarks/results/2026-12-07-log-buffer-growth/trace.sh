#!/usr/bin/env bash
# The sustained-write run of benchmarks/sustained_writes.sh (1M keys of 100
# bytes preloaded, then uniform overwrites from 2 client threads of 25
# connections, 10 minutes, `everysec`), by hand, with a bpftrace script
# watching the server's threads. Run from the repository root, as root
# (bpftrace needs it); installs bpftrace from Debian packages unless
# INSTALL=0. For user stacks, build with frame pointers:
#   CARGO_TARGET_DIR=/tmp/larder-fp RUSTFLAGS="-C force-frame-pointers=yes" \
#     cargo build --release -p larder
# Usage: trace.sh SCRIPT.bt [LARDER_BINARY]; DURATION [10m].
# Writes the trace, the client's JSON report and the thread names to a new
# directory under ${TMPDIR:-/tmp}, named on the last line (the server's
# data directory is removed at the end); summary.py DIR/trace.txt
# DIR/bench.json reads them.
set -euo pipefail
PYTHON=python3
INSTALL=${INSTALL:-1}
source benchmarks/lib.sh
script=$(realpath "$1")
larder=${2:-target/release/larder}
install_packages bpftrace
# bpftrace finds the tracepoints in tracefs, which a fresh machine may not
# have mounted.
if [[ ! -e /sys/kernel/tracing/available_events ]]; then
    mount -t tracefs tracefs /sys/kernel/tracing
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/larder-trace.XXXXXX")
server= tracer=
stop() {
    [[ -n "$tracer" ]] && kill -INT "$tracer" 2>/dev/null && wait "$tracer" || true
    stop_pid "$server" larder
    rm -rf -- "$work/data"
}
on_exit_stop stop
port=$(free_port)
"$larder" serve -l 127.0.0.1 -p "$port" -t 2 -m 1024 -c 4096 --data-dir "$work/data" \
    --durability everysec > "$work/server.log" 2>&1 &
server=$!
wait_for_port "$port" "$server" || die "larder did not start listening on 127.0.0.1:$port"
for t in /proc/$server/task/*; do echo "$(basename "$t") $(cat "$t/comm")"; done > "$work/threads"
"$larder" bench -s "127.0.0.1:$port" -k 1000000 -v 100 --key-prefix key: --ratio 0:1 --json \
    --preload -t 2 -c 4 -n 1 -q --seed 1 > "$work/preload.json"
bpftrace "$script" "$server" > "$work/trace.txt" 2>&1 &
tracer=$!
sleep 3
"$larder" bench -s "127.0.0.1:$port" -k 1000000 -v 100 --key-prefix key: --ratio 0:1 --json \
    --key-pattern uniform -t 2 -c 25 -P 1 -d "${DURATION:-10m}" --interval 10s --seed 1 \
    > "$work/bench.json" 2> "$work/bench.err"
echo "$work"
