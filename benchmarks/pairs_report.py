#!/usr/bin/env python3
"""Report of a benchmarks/pairs.sh run (Python standard library only).

    pairs_report.py RESULTS_DIR        writes RESULTS_DIR/pairs.{json,md}
    pairs_report.py --line RUN.json    one line on one run, for the log

Each pair is one run of A and one of B, back to back. The figure that
matters is the median over pairs of B's throughput divided by A's: drift of
the machine moves both runs of a pair together, and the median keeps one
disturbed pair from moving the result. Server CPU per request is the
server's CPU time (all threads) over the whole `larder bench` run
(connecting, warm-up, measured phase, closing) divided by the requests of
the warm-up and the measured phase at the measured rate; connecting and
closing make it read slightly high, alike for both sides.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import (  # noqa: E402  (shared formats)
    cpu_per_request, host_steal_percent, read_machine, settings_of, settle_of, spread, spread_of)


def load_run(path: Path) -> dict:
    """One run: throughput, latency and server CPU per request."""
    bench = json.loads(path.read_text())
    return {
        "ops_per_second": bench["ops_per_second"],
        "p50_us": bench["latency"]["all"]["p50_us"],
        "p99_us": bench["latency"]["all"]["p99_us"],
        "errors": bench["errors"],
        # A Larder's compactor thread alone too (older results lack it).
        **cpu_per_request(path.with_suffix(".cpu"), bench),
        "host_steal_percent": host_steal_percent(path.with_suffix(".steal")),
        "wait_after_preload": settle_of(path.with_suffix(".settle")),
        "compaction_bytes_per_logged_byte": compaction_per_logged_byte(path),
    }


def read_stats(path: Path) -> dict[str, str] | None:
    """A server's `stats` as pairs.sh saved them ("NAME VALUE" lines)."""
    if not path.exists():
        return None
    return dict(line.split(" ", 1) for line in path.read_text().splitlines() if " " in line)


def compaction_per_logged_byte(path: Path) -> float | None:
    """For a Larder run: the bytes compaction wrote during the run over the
    bytes the log took (none for other servers, or a run that logged nothing)."""
    before = read_stats(path.with_suffix(".stats-before"))
    after = read_stats(path.with_suffix(".stats-after"))
    if before is None or after is None:
        return None

    def grew(name: str) -> int:
        return int(after[name]) - int(before[name])
    logged = grew("larder_log_bytes_written")
    return grew("larder_compaction_bytes_written") / logged if logged > 0 else None


def line(path: Path) -> str:
    """One run in one line, for the script's log."""
    run = load_run(path)
    cpu = run["server_cpu_us_per_request"]
    cpu_text = f"{cpu:.1f} us" if cpu is not None else "n/a"
    return (f"{run['ops_per_second']:,.0f} ops/s, p50 {run['p50_us']:,.0f} us, "
            f"p99 {run['p99_us']:,.0f} us, errors {run['errors']}, server CPU per request {cpu_text}")


def ratio_at_equal_steal(pairs: list[dict]) -> dict | None:
    """B / A as if both runs of every pair had lost the same CPU to the host.

    On a shared virtual machine a run that the host takes CPU from is slow
    whatever the server, so a pair whose sides lost different amounts moves
    its ratio. This fits log(B / A) = a + b * (B's stolen % - A's) by least
    squares over the pairs and returns exp(a) with the fit's slope and
    correlation (None when every ratio is the same). Returns None without
    the stolen figures, with fewer than 3 pairs, or when the differences in
    stolen CPU do not vary, which leaves nothing to fit."""
    if len(pairs) < 3 or any(p[side].get("host_steal_percent") is None for p in pairs for side in "AB"):
        return None
    x = [p["B"]["host_steal_percent"] - p["A"]["host_steal_percent"] for p in pairs]
    y = [math.log(p["ratio_b_to_a"]) for p in pairs]
    if len(set(x)) < 2:
        return None
    fit = statistics.linear_regression(x, y)
    return {
        "ratio_b_to_a": math.exp(fit.intercept),
        "log_ratio_per_stolen_percent": fit.slope,
        "correlation": statistics.correlation(x, y) if len(set(y)) > 1 else None,
    }


def run_orders(raw: Path) -> dict[int, str]:
    """The order in which each pair's sides ran ("A B" or "B A"), from the
    servers' start lines in commands.txt."""
    orders: dict[int, list[str]] = {}
    commands = raw / "commands.txt"
    lines = commands.read_text().splitlines() if commands.exists() else []
    for text in lines:
        if m := re.match(r"pair (\d+) ([AB]) start: ", text):
            orders.setdefault(int(m.group(1)), []).append(m.group(2))
    return {n: " ".join(sides) for n, sides in orders.items()}


def build(results_dir: Path) -> dict:
    raw = results_dir / "raw"
    orders = run_orders(raw)
    pairs, incomplete = [], []
    numbers = sorted({int(m.group(1)) for p in raw.glob("pair*-?.json")
                      if (m := re.fullmatch(r"pair(\d+)-[AB]\.json", p.name))})
    for n in numbers:
        a_path, b_path = raw / f"pair{n}-A.json", raw / f"pair{n}-B.json"
        if not (a_path.exists() and b_path.exists()):
            incomplete.append(n)
            continue
        a, b = load_run(a_path), load_run(b_path)
        if a["ops_per_second"] <= 0 or b["ops_per_second"] <= 0:
            incomplete.append(n)
            continue
        pairs.append({
            "pair": n,
            "order": orders.get(n, "unknown"),
            "A": a,
            "B": b,
            "ratio_b_to_a": b["ops_per_second"] / a["ops_per_second"],
            "p99_ratio_b_to_a": b["p99_us"] / a["p99_us"] if a["p99_us"] > 0 else None,
        })
    if not pairs:
        raise SystemExit(f"no complete pairs under {raw}")
    ratios = [p["ratio_b_to_a"] for p in pairs]
    summary = {
        "pairs": len(pairs),
        "ratio_b_to_a": spread(ratios),
        "b_ahead_in": sum(r > 1 for r in ratios),
        "at_equal_steal": ratio_at_equal_steal(pairs),
    }
    # Each pair's p99 ratio and how many pairs B's p99 was the lower in.
    # Not steadier than the sides' own median p99s: a run's p99 varies as
    # much from one run to the next as over an hour, so a pair's two p99s
    # are hardly related (in 23 sets of pairs, their ratio spread less
    # than each side's p99 in 4).
    p99_ratios = [p["p99_ratio_b_to_a"] for p in pairs if p["p99_ratio_b_to_a"] is not None]
    if p99_ratios:
        summary["p99_ratio_b_to_a"] = spread(p99_ratios)
        summary["b_p99_lower_in"] = sum(r < 1 for r in p99_ratios)
        summary["p99_pairs"] = len(p99_ratios)
    for side in ("A", "B"):
        summary[side] = {
            "ops_per_second": spread([p[side]["ops_per_second"] for p in pairs]),
            "p99_us": spread([p[side]["p99_us"] for p in pairs]),
        }
        for figure in ("server_cpu_us_per_request", "compactor_cpu_us_per_request",
                       "compaction_bytes_per_logged_byte"):
            figures = spread_of([p[side] for p in pairs], figure)
            if figures is not None:
                summary[side][figure] = figures
    return {"machine": read_machine(results_dir), "pairs": pairs, "incomplete_pairs": incomplete,
            "summary": summary}


def markdown(doc: dict) -> str:
    settings = settings_of(doc["machine"])
    s = doc["summary"]
    skew = settings.get("ZIPF_SKEW")
    pattern = f"keys zipfian (skew {skew}), " if skew else ""
    md = [f"# Alternating pairs ({doc['machine'].get('date', 'undated')})", "", "Machine and settings:", ""]
    md += [f"- {k}: `{v}`" for k, v in doc["machine"].items()]
    md += [
        "",
        f"A = `{settings.get('A', '?')}`, B = `{settings.get('B', '?')}`: {settings.get('WORKLOAD', '?')}, "
        f"{pattern}{settings.get('CONNS', '?')} connections, pipeline {settings.get('PIPELINE', '?')}, "
        f"{settings.get('DURATION', '?')} per run. Each pair ran A and B back to back, the order "
        "alternating; every run started its server afresh. Server CPU is all of the server's threads "
        "over the whole load-generator run, per request of the warm-up and measured phase at the "
        "measured rate (connecting and closing make it read slightly high). Stolen: the percent of "
        "all vCPUs' time during the run that the host gave to something else (`steal` in /proc/stat).",
        "",
        "| pair | order | A ops/s | B ops/s | B / A | A p99 µs | B p99 µs | p99 B / A | A CPU µs/req "
        "| B CPU µs/req | A stolen % | B stolen % |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def one_decimal(value):
        return f"{value:.1f}" if value is not None else "n/a"

    def ratio_text(value):
        return f"{value:.3f}x" if value is not None else "n/a"

    for p in doc["pairs"]:
        a, b = p["A"], p["B"]
        md.append(f"| {p['pair']} | {p['order']} | {a['ops_per_second']:,.0f} | {b['ops_per_second']:,.0f} "
                  f"| {p['ratio_b_to_a']:.3f}x | {a['p99_us']:,.0f} | {b['p99_us']:,.0f} "
                  f"| {ratio_text(p.get('p99_ratio_b_to_a'))} | {one_decimal(a['server_cpu_us_per_request'])} | {one_decimal(b['server_cpu_us_per_request'])} "
                  f"| {one_decimal(a.get('host_steal_percent'))} | {one_decimal(b.get('host_steal_percent'))} |")
    r = s["ratio_b_to_a"]
    with_errors = [f"pair {p['pair']} {side}" for p in doc["pairs"] for side in ("A", "B") if p[side]["errors"]]
    if doc["incomplete_pairs"]:
        md += ["", "**Left out** (a side missing or without requests): pairs "
               + ", ".join(str(n) for n in doc["incomplete_pairs"]) + "."]
    if with_errors:
        md += ["", f"**Runs with errors** (see raw/): {', '.join(with_errors)}."]
    busy = [f"pair {p['pair']} {side}" for p in doc["pairs"] for side in ("A", "B")
            if (p[side].get("wait_after_preload") or "").endswith(" busy")]
    if busy:
        md += ["", f"**Measured while the machine was still busy after the preload**: {', '.join(busy)}."]
    md += [
        "",
        f"**B / A: {r['median']:.3f}x** (median of {s['pairs']} pairs; min {r['min']:.3f}x, max {r['max']:.3f}x; "
        f"B ahead in {s['b_ahead_in']} of {s['pairs']}).",
        "",
    ]
    if q := s.get("p99_ratio_b_to_a"):
        md += [
            f"**p99 B / A: {q['median']:.3f}x** (median of the pairs' p99 ratios; min {q['min']:.3f}x, "
            f"max {q['max']:.3f}x; B's p99 lower in {s['b_p99_lower_in']} of {s['p99_pairs']}).",
            "",
        ]
    if eq := s.get("at_equal_steal"):
        correlation = f"{eq['correlation']:.2f}" if eq["correlation"] is not None else "n/a"
        md += [
            f"At equal CPU stolen by the host: **{eq['ratio_b_to_a']:.3f}x** (least squares of log(B / A) "
            f"against B's stolen % minus A's, over the pairs; correlation {correlation}, "
            f"{100 * (math.exp(eq['log_ratio_per_stolen_percent']) - 1):+.1f}% per point). A fit over few "
            "pairs: read it next to the median, not instead of it.",
            "",
        ]
    md += [
        "| side | ops/s median [min-max] | p99 µs, median over pairs | server CPU µs per request, median [min-max] |",
        "|---|---:|---:|---:|",
    ]
    for side in ("A", "B"):
        ops = s[side]["ops_per_second"]
        c = s[side].get("server_cpu_us_per_request")
        cpu_text = f"{c['median']:.1f} [{c['min']:.1f}-{c['max']:.1f}]" if c else "n/a"
        md.append(f"| {side} | {ops['median']:,.0f} [{ops['min']:,.0f}-{ops['max']:,.0f}] "
                  f"| {s[side]['p99_us']['median']:,.0f} | {cpu_text} |")
    compacted = [f"{side} {c['median']:.2f} [{c['min']:.2f}-{c['max']:.2f}]" for side in ("A", "B")
                 if (c := s[side].get("compaction_bytes_per_logged_byte"))]
    if compacted:
        md += ["", "Bytes compaction wrote per byte logged during the runs (Larder's `stats`), "
               f"median [min-max]: {'; '.join(compacted)}."]
    compactor = [f"{side} {c['median']:.2f} [{c['min']:.2f}-{c['max']:.2f}]" for side in ("A", "B")
                 if (c := s[side].get("compactor_cpu_us_per_request"))]
    if compactor:
        md += ["", "CPU of Larder's compactor thread (`larder-compact`) in µs per request, "
               f"median [min-max]: {'; '.join(compactor)}."]
    return "\n".join(md) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--line":
        print(line(Path(argv[2])))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results_dir = Path(argv[1])
    doc = build(results_dir)
    (results_dir / "pairs.json").write_text(json.dumps(doc, indent=2) + "\n")
    (results_dir / "pairs.md").write_text(markdown(doc))
    print(f"wrote {results_dir / 'pairs.json'} and {results_dir / 'pairs.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
