#!/usr/bin/env bash
# The hand runs of "The load generator's turns" (benchmarks/HISTORY.md):
# one server at a time on 127.0.0.1:$PORT, preloaded with 1M keys of 100
# bytes, then RUNS runs of 4 s (+500 ms warm-up) of `larder bench`, each
# printing its rate and latency percentiles (ms figures in µs), for
# RESTARTS fresh starts of the server. Outputs were not kept; the figures
# are in the section.
#
# Usage: runs.sh larder|memcached RESTARTS RUNS [extra server arguments]
# Settings: LARDER [target/release/larder] (server and client), PORT
# [22122], SERVER_CPUS and CLIENT_CPUS [0,1] (taskset -c lists),
# SERVER_THREADS [2], CLIENT_THREADS [2], CONNS_PER_THREAD [250],
# RATIO [1:0] (gets:sets).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SERVER=$1; RESTARTS=$2; RUNS=$3; shift 3
LARDER=${LARDER:-target/release/larder}
PORT=${PORT:-22122}
WORK=$(mktemp -d); PID=
trap '[[ -n $PID ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
for start in $(seq "$RESTARTS"); do
    rm -rf "$WORK/data"
    case $SERVER in
        larder) taskset -c "${SERVER_CPUS:-0,1}" "$LARDER" serve --data-dir "$WORK/data" \
                    -l 127.0.0.1 -p "$PORT" -t "${SERVER_THREADS:-2}" -m 1024 -c 4096 "$@" \
                    > "$WORK/log" 2>&1 &;;
        memcached) taskset -c "${SERVER_CPUS:-0,1}" memcached -l 127.0.0.1 -p "$PORT" -U 0 \
                    -t "${SERVER_THREADS:-2}" -m 1024 -c 4096 -u "$(id -un)" "$@" \
                    > "$WORK/log" 2>&1 &;;
        *) echo "runs.sh: the server is larder or memcached, not $SERVER" >&2; exit 2;;
    esac
    PID=$!
    sleep 0.5
    "$LARDER" bench -s "127.0.0.1:$PORT" -t 2 -c 4 -k 1000000 --ratio 0:1 -n 1 --preload -q > /dev/null
    for run in $(seq "$RUNS"); do
        taskset -c "${CLIENT_CPUS:-0,1}" "$LARDER" bench -s "127.0.0.1:$PORT" \
            -t "${CLIENT_THREADS:-2}" -c "${CONNS_PER_THREAD:-250}" -k 1000000 \
            --ratio "${RATIO:-1:0}" -d 4s --warmup 500ms --json -q > "$WORK/out.json"
        python3 "$HERE/summary.py" "$SERVER start $start run $run" "$WORK/out.json"
    done
    kill "$PID"; wait "$PID" || true; PID=
done
