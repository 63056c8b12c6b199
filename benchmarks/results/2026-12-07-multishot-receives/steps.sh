#!/usr/bin/env bash
# Experiment B's shape by hand, two builds in alternating pairs: the server
# (`-t 1`, everysec) on vCPU 1 over a Unix domain socket, `larder bench -t
# 100 -c 1` (100 connections, one request in flight each) on vCPU 0, gets of
# KEYS preloaded keys, 1 s of warm-up and 8 s measured. Prints, per run, the
# build, its throughput and its server's CPU (all threads, /proc/PID/stat,
# over warm-up and measured phase) per request.
#
# Usage: steps.sh OLD_BINARY NEW_BINARY PAIRS [extra serve arguments]
set -euo pipefail
OLD=$1; NEW=$2; PAIRS=$3; shift 3
BENCH=${BENCH:-target/release/larder}
KEYS=${KEYS:-100000}
WORK=$(mktemp -d)
PID=
trap '[[ -n $PID ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

run() {
    local name=$1 binary=$2; shift 2
    rm -rf "$WORK/data" "$WORK/sock"
    taskset -c 1 "$binary" serve --data-dir "$WORK/data" -s "$WORK/sock" -t 1 \
        --durability everysec "$@" > "$WORK/log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do [[ -S $WORK/sock ]] && break; sleep 0.1; done
    "$BENCH" bench -s "$WORK/sock" -t 100 -c 1 -k "$KEYS" --ratio 0:1 -n "$KEYS" \
        --preload -q -d 1s > /dev/null
    local before after
    before=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    taskset -c 0 "$BENCH" bench -s "$WORK/sock" -t 100 -c 1 -k "$KEYS" --ratio 1:0 \
        -d 8s --warmup 1s -q > "$WORK/bench"
    after=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    kill "$PID"; wait "$PID" || true; PID=
    python3 - "$name" "$WORK/bench" "$before" "$after" <<'PY'
import re, sys
name, path, before, after = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rate = int(re.search(r"throughput\s+(\d+) ops/s", open(path).read()).group(1))
ticks = after - before  # 10 ms each
print(f"{name} {rate} ops/s, server CPU {ticks * 10_000 / (rate * 9):.2f} us/request")
PY
}

for pair in $(seq "$PAIRS"); do
    if (( pair % 2 )); then
        run "$pair old" "$OLD" "$@"; run "$pair new" "$NEW" "$@"
    else
        run "$pair new" "$NEW" "$@"; run "$pair old" "$OLD" "$@"
    fi
done
