#!/usr/bin/env bash
# Gets at one connection, pipeline 16, 1M keys of 100 bytes: memcached and
# Larder (everysec) alternating, each server started afresh, preloaded, then
# measured N times in a row for 2 s each. Prints, per measurement, gets/s,
# the server's CPU per get and the CPU time the host stole from this VM
# (all vCPUs, from /proc/stat) during it. Run from the repository root
# after `cargo build --release -p larder`.
#
# The CPU per get is the server's CPU over the warm-up and the measured
# phase (and two python3 start-ups) divided by the measured requests, in
# whole µs: it reads high by about the warm-up's share (15%), alike for
# both servers, so only the comparison between them means anything.
set -euo pipefail
BENCH=${LARDER:-target/release/larder}
PAIRS=${PAIRS:-6}; N=${N:-5}; PORT=${PORT:-22131}
pid=
dir=$(mktemp -d)
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
steal() { awk '/^cpu /{print $9}' /proc/stat; }

one_server() {
    local name=$1
    rm -rf "$dir/data"; mkdir "$dir/data"
    if [[ $name == memcached ]]; then
        memcached -l 127.0.0.1 -p "$PORT" -U 0 -t 2 -m 1024 -c 4096 -u root &
    else
        "$BENCH" serve -l 127.0.0.1 -p "$PORT" -t 2 -m 1024 -c 4096 \
            --data-dir "$dir/data" --durability everysec >/dev/null 2>&1 &
    fi
    pid=$!
    sleep 0.5
    "$BENCH" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q --preload -t 2 -c 4 \
        --ratio 1:0 -n 1 >/dev/null
    local line="$name"
    for _ in $(seq "$N"); do
        local t0 s0 out ops req
        t0=$(ticks "$pid"); s0=$(steal)
        out=$("$BENCH" bench -s "127.0.0.1:$PORT" -k 1000000 -v 100 -q -t 1 -c 1 -P 16 \
            --ratio 1:0 -d 2s --warmup 300ms --json)
        ops=$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["ops_per_second"]))' <<<"$out")
        req=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])' <<<"$out")
        # /proc ticks are 10 ms; the server's over warm-up and measured phase
        line="$line | $ops/s $(( ($(ticks "$pid") - t0) * 10000 / req )) us/get steal $(( $(steal) - s0 ))"
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    echo "$line"
}

for i in $(seq "$PAIRS"); do
    if (( i % 2 )); then one_server memcached; one_server larder; else one_server larder; one_server memcached; fi
done
