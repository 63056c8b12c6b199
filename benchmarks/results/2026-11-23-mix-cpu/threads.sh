#!/usr/bin/env bash
# How the record in threads.txt was taken (run by hand, not part of the
# suite): RUNS times, a fresh Larder under `everysec` with KEYS keys of 100
# bytes preloaded, the wait for a quiet machine, then the 90:10 mix at 500
# connections without pipelining for 4 s; per run, ops/s and the CPU time
# each of the server's threads (by name) used during the run.
#
# Usage: benchmarks/results/2026-11-23-mix-cpu/threads.sh BINARY [RUNS] [KEYS] [LOADGEN]
set -euo pipefail
# thread_cpu_runs; run from the repository root.
source benchmarks/lib.sh
thread_cpu_runs "$1" "${4:-target/release/larder}" "${2:-6}" "${3:-1000000}" \
    -t 2 -c 250 -P 1 --ratio 9:1 -d 4s --warmup 500ms
