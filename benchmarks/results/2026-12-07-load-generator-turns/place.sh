#!/usr/bin/env bash
# Where the four busy threads of gets at 500 connections sit: Larder
# (`-t 2`, its two ring threads) and `larder bench -t 2 -c 250` on two
# vCPUs, each thread placed with `taskset -p` once it exists (the client's
# within 150 ms of its start, before its warm-up ends).
#   MODE=mixed  ring 0 and client thread 0 on vCPU 0, the others on vCPU 1
#   MODE=split  both rings on vCPU 1, both client threads on vCPU 0
#   MODE=rings  ring 0 on vCPU 0, ring 1 on vCPU 1, the client free
#   MODE=free   nothing placed
# Usage: MODE=... place.sh [RESTARTS, 2]   (LARDER, PORT as in runs.sh)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RESTARTS=${1:-2}
LARDER=${LARDER:-target/release/larder}
PORT=${PORT:-22122}
WORK=$(mktemp -d); PID=
trap '[[ -n $PID ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
threads_named() { # PID PREFIX: the thread ids of PID whose name starts with PREFIX
    local task
    for task in /proc/"$1"/task/*; do
        [[ $(cat "$task/comm") == "$2"* ]] && basename "$task"
    done
}
for start in $(seq "$RESTARTS"); do
    rm -rf "$WORK/data"
    "$LARDER" serve --data-dir "$WORK/data" -l 127.0.0.1 -p "$PORT" -t 2 -m 1024 -c 4096 \
        > "$WORK/log" 2>&1 &
    PID=$!
    sleep 0.5
    "$LARDER" bench -s "127.0.0.1:$PORT" -t 2 -c 4 -k 1000000 --ratio 0:1 -n 1 --preload -q > /dev/null
    mapfile -t rings < <(threads_named "$PID" larder-ring-)
    for run in 1 2; do
        "$LARDER" bench -s "127.0.0.1:$PORT" -t 2 -c 250 -k 1000000 --ratio 1:0 -d 4s \
            --warmup 500ms --json -q > "$WORK/out.json" &
        client=$!
        sleep 0.15
        mapfile -t workers < <(threads_named "$client" larder-bench)
        case ${MODE:-free} in
            mixed) taskset -pc 0 "${rings[0]}"; taskset -pc 1 "${rings[1]}"
                   taskset -pc 0 "${workers[0]}"; taskset -pc 1 "${workers[1]}";;
            split) taskset -pc 1 "${rings[0]}"; taskset -pc 1 "${rings[1]}"
                   for worker in "${workers[@]}"; do taskset -pc 0 "$worker"; done;;
            rings) taskset -pc 0 "${rings[0]}"; taskset -pc 1 "${rings[1]}";;
            free) ;;
        esac > /dev/null
        wait "$client"
        python3 "$HERE/summary.py" "${MODE:-free} start $start run $run" "$WORK/out.json"
    done
    kill "$PID"; wait "$PID" || true; PID=
done
