#!/usr/bin/env bash
# How threads.txt was taken (run by hand, not part of the suite): RUNS
# times, a fresh Larder under `everysec` with 1M keys of 100 bytes
# preloaded, the wait for a quiet machine, then sets at 50 connections,
# pipeline 16, for 4 s after 0.5 s of warm-up; per run, ops/s and the CPU
# time each of the server's threads (by name) used over the run.
#
# Usage: benchmarks/results/2026-11-24-dead-marks/threads.sh BINARY [RUNS] [LOADGEN]
set -euo pipefail
# thread_cpu_runs; run from the repository root.
source benchmarks/lib.sh
PORT=${PORT:-22186} thread_cpu_runs "$1" "${3:-target/release/larder}" "${2:-3}" 1000000 \
    -t 2 -c 25 -P 16 --ratio 0:1 -d 4s --warmup 500ms
