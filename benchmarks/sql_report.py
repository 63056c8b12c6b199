#!/usr/bin/env python3
"""Report of benchmarks/sql_experiments.sh: Larder and memcached against
MariaDB used as a key-value store.

Usage: sql_report.py RESULTS_DIR
       sql_report.py --line RUN.out   (one-line summary of one run)

Reads RESULTS_DIR/sql-raw/ (machine.txt, commands.txt, and per experiment
A and B: load.jsonl, footprint.jsonl and <cell>/run<n>.out with its
.client-cpu, .server-cpu and .err beside it) and writes
RESULTS_DIR/sql-experiments.json and RESULTS_DIR/sql-experiments.md.
A run's .out is either `larder bench --json` output or sysbench's text
report. Standard library only.

Per experiment and cell: rows read per second (median, min and max over the
runs), its ratio to MariaDB InnoDB's median, p99 latency (median over
runs), the CPU time of client and server per row read, and, where the runs
recorded it, the kernel's part of each and the rate the kernel's part alone
would allow.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import read_machine, settings_of  # noqa: E402  (the same machine.txt format)

CELL_ORDER = ["larder", "memcached", "mariadb-innodb", "mariadb-memory"]
BASELINE = "mariadb-innodb"
RUN_FILE = re.compile(r"^run(\d+)\.(out|failed)$")
# Experiment B's target: Larder reads at least this many times as many rows
# per second as MariaDB InnoDB.
TARGET_B_RATIO_MIN = 5.0

EXPERIMENT_TITLES = {
    "A": "Experiment A: random primary-key reads, two tables of ~100-byte comma-delimited rows",
    "B": "Experiment B: rows read per second, (id bigint, value1 int, value2 double), ids from a file",
}
CLIENTS = {
    "larder": "larder bench (memcached text protocol)",
    "memcached": "larder bench (memcached text protocol)",
    "mariadb-innodb": "sysbench + kv_point_select.lua (prepared SELECT)",
    "mariadb-memory": "sysbench + kv_point_select.lua (prepared SELECT)",
}

SYSBENCH_FIELDS = {
    "events": re.compile(r"total number of events:\s+(\d+)"),
    "seconds": re.compile(r"total time:\s+([\d.]+)s"),
    "errors": re.compile(r"ignored errors:\s+(\d+)"),
    "reconnects": re.compile(r"reconnects:\s+(\d+)"),
    "avg_ms": re.compile(r"avg:\s+([\d.]+)"),
    "max_ms": re.compile(r"max:\s+([\d.]+)"),
    "p99_ms": re.compile(r"99th percentile:\s+([\d.]+)"),
}
MISSES = re.compile(r"kv_point_select: thread \d+: (\d+) misses")


def parse_run(path: Path) -> dict:
    """One run, normalised: rows, seconds, rows_per_second, latencies in µs,
    errors, misses, and CPU seconds of client and server when recorded."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        lat = doc["latency"]["all"]
        run = {
            "client": "larder bench",
            "rows": doc["requests"],
            "seconds": doc["measured_seconds"],
            "rows_per_second": doc["ops_per_second"],
            "p50_us": lat["p50_us"],
            "p99_us": lat["p99_us"],
            "mean_us": lat["mean_us"],
            "max_us": lat["max_us"],
            "misses": doc["misses"],
            "errors": doc["errors"] + doc["failed_connections"],
        }
    else:
        found = {}
        for name, pattern in SYSBENCH_FIELDS.items():
            match = pattern.search(text)
            if match is None:
                raise ValueError(f"{path}: no '{name}' in the sysbench report")
            found[name] = float(match.group(1))
        err = path.with_suffix(".err")
        misses = sum(int(m) for m in MISSES.findall(err.read_text())) if err.exists() else 0
        run = {
            "client": "sysbench",
            "rows": int(found["events"]),
            "seconds": found["seconds"],
            "rows_per_second": found["events"] / found["seconds"] if found["seconds"] else 0.0,
            "p50_us": None,
            "p99_us": found["p99_ms"] * 1000,
            "mean_us": found["avg_ms"] * 1000,
            "max_us": found["max_ms"] * 1000,
            "misses": misses,
            "errors": int(found["errors"] + found["reconnects"]),
        }
    client = path.with_suffix(".client-cpu")
    if client.exists():
        doc = json.loads(client.read_text())
        run["client_cpu_s"] = doc["user_s"] + doc["system_s"]
        run["client_system_s"] = doc["system_s"]
        run["client_elapsed_s"] = doc["elapsed_s"]
    server = path.with_suffix(".server-cpu")
    if server.exists():
        doc = json.loads(server.read_text())
        run["server_cpu_s"] = doc["cpu_s"]
        # Runs before 2026-11-27 recorded the server's total only.
        run["server_system_s"] = doc.get("system_s")
    return run


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(runs: list[dict]) -> dict:
    rates = [r["rows_per_second"] for r in runs]

    def med(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    def per_row_us(key: str) -> float | None:
        values = [r[key] / r["rows"] * 1e6 for r in runs if r.get(key) is not None and r["rows"]]
        return statistics.median(values) if values else None

    def busy(run: dict) -> float | None:
        parts = (run.get("client_cpu_s"), run.get("server_cpu_s"), run.get("client_elapsed_s"))
        return None if None in parts or not parts[2] else (parts[0] + parts[1]) / parts[2]

    def kernel_only(run: dict) -> float | None:
        """The run's rate scaled by its CPU per row over the kernel's part of
        it: the rate with no user-space time on either side, the kernel's
        work per row and the busy vCPUs staying as measured."""
        parts = [run.get(k) for k in ("client_cpu_s", "server_cpu_s", "client_system_s", "server_system_s")]
        if None in parts or not parts[2] + parts[3] or not run["rows"]:
            return None
        return run["rows_per_second"] * (parts[0] + parts[1]) / (parts[2] + parts[3])

    vcpus = [b for b in map(busy, runs) if b is not None]
    bounds = [b for b in map(kernel_only, runs) if b is not None]
    return {
        "client": runs[0]["client"],
        "runs": len(runs),
        "rows_per_second": {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "all": rates},
        "rows_per_run": [r["rows"] for r in runs],
        "p50_us": med("p50_us"),
        "p99_us": med("p99_us"),
        "mean_us": med("mean_us"),
        "client_cpu_us_per_row": per_row_us("client_cpu_s"),
        "server_cpu_us_per_row": per_row_us("server_cpu_s"),
        "client_system_us_per_row": per_row_us("client_system_s"),
        "server_system_us_per_row": per_row_us("server_system_s"),
        "vcpus_busy": statistics.median(vcpus) if vcpus else None,
        "kernel_only_rows_per_second": statistics.median(bounds) if bounds else None,
        "misses": sum(r["misses"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
    }


def load_experiment(exp_dir: Path) -> dict:
    cells: dict = {}
    failures: dict = {}
    for cell_dir in sorted(p for p in exp_dir.iterdir() if p.is_dir()):
        runs = []
        for path in sorted(cell_dir.iterdir()):
            match = RUN_FILE.match(path.name)
            if not match:
                continue
            if match.group(2) == "failed":
                failures[cell_dir.name] = failures.get(cell_dir.name, 0) + 1
                continue
            runs.append(parse_run(path))
        if runs:
            cells[cell_dir.name] = summarise(runs)
    base = cells.get(BASELINE)
    b = base["rows_per_second"]["median"] if base else 0
    for summary in cells.values():
        summary["ratio_to_mariadb_innodb"] = summary["rows_per_second"]["median"] / b if b else None
        bound = summary["kernel_only_rows_per_second"]
        summary["kernel_only_ratio_to_mariadb_innodb"] = bound / b if bound is not None and b else None
    return {
        "cells": {name: cells[name] for name in order_cells(cells)},
        "failed_runs": failures,
        "load": read_jsonl(exp_dir / "load.jsonl"),
        "footprint": read_jsonl(exp_dir / "footprint.jsonl"),
    }


def order_cells(cells) -> list[str]:
    return [c for c in CELL_ORDER if c in cells] + sorted(c for c in cells if c not in CELL_ORDER)


def fmt_num(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def fmt_us(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.0f} µs"


def targets(experiments: dict) -> list[dict]:
    checks = []
    b = experiments.get("B", {}).get("cells", {})
    if "larder" in b and BASELINE in b:
        ratio = b["larder"]["ratio_to_mariadb_innodb"]
        bound = b["larder"].get("kernel_only_ratio_to_mariadb_innodb")
        measured = f"{ratio:.2f}x"
        if bound is not None:
            measured += f" ({bound:.2f}x with no user-space time on Larder's side, at the load measured)"
        checks.append({
            "target": f"Experiment B: Larder rows/s >= {TARGET_B_RATIO_MIN:g}x MariaDB InnoDB",
            "measured": measured,
            "met": ratio >= TARGET_B_RATIO_MIN,
        })
    return checks


def cell_table(exp: dict) -> list[str]:
    md = [
        "| server | client | rows/s median [min-max] | vs MariaDB InnoDB | p50 | p99 | "
        "client CPU µs/row | server CPU µs/row | runs | misses | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in exp["cells"].items():
        r = s["rows_per_second"]
        ratio = f"{s['ratio_to_mariadb_innodb']:.2f}x" if s["ratio_to_mariadb_innodb"] is not None else "n/a"
        md.append(
            f"| {name} | {s['client']} | {r['median']:,.0f} [{r['min']:,.0f}-{r['max']:,.0f}] | {ratio} | "
            f"{fmt_us(s['p50_us'])} | {fmt_us(s['p99_us'])} | {fmt_num(s['client_cpu_us_per_row'], 1)} | "
            f"{fmt_num(s['server_cpu_us_per_row'], 1)} | {s['runs']} | {s['misses']} | {s['errors']} |"
        )
    for name, n in sorted(exp["failed_runs"].items()):
        md.append(f"| {name} | | failed ({n} runs) | | | | | | | | |")
    return md


def kernel_table(exp: dict) -> list[str]:
    """Where each row's CPU went, user space or kernel, and the rate the
    kernel's part alone would allow; empty when no cell recorded it."""
    cells = {n: s for n, s in exp["cells"].items() if s.get("kernel_only_rows_per_second") is not None}
    if not cells:
        return []
    md = [
        "CPU per row by where it ran (median of the runs). *vCPUs busy* is client and server CPU over "
        "the client's run; *no user-space time* is the rate if client and server spent nothing in user "
        "space, their kernel's work per row (system calls, the sockets, wake-ups) staying as "
        "measured and the vCPUs as busy: what faster user-space code on either side could reach at most, "
        "unless it also cut the kernel's work per row or kept more vCPUs busy.",
        "",
        "| server | vCPUs busy | client user µs/row | client kernel µs/row | server user µs/row | "
        "server kernel µs/row | kernel share | rows/s with no user-space time | vs MariaDB InnoDB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in cells.items():
        client, server = s["client_cpu_us_per_row"], s["server_cpu_us_per_row"]
        client_sys, server_sys = s["client_system_us_per_row"], s["server_system_us_per_row"]
        ratio = s["kernel_only_ratio_to_mariadb_innodb"]
        md.append(
            f"| {name} | {fmt_num(s['vcpus_busy'], 2)} | {client - client_sys:.1f} | {client_sys:.1f} | "
            f"{server - server_sys:.1f} | {server_sys:.1f} | {(client_sys + server_sys) / (client + server):.0%} | "
            f"{s['kernel_only_rows_per_second']:,.0f} | {'n/a' if ratio is None else f'{ratio:.2f}x'} |"
        )
    md.append("")
    return md


def load_table(exp: dict) -> list[str]:
    if not exp["load"]:
        return []
    md = ["Loading (before the runs; not measured as part of them):", "",
          "| server | table | rows | seconds | rows/s | mean value bytes |", "|---|---|---:|---:|---:|---:|"]
    for entry in exp["load"]:
        seconds = entry.get("seconds") or 0
        md.append(
            f"| {entry['server']} | {entry['table']} | {entry['rows']:,} | {seconds:.1f} | "
            f"{fmt_num(entry['rows'] / seconds if seconds else None)} | {fmt_num(entry.get('value_bytes_mean'), 1)} |"
        )
    md.append("")
    if exp["footprint"]:
        md += ["After the runs (MariaDB's data dir includes its preallocated 512 MiB redo log):", "",
               "| server process | data dir MiB | RSS MiB |", "|---|---:|---:|"]
        for entry in exp["footprint"]:
            rss = entry.get("rss_kib")
            kib = entry.get("data_dir_kib")
            md.append(
                f"| {entry['server']} | {fmt_num(kib / 1024 if kib is not None else None, 1)} | "
                f"{fmt_num(rss / 1024 if rss is not None else None, 1)} |"
            )
        md.append("")
    return md


def describe(exp_name: str, s: dict) -> str:
    if exp_name == "A":
        return (
            f"{s.get('ROWS_A', '?')} rows in each of two tables (users, orders); each row is about 100 bytes "
            f"of comma-delimited text. Larder and memcached hold each row as one value under `users:<id>` / "
            f"`orders:<id>` (the whole line, id included); MariaDB holds the same CSV as typed columns (InnoDB) "
            f"and returns the whole row (`SELECT *`). {s.get('THREADS_A', '?')} client threads, one connection "
            f"each, one request in flight; table and id drawn uniformly (larder bench from a file of "
            f"{s.get('KEYS_A', '?')} such keys, sysbench from its generator). {s.get('RUNS', '?')} runs of "
            f"{s.get('DURATION', '?')} s after {s.get('WARMUP', '?')} s of warm-up; median shown."
        )
    return (
        f"{s.get('ROWS_B', '?')} rows of (id bigint primary key, value1 int, value2 double). Larder and "
        f"memcached hold key = id, value = `value1,value2`; MariaDB selects `value1, value2` by id from an "
        f"InnoDB table and from a MEMORY table (hash primary key) in the same server. A file of "
        f"{s.get('IDS_B', '?')} ids drawn uniformly; {s.get('THREADS_B', '?')} client threads, one connection "
        f"each, one request in flight, read it {s.get('ROUNDS', '?')} times over "
        f"({int(s.get('ROUNDS', 0) or 0) * int(s.get('IDS_B', 0) or 0):,} rows per run), split so that every "
        f"thread reads its own share. Rows per second = rows read / time from first request to last reply."
    )


def transport(settings: dict[str, str]) -> str:
    """How the clients reached the servers."""
    if settings.get("TRANSPORT", "tcp") == "unix":
        return ("over each server's Unix domain socket (Larder's and memcached's `-s`, MariaDB's socket "
                "through `--mysql-socket`).")
    return "over TCP on 127.0.0.1."


def sharing(settings: dict[str, str]) -> str:
    """One sentence on how client and server shared the CPUs."""
    server, client = settings.get("SERVER_CPUS", "all"), settings.get("CLIENT_CPUS", "all")
    if server == "all" and client == "all":
        return ("Client and server share the machine's cores, so the client's own CPU cost (shown per row) "
                "lowers every figure; compare within this run.")
    return (f"Every server was pinned to CPUs {server} and every measured client to CPUs {client} "
            "(`taskset -c`), so the client's CPU cost does not take the server's cores; compare within this run.")


def write_markdown(results_dir: Path, doc: dict, commands: list[str]) -> None:
    machine = doc["machine"]
    s = settings_of(machine)
    md = [f"# Larder against MariaDB as a key-value store ({machine.get('date', 'undated')})", ""]
    if machine.get("smoke") == "1":
        md += ["**SMOKE RUN: tiny sizes to check that the script works. These figures mean nothing.**", ""]
    md += ["Machine, versions and settings:", ""]
    md += [f"- {k}: `{v}`" for k, v in machine.items()]
    md += [
        "",
        "Clients differ: Larder and memcached are read with `larder bench` over the memcached text "
        "protocol (one `get` per row); MariaDB with sysbench 1.0 running "
        "`benchmarks/sysbench/kv_point_select.lua` (one server-side prepared `SELECT ... WHERE id = ?` "
        "per row, binary protocol). Both use the same number of client threads and connections, one "
        "request in flight per connection, " + transport(s) + " " + sharing(s) + " "
        "Misses count reads that found no row (must be 0).",
        "",
    ]
    for exp_name in ("A", "B"):
        exp = doc["experiments"].get(exp_name)
        if exp is None:
            continue
        md += [f"## {EXPERIMENT_TITLES[exp_name]}", "", describe(exp_name, s), ""]
        md += cell_table(exp) + [""]
        md += kernel_table(exp)
        md += load_table(exp)
    md += ["## Target", "", "| target | measured | met |", "|---|---|---|"]
    for c in doc["targets"]:
        md.append(f"| {c['target']} | {c['measured']} | {'yes' if c['met'] else '**no**'} |")
    if not doc["targets"]:
        md.append("| Experiment B: Larder >= 5x MariaDB InnoDB | not measured in this run | |")
    md += ["", "## Exact commands", "", "```"] + commands + ["```", ""]
    (results_dir / "sql-experiments.md").write_text("\n".join(md))


def line_summary(path: Path) -> str:
    r = parse_run(path)
    p99 = fmt_us(r["p99_us"])
    return (
        f"{r['rows_per_second']:,.0f} rows/s ({r['rows']:,} rows in {r['seconds']:.2f} s), p99 {p99}, "
        f"misses {r['misses']}, errors {r['errors']}"
    )


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--line":
        print(line_summary(Path(sys.argv[2])))
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results_dir = Path(sys.argv[1])
    raw = results_dir / "sql-raw"
    if not raw.is_dir():
        print(f"no raw results in {raw}", file=sys.stderr)
        return 1
    experiments = {name: load_experiment(raw / name) for name in ("A", "B") if (raw / name).is_dir()}
    commands_path = raw / "commands.txt"
    commands = commands_path.read_text().splitlines() if commands_path.exists() else []
    doc = {
        "machine": read_machine(raw),
        "experiments": experiments,
        "targets": targets(experiments),
        "commands": commands,
    }
    (results_dir / "sql-experiments.json").write_text(json.dumps(doc, indent=2) + "\n")
    write_markdown(results_dir, doc, commands)
    print(f"wrote {results_dir / 'sql-experiments.json'} and {results_dir / 'sql-experiments.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
