"""Prints one line of a `larder bench --json` report: LABEL, rate, latency percentiles in µs.

Usage: summary.py LABEL REPORT.json
"""
import json
import sys

label, path = sys.argv[1], sys.argv[2]
with open(path, encoding="utf-8") as file:
    report = json.load(file)
latency = report["latency"]["all"]
percentiles = (f"{p} {int(latency[p + '_us'])}" for p in ("p50", "p90", "p99", "p999"))
print(label, int(report["ops_per_second"]), "ops/s", *percentiles)
