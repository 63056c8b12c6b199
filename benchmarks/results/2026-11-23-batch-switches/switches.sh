#!/usr/bin/env bash
# How the record in switches.txt was taken (run by hand, not part of the
# suite): one Larder build under `always`, 100k keys of 100 bytes preloaded,
# then 4 s of sets (0.5 s warm-up) from 500 connections; context switches of
# each server thread over that run, from /proc/PID/task/TID/status, and how
# the server's group-commit counters moved over it (read before and after).
#
# Usage: benchmarks/results/2026-11-23-batch-switches/switches.sh BINARY [LOADGEN]
set -euo pipefail
BIN=$1
BENCH=${2:-target/release/larder}
PORT=${PORT:-22129}
# record_larder and server_stats; run from the repository root.
source benchmarks/lib.sh
record_larder "$BIN" "$BENCH" always "$PORT" 100000
WORK=$RECORD_DIR
SERVER=$RECORD_PID

switches() {
    for task in /proc/"$SERVER"/task/*; do
        printf '%s %s %s\n' "$(basename "$task")" "$(cat "$task/comm")" \
            "$(awk '/^voluntary_ctxt_switches/ {v = $2} /^nonvoluntary_ctxt_switches/ {n = $2} END {print v, n}' "$task/status")"
    done | sort
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }

# The counters this record reports, as "name value" lines.
counters() {
    server_stats "$PORT" | grep -E '^larder_(fsyncs|group_commits|group_commit_writers|group_commits_waited) '
}

counters >"$WORK/counters-before"
switches >"$WORK/before"
ticks_before=$(cpu_ticks)
"$BENCH" bench -s "127.0.0.1:$PORT" -k 100000 -v 100 -q -t 2 -c 250 -P 1 --ratio 0:1 \
    -d 4s --warmup 500ms --json >"$WORK/bench.json"
ticks_after=$(cpu_ticks)
switches >"$WORK/after"
counters >"$WORK/counters-after"

python3 - "$WORK/bench.json" "$ticks_before" "$ticks_after" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
ticks = int(sys.argv[3]) - int(sys.argv[2])
seconds = ticks / int(sys.argv[4])
# CPU over warm-up and measured phase, per request at the measured rate.
requests = run["ops_per_second"] * 4.5
print(f"sets/s {run['ops_per_second']:.0f}  p99 {run['latency']['all']['p99_us']:.0f} us  "
      f"server CPU per set {seconds * 1e6 / requests:.1f} us")
EOF
join "$WORK/before" "$WORK/after" | awk '{
    v = $6 - $3; n = $7 - $4
    if (v + n > 0) printf "  %-14s voluntary %6d  involuntary %6d\n", $2, v, n
}'
join <(sort "$WORK/counters-before") <(sort "$WORK/counters-after") | awk '
    { moved[$1] = $3 - $2 }
    END {
        printf "  over the run: fsyncs %d, group commits %d, writers %d (%.1f per group), groups that waited %d\n",
            moved["larder_fsyncs"], moved["larder_group_commits"], moved["larder_group_commit_writers"],
            moved["larder_group_commit_writers"] / moved["larder_group_commits"], moved["larder_group_commits_waited"]
    }'
