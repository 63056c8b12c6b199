#!/usr/bin/env python3
"""Aggregate the raw `larder bench --json` runs of benchmarks/compare.sh.

Usage: report.py RESULTS_DIR
       report.py --line RUN.json   (one-line summary of one run)

Reads RESULTS_DIR/machine.txt and RESULTS_DIR/raw/<server>/<workload>-c<conns>-p<pipeline>-run<n>.json
and writes RESULTS_DIR/results.json, RESULTS_DIR/results.md and one SVG chart
per workload cell in RESULTS_DIR/charts/. Standard library only.

Per cell and server: median, min and max of ops/s over the runs, the ratio of
the median to memcached's median, the median over runs of each latency
percentile (p50, p99, p99.9 of all requests, in microseconds), the server's
CPU per request (where the run's .cpu file was written), and for the issue's
targets, beside the ratio of the medians, the median of the ratios run by
run and in how many runs Larder was ahead of the server it is measured
against.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from html import escape
from pathlib import Path

SERVER_ORDER = [
    "memcached",
    "redis-none",
    "redis-everysec",
    "redis-always",
    "larder-none",
    "larder-everysec",
    "larder-always",
]
WORKLOAD_NAMES = {"get": "get-only (1:0)", "set": "set-only (0:1)", "mix": "90:10 gets:sets"}
WORKLOAD_ORDER = ["get", "set", "mix"]
RUN_FILE = re.compile(r"^(get|set|mix)-c(\d+)-p(\d+)-run(\d+)\.(json|failed)$")
BASELINE = "memcached"


def settings_of(machine: dict) -> dict[str, str]:
    """The `settings` line of machine.txt (KEY=VALUE words) as a dict."""
    settings = {}
    for word in machine.get("settings", "").split():
        key, sep, value = word.partition("=")
        if sep:
            settings[key] = value.strip("'")
    return settings


def placement(settings: dict[str, str]) -> str:
    """One sentence on where the servers and the load generator ran."""
    server, client = settings.get("SERVER_CPUS", ""), settings.get("CLIENT_CPUS", "")
    if not server and not client:
        return ("The load generator (`larder bench`) shares the machine's cores with the server under test, "
                "so absolute figures are lower than on separate machines; compare ratios within this run.")
    return (f"Every server was pinned to CPUs {server or 'all'} and every measured run of the load generator "
            f"(`larder bench`) to CPUs {client or 'all'} (`taskset -c`); compare ratios within this run.")


def read_machine(results_dir: Path) -> dict[str, str]:
    machine: dict[str, str] = {}
    path = results_dir / "machine.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                machine[key.strip()] = value.strip()
    return machine


def load_runs(raw: Path) -> tuple[dict, dict]:
    """Returns cells[(workload, conns, pipeline)][server] -> list of reports
    in run order, failures[(workload, conns, pipeline)][server] -> count of
    failed runs."""
    cells: dict = {}
    failures: dict = {}
    for server_dir in sorted(p for p in raw.iterdir() if p.is_dir()):
        server = server_dir.name
        for path in sorted(server_dir.iterdir()):
            match = RUN_FILE.match(path.name)
            if not match:
                continue
            workload, conns, pipeline, run, kind = match.groups()
            key = (workload, int(conns), int(pipeline))
            if kind == "failed":
                failures.setdefault(key, {}).setdefault(server, 0)
                failures[key][server] += 1
                continue
            with path.open() as f:
                report = json.load(f)
            report["host_steal_percent"] = host_steal_percent(path.with_suffix(".steal"))
            report["round"] = int(run)
            report["settle"] = settle_of(path.with_suffix(".settle"))
            report.update(cpu_per_request(path.with_suffix(".cpu"), report))
            cells.setdefault(key, {}).setdefault(server, []).append(report)
    # The files come in name order, where run10 precedes run2.
    for by_server in cells.values():
        for reports in by_server.values():
            reports.sort(key=lambda r: r["round"])
    return cells, failures


def round_drift(runs: dict) -> dict:
    """How each server's rounds compare with its first: for round k, the
    median over the cells measured in both of (round k ops/s) / (round 1
    ops/s). A fall shared by every server is the machine drifting through
    the run, not any one server slowing. `runs` is what `load_runs`
    returns; the result is server -> {"cells": n, "by_round": [1.0, r2,
    r3, ...]}."""
    by_server: dict = {}
    for key, by_srv in runs.items():
        for server, reports in by_srv.items():
            by_server.setdefault(server, {})[key] = {r["round"]: r["ops_per_second"] for r in reports}
    drift: dict = {}
    for server, by_cell in sorted(by_server.items()):
        rounds = sorted({run for ops in by_cell.values() for run in ops})
        if len(rounds) < 2 or rounds[0] != 1:
            continue
        by_round = [1.0]
        for run in rounds[1:]:
            ratios = [ops[run] / ops[1] for ops in by_cell.values() if run in ops and ops.get(1)]
            by_round.append(statistics.median(ratios) if ratios else None)
        drift[server] = {"cells": len(by_cell), "by_round": by_round}
    return drift


def settle_of(path: Path) -> str | None:
    """What compare.sh (before a run) or pairs.sh (after a preload) waited
    for the machine to be quiet, "SECONDS quiet" or "SECONDS busy" (see
    `settle` in lib.sh), or None where it was not recorded."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def settle_summary(runs: dict) -> dict:
    """Per server, over all its runs: how many runs recorded their wait
    for a quiet machine, the median and longest wait in seconds, and the
    runs that began on a still busy machine (cell id and run)."""
    summary: dict = {}
    for key, by_server in runs.items():
        for server, reports in by_server.items():
            for r in reports:
                if r["settle"] is None:
                    continue
                seconds, _, state = r["settle"].partition(" ")
                s = summary.setdefault(server, {"runs": 0, "seconds": [], "busy": []})
                s["runs"] += 1
                s["seconds"].append(int(seconds))
                if state == "busy":
                    s["busy"].append((cell_sort(key), r["round"], f"{cell_id(*key)} run {r['round']}"))
    for s in summary.values():
        seconds = s.pop("seconds")
        s["median_seconds"] = statistics.median(seconds)
        s["max_seconds"] = max(seconds)
        s["busy"] = [name for *_, name in sorted(s["busy"])]
    return summary


def host_steal_percent(path: Path) -> float | None:
    """The percent of the machine's CPU time the host stole during a run
    (written next to the run by compare.sh and pairs.sh), or None where
    it was not recorded (or the file is empty or unreadable: the scripts
    create it before writing to it)."""
    try:
        return float(json.loads(path.read_text())["host_steal_percent"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cpu_per_request(path: Path, bench: dict) -> dict:
    """A run's server CPU, from the .cpu file compare.sh and pairs.sh write
    next to it (`write_cpu` in lib.sh): the seconds the server's process
    used, and the microseconds per request of the whole process and of a
    Larder's compactor thread alone. The CPU is read around the whole
    `larder bench` run (connecting, warm-up, measuring), so the requests
    it served are taken as its ops/s times warm-up plus measured seconds.
    A figure not recorded (no file, or no compactor) is None."""
    try:
        cpu = json.loads(path.read_text())
    except (OSError, ValueError):
        cpu = {}
    served = bench["ops_per_second"] * (bench["measured_seconds"] + bench["settings"]["warmup_seconds"])

    def per_request(seconds: float | None) -> float | None:
        return seconds * 1e6 / served if seconds is not None and served > 0 else None

    return {
        "server_cpu_s": cpu.get("server_cpu_s"),
        "server_cpu_us_per_request": per_request(cpu.get("server_cpu_s")),
        "compactor_cpu_us_per_request": per_request(cpu.get("compactor_cpu_s")),
    }


def spread(values: list[float]) -> dict:
    """Median, min and max of `values`."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread_of(reports: list[dict], field: str) -> dict | None:
    """`spread` of one figure over the runs, or None if any run lacks it."""
    values = [r.get(field) for r in reports]
    if not values or any(v is None for v in values):
        return None
    return spread(values)


def run_ratios(mine: dict, theirs: dict) -> list[float]:
    """The first server's ops/s over the second's in each run both had in a
    cell, in run order. compare.sh takes each run of a cell for every
    server within a minute or two, so each ratio compares the two under
    the same conditions, as pairs.sh's pairs do: a drift of the machine
    from run to run, which moves a ratio of medians, cancels in them."""
    common = sorted(set(mine["ops_by_run"]) & set(theirs["ops_by_run"]))
    return [mine["ops_by_run"][k] / theirs["ops_by_run"][k] for k in common if theirs["ops_by_run"][k]]


def run_by_run(mine: dict, theirs: dict, name: str) -> str:
    """`run_ratios` in words: their median and in how many runs the first
    server was ahead, e.g. "per run 1.03x, ahead of memcached in 4 of 5"."""
    ratios = run_ratios(mine, theirs)
    if not ratios:
        return f"no run shared with {name}"
    return (f"per run {statistics.median(ratios):.2f}x, "
            f"ahead of {name} in {sum(r > 1 for r in ratios)} of {len(ratios)}")


def order_servers(servers) -> list[str]:
    known = [s for s in SERVER_ORDER if s in servers]
    return known + sorted(s for s in servers if s not in SERVER_ORDER)


def steal_spread(reports: list[dict]) -> dict | None:
    """Stolen CPU over the runs: each run's and the most, or None if any
    run lacks the figure."""
    stolen = [r.get("host_steal_percent") for r in reports]
    if not stolen or any(x is None for x in stolen):
        return None
    return {"max": max(stolen), "all": stolen}


def summarise(reports: list[dict]) -> dict:
    ops = [r["ops_per_second"] for r in reports]

    def med(field: str, part: str = "all") -> float:
        return statistics.median(r["latency"][part][field] for r in reports)

    return {
        "runs": len(reports),
        "ops_per_second": spread(ops),
        "ops_by_run": {r["round"]: r["ops_per_second"] for r in reports},
        "server_cpu_us_per_request": spread_of(reports, "server_cpu_us_per_request"),
        "compactor_cpu_us_per_request": spread_of(reports, "compactor_cpu_us_per_request"),
        "latency_us": {
            "p50": med("p50_us"),
            "p90": med("p90_us"),
            "p99": med("p99_us"),
            "p999": med("p999_us"),
            "max": max(r["latency"]["all"]["max_us"] for r in reports),
        },
        "get_p99_us": med("p99_us", "get") if any(r["latency"]["get"]["count"] for r in reports) else None,
        "set_p99_us": med("p99_us", "set") if any(r["latency"]["set"]["count"] for r in reports) else None,
        "host_steal_percent": steal_spread(reports),
        "errors": sum(r["errors"] for r in reports),
        "failed_connections": sum(r["failed_connections"] for r in reports),
        "misses": sum(r["misses"] for r in reports),
        "first_failure": next((r["first_failure"] for r in reports if r.get("first_failure")), None),
    }


def fmt_ops(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_us(x: float) -> str:
    if x >= 10000:
        return f"{x / 1000:.0f} ms"
    if x >= 1000:
        return f"{x / 1000:.1f} ms"
    return f"{x:.0f} µs"


def cell_title(workload: str, conns: int, pipeline: int) -> str:
    return f"{WORKLOAD_NAMES.get(workload, workload)}, {conns} connections, pipeline {pipeline}"


def cell_id(workload: str, conns: int, pipeline: int) -> str:
    return f"{workload}-c{conns}-p{pipeline}"


# ----------------------------------------------------------------- charts
COLORS = {
    "memcached": "#4c78a8",
    "redis-none": "#f58518",
    "redis-everysec": "#e45756",
    "redis-always": "#b22222",
    "larder-none": "#54a24b",
    "larder-everysec": "#2e7d32",
    "larder-always": "#1b4d1e",
}


def chart_svg(title: str, rows: list[dict]) -> str:
    """Two panels: throughput (median bar, min-max whisker, ratio label) and
    latency (p99 bar with p50 and p99.9 marks)."""
    bar_h, gap, top, left_label = 22, 10, 56, 120
    panel_w, panel_gap, right_pad = 330, 150, 110
    height = top + len(rows) * (bar_h + gap) + 40
    width = left_label + panel_w + panel_gap + panel_w + right_pad
    max_ops = max((r["ops_max"] for r in rows), default=1) or 1
    max_lat = max((r["p999"] for r in rows), default=1) or 1
    x1 = left_label
    x2 = left_label + panel_w + panel_gap
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<text x="{x1}" y="42" font-weight="bold">ops/s (median, whisker min-max, ratio to memcached)</text>',
        f'<text x="{x2}" y="42" font-weight="bold">latency: bar p99, | p50, ◆ p99.9 (log scale)</text>',
    ]
    # Latency on a log scale from 10 µs (or less) up to the largest p99.9.
    import math

    lo = min([10.0] + [max(r["p50"], 1.0) for r in rows])
    hi = max(max_lat, lo * 10)
    llo, lhi = math.log10(lo), math.log10(hi)

    def lat_x(v: float) -> float:
        v = max(v, lo)
        return x2 + (math.log10(v) - llo) / (lhi - llo) * panel_w

    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        color = COLORS.get(r["server"], "#888")
        out.append(
            f'<text x="{x1 - 6}" y="{y + bar_h * 0.7}" text-anchor="end">{escape(r["server"])}</text>'
        )
        w = r["ops"] / max_ops * panel_w
        out.append(f'<rect x="{x1}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>')
        wmin = r["ops_min"] / max_ops * panel_w
        wmax = r["ops_max"] / max_ops * panel_w
        cy = y + bar_h / 2
        out.append(
            f'<line x1="{x1 + wmin:.1f}" y1="{cy}" x2="{x1 + wmax:.1f}" y2="{cy}" stroke="black"/>'
            f'<line x1="{x1 + wmin:.1f}" y1="{y + 5}" x2="{x1 + wmin:.1f}" y2="{y + bar_h - 5}" stroke="black"/>'
            f'<line x1="{x1 + wmax:.1f}" y1="{y + 5}" x2="{x1 + wmax:.1f}" y2="{y + bar_h - 5}" stroke="black"/>'
        )
        ratio = f" ({r['ratio']:.2f}x)" if r["ratio"] is not None else ""
        out.append(
            f'<text x="{x1 + max(w, wmax) + 4:.1f}" y="{y + bar_h * 0.7}">{fmt_ops(r["ops"])}{ratio}</text>'
        )
        # latency panel
        out.append(
            f'<rect x="{x2}" y="{y}" width="{lat_x(r["p99"]) - x2:.1f}" height="{bar_h}" fill="{color}" opacity="0.8"/>'
        )
        px = lat_x(r["p50"])
        out.append(f'<line x1="{px:.1f}" y1="{y}" x2="{px:.1f}" y2="{y + bar_h}" stroke="black" stroke-width="2"/>')
        qx = lat_x(r["p999"])
        out.append(
            f'<path d="M{qx:.1f},{cy - 5} L{qx + 5:.1f},{cy} L{qx:.1f},{cy + 5} L{qx - 5:.1f},{cy} Z" fill="black"/>'
        )
        out.append(
            f'<text x="{x2 + panel_w + 14}" y="{y + bar_h * 0.7}">p99 {escape(fmt_us(r["p99"]))}</text>'
        )
    # latency axis ticks at powers of ten
    axis_y = top + len(rows) * (bar_h + gap) + 4
    out.append(f'<line x1="{x2}" y1="{axis_y}" x2="{x2 + panel_w}" y2="{axis_y}" stroke="#444"/>')
    for e in range(math.floor(llo), math.ceil(lhi) + 1):
        v = 10.0**e
        if v < lo * 0.999 or v > hi * 1.001:
            continue
        x = lat_x(v)
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#444"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" font-size="10">{escape(fmt_us(v))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- targets
def target_checks(cells: dict) -> list[dict]:
    """The issue's throughput/latency targets that these cells can speak to."""
    checks = []

    def get(key, server):
        return cells.get(key, {}).get(server)

    for key in sorted(cells, key=cell_sort):
        workload, conns, pipeline = key
        base = get(key, BASELINE)
        if base is None:
            continue
        bops = base["ops_per_second"]["median"]
        where = f"{workload}, {conns} conns, P{pipeline}"
        if workload == "get":
            # Gets do not depend on the durability mode; judge the default.
            for server in ("larder-everysec",):
                s = get(key, server)
                if s is None:
                    continue
                ratio = s["ops_per_second"]["median"] / bops
                p99r = s["latency_us"]["p99"] / base["latency_us"]["p99"] if base["latency_us"]["p99"] else None
                value = f"{ratio:.2f}x ops/s" + (f", p99 {p99r:.2f}x" if p99r is not None else "")
                checks.append({
                    "target": "gets >= 1.0x memcached ops/s, p99 <= 1.2x",
                    "cell": where, "server": server,
                    "value": f"{value} ({run_by_run(s, base, BASELINE)})",
                    "met": ratio >= 1.0 and (p99r is None or p99r <= 1.2),
                })
        if workload == "set":
            s = get(key, "larder-everysec")
            if s is not None:
                ratio = s["ops_per_second"]["median"] / bops
                checks.append({
                    "target": "sets with everysec >= 0.9x memcached",
                    "cell": where, "server": "larder-everysec",
                    "value": f"{ratio:.2f}x ({run_by_run(s, base, BASELINE)})", "met": ratio >= 0.9,
                })
            s = get(key, "larder-always")
            r = get(key, "redis-always")
            if s is not None:
                ratio = s["ops_per_second"]["median"] / bops
                ahead = r is None or s["ops_per_second"]["median"] > r["ops_per_second"]["median"]
                vs = ""
                if r is not None:
                    vs = (f", {s['ops_per_second']['median'] / r['ops_per_second']['median']:.2f}x redis-always "
                          f"({run_by_run(s, r, 'redis-always')})")
                checks.append({
                    "target": "sets with always >= 0.5x memcached and ahead of Redis AOF always"
                    + ("" if conns == 500 else " (target is at 500 conns; shown as an indication)"),
                    "cell": where, "server": "larder-always",
                    "value": f"{ratio:.2f}x memcached{vs}", "met": ratio >= 0.5 and ahead,
                })
    return checks


def glance(cells: dict, ordered_keys: list) -> list[str]:
    """Every cell in one table: memcached's median ops/s and p99, and each
    other server's median ops/s and p99 as ratios to memcached's."""
    servers = order_servers({server for key in ordered_keys for server in cells.get(key, {})})
    others = [server for server in servers if server != "memcached"]
    lines = [
        "## All cells at a glance", "",
        "memcached's median ops/s and p99, and every other server's median ops/s over memcached's "
        "(its p99 over memcached's in brackets); the tables below give the figures behind them.", "",
        "| cell | memcached ops/s (p99 µs) | " + " | ".join(others) + " |",
        "|---|---:|" + "---:|" * len(others),
    ]
    for key in ordered_keys:
        cell = cells.get(key, {})
        base = cell.get("memcached")
        shown = (f"{base['ops_per_second']['median']:,.0f} ({base['latency_us']['p99']:,.0f})"
                 if base else "n/a")
        row = [f"{key[0]}, {key[1]} conn, P{key[2]}", shown]
        for server in others:
            s = cell.get(server)
            if s is None or s["ratio_to_memcached"] is None:
                row.append("n/a")
                continue
            p99 = s.get("p99_ratio_to_memcached")
            row.append(f"{s['ratio_to_memcached']:.2f}x" + (f" ({p99:.2f}x)" if p99 is not None else ""))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def cpu_text(summary: dict) -> str:
    """A server's CPU per request in a cell, for the cell's table: the
    process's median [min-max], and a Larder's compactor's median."""
    cpu = summary.get("server_cpu_us_per_request")
    if cpu is None:
        return "n/a"
    text = f"{cpu['median']:.1f} [{cpu['min']:.1f}-{cpu['max']:.1f}]"
    compactor = summary.get("compactor_cpu_us_per_request")
    return text + (f" (compactor {compactor['median']:.2f})" if compactor is not None else "")


def cell_sort(key):
    workload, conns, pipeline = key
    w = WORKLOAD_ORDER.index(workload) if workload in WORKLOAD_ORDER else 99
    return (w, conns, pipeline)


# ------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--line":
        # One run's summary, for compare.sh's progress log.
        with open(sys.argv[2]) as f:
            r = json.load(f)
        print(
            f"{r['ops_per_second']:.0f} ops/s, p50 {r['latency']['all']['p50_us']:.0f} us, "
            f"p99 {r['latency']['all']['p99_us']:.0f} us, errors {r['errors']}, "
            f"failed conns {r['failed_connections']}"
        )
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results_dir = Path(sys.argv[1])
    raw = results_dir / "raw"
    if not raw.is_dir():
        print(f"no raw results in {raw}", file=sys.stderr)
        return 1
    machine = read_machine(results_dir)
    runs, failures = load_runs(raw)

    cells: dict = {}
    for key, by_server in runs.items():
        cells[key] = {server: summarise(reports) for server, reports in by_server.items()}
    for key, cell in cells.items():
        base = cell.get(BASELINE)
        for server, s in cell.items():
            s["ratio_to_memcached"] = (
                s["ops_per_second"]["median"] / base["ops_per_second"]["median"]
                if base and base["ops_per_second"]["median"] else None
            )
            s["p99_ratio_to_memcached"] = (
                s["latency_us"]["p99"] / base["latency_us"]["p99"]
                if base and base["latency_us"]["p99"] else None
            )

    disk = {}
    left_out = {}
    for server_dir in sorted(p for p in raw.iterdir() if p.is_dir()):
        size = server_dir / "disk-kib.txt"
        if size.exists():
            disk[server_dir.name] = int(size.read_text().strip())
        failed = server_dir / "preload.json.failed"
        if failed.exists():
            # compare.sh leaves a server whose preload failed out of the run.
            lines = failed.read_text(errors="replace").strip().splitlines()
            left_out[server_dir.name] = lines[-1] if lines else "no message"
    waits = settle_summary(runs)

    drift = round_drift(runs)
    checks = target_checks(cells)
    ordered_keys = sorted(set(cells) | set(failures), key=cell_sort)

    # results.json
    doc = {
        "machine": machine,
        "cells": [
            {
                "id": cell_id(*key),
                "workload": key[0],
                "connections": key[1],
                "pipeline": key[2],
                "servers": {server: cells.get(key, {})[server] for server in order_servers(cells.get(key, {}))},
                "failed_runs": failures.get(key, {}),
            }
            for key in ordered_keys
        ],
        "data_dir_kib_at_end": disk,
        "preload_failed": left_out,
        "wait_before_runs": waits,
        "round_drift": drift,
        "targets": checks,
    }
    (results_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")

    # charts
    charts = results_dir / "charts"
    charts.mkdir(exist_ok=True)
    for key in ordered_keys:
        cell = cells.get(key, {})
        rows = []
        for server in order_servers(cell):
            s = cell[server]
            rows.append({
                "server": server,
                "ops": s["ops_per_second"]["median"],
                "ops_min": s["ops_per_second"]["min"],
                "ops_max": s["ops_per_second"]["max"],
                "ratio": s["ratio_to_memcached"],
                "p50": s["latency_us"]["p50"],
                "p99": s["latency_us"]["p99"],
                "p999": s["latency_us"]["p999"],
            })
        if rows:
            (charts / f"{cell_id(*key)}.svg").write_text(chart_svg(cell_title(*key), rows))

    # results.md
    md = [f"# Comparison results ({machine.get('date', 'undated')})", ""]
    md.append("Machine and settings:")
    md.append("")
    for k, v in machine.items():
        md.append(f"- {k}: `{v}`")
    md += [
        "",
        placement(settings_of(machine)) + " "
        "ops/s: median of the runs, [min-max]; latency: median over runs of each percentile, "
        "of all requests, measured from when each request was due. Server CPU: the CPU time the "
        "server's process used over a run (all its threads; a Larder's compactor thread also alone; "
        "child processes not counted) per request it served, warm-up included. CPU stolen by the host: the "
        "percent of all vCPUs' time during each run that the host gave to something else "
        "(`steal` in /proc/stat); runs with much stolen were slower, for every server, on the machine "
        "these scripts were written on.",
        "",
    ]
    if any("memcached" in cells.get(key, {}) for key in ordered_keys):
        md += glance(cells, ordered_keys)
    for key in ordered_keys:
        cell = cells.get(key, {})
        md.append(f"## {cell_title(*key)}")
        md.append("")
        md.append("| server | ops/s median [min-max] | vs memcached | p50 µs | p99 µs | p99.9 µs | runs | errors "
                  "| server CPU µs/request median [min-max] | CPU stolen by the host, % per run [most] |")
        md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for server in order_servers(cell):
            s = cell[server]
            o = s["ops_per_second"]
            ratio = f"{s['ratio_to_memcached']:.2f}x" if s["ratio_to_memcached"] is not None else "n/a"
            lat = s["latency_us"]
            errs = s["errors"] + s["failed_connections"]
            err_text = str(s["errors"]) if not s["failed_connections"] else f"{s['errors']} (+{s['failed_connections']} dropped conns)"
            stolen = s["host_steal_percent"]
            steal_text = (", ".join(f"{x:.1f}" for x in stolen["all"]) + f" [{stolen['max']:.1f}]"
                          if stolen else "n/a")
            md.append(
                f"| {server} | {o['median']:,.0f} [{o['min']:,.0f}-{o['max']:,.0f}] | {ratio} | "
                f"{lat['p50']:,.0f} | {lat['p99']:,.0f} | {lat['p999']:,.0f} | {s['runs']} | {err_text if errs else 0} "
                f"| {cpu_text(s)} | {steal_text} |"
            )
        for server, n in sorted(failures.get(key, {}).items()):
            md.append(f"| {server} | failed ({n} runs) | | | | | | | | |")
        md.append("")
        if cell:
            md.append(f"![{cell_title(*key)}](charts/{cell_id(*key)}.svg)")
            md.append("")
    if left_out:
        md += ["## Left out of the run: the preload failed", "", "| server | its last error line |", "|---|---|"]
        for server in order_servers(left_out):
            md.append(f"| {server} | {left_out[server].replace('|', '&#124;')} |")
        md.append("")
    if disk:
        md += ["## Data directory size at the end of the run (KiB)", "", "| server | KiB |", "|---|---:|"]
        for server in order_servers(disk):
            md.append(f"| {server} | {disk[server]:,} |")
        md.append("")
    if waits:
        md += ["## Waits for a quiet machine before each run", "",
               "Seconds waited before each measured run until the machine was quiet, whatever server "
               "was busy (see `settle` in lib.sh).", "",
               "| server | runs | median s | longest s | began on a busy machine |", "|---|---:|---:|---:|---|"]
        for server in order_servers(waits):
            w = waits[server]
            md.append(f"| {server} | {w['runs']} | {w['median_seconds']:g} | {w['max_seconds']} | "
                      f"{', '.join(w['busy']) or 'none'} |")
        md.append("")
    if drift:
        rounds = max(len(d["by_round"]) for d in drift.values())
        md += ["## Each run against the first", "",
               "Per server, the median over its cells of each run's ops/s divided by the first "
               "run's. When every server falls together, the machine slowed during the run.", "",
               "| server | cells | " + " | ".join(f"run {k}" for k in range(2, rounds + 1)) + " |",
               "|---|---:|" + "---:|" * (rounds - 1)]
        for server in order_servers(drift):
            d = drift[server]
            shown = [f"{x:.3f}" if x is not None else "n/a" for x in d["by_round"][1:]]
            shown += [""] * (rounds - len(d["by_round"]))
            md.append(f"| {server} | {d['cells']} | " + " | ".join(shown) + " |")
        md.append("")
    md += ["## The issue's targets, as far as these cells show them", "",
           "Met or not is read from the ratio of the medians. In brackets, the median of the ratios "
           "run by run (each run of a cell is taken for every server within a minute or two, so a drift "
           "of the machine between runs cancels in them) and in how many runs Larder was ahead.", ""]
    md.append("| target | cell | server | measured | met |")
    md.append("|---|---|---|---|---|")
    for c in checks:
        md.append(f"| {c['target']} | {c['cell']} | {c['server']} | {c['value']} | {'yes' if c['met'] else '**no**'} |")
    md.append("")
    (results_dir / "results.md").write_text("\n".join(md))
    print(f"wrote {results_dir / 'results.json'}, {results_dir / 'results.md'} and {len(list(charts.glob('*.svg')))} charts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
