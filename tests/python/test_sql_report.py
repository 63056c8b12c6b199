"""The arithmetic of benchmarks/sql_report.py (the report of
sql_experiments.sh) on runs made up here, so that the expected figures are
known exactly: CPU per row on each side, the kernel's part of it, and the
rate the kernel's part alone would allow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

ROWS = 1_000_000


def write_larder_bench_run(cell_dir: Path, rows_per_second: float) -> None:
    """One run of `larder bench --json` as the script keeps it (run1.out)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    latency = {"p50_us": 600.0, "p99_us": 4000.0, "mean_us": 700.0, "max_us": 9000.0}
    bench = {
        "requests": ROWS,
        "measured_seconds": ROWS / rows_per_second,
        "ops_per_second": rows_per_second,
        "latency": {"all": latency},
        "misses": 0,
        "errors": 0,
        "failed_connections": 0,
    }
    (cell_dir / "run1.out").write_text(json.dumps(bench))


def write_sysbench_run(cell_dir: Path, rows_per_second: float) -> None:
    """One run of sysbench's text report, the lines the report reads."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    seconds = ROWS / rows_per_second
    (cell_dir / "run1.out").write_text(
        "General statistics:\n"
        f"    total time:                          {seconds:.4f}s\n"
        f"    total number of events:              {ROWS}\n"
        "Latency (ms):\n"
        "         avg:                                    2.20\n"
        "         max:                                   40.00\n"
        "         99th percentile:                        7.70\n"
        "Threads fairness:\n"
        "    ignored errors:                      0\n"
        "    reconnects:                          0\n"
    )


def write_cpu(cell_dir: Path, client_us: tuple[float, float], server_us: tuple[float, float] | float,
              elapsed_s: float) -> None:
    """The .client-cpu (GNU time) and .server-cpu files giving exactly these
    microseconds per row: (user, kernel) for the client; (total, kernel) for
    the server, or its total alone as runs before the kernel's part was
    recorded have it."""
    user, system = client_us
    (cell_dir / "run1.client-cpu").write_text(json.dumps(
        {"elapsed_s": elapsed_s, "user_s": user * ROWS / 1e6, "system_s": system * ROWS / 1e6}))
    if isinstance(server_us, tuple):
        total, kernel = server_us
        server = {"cpu_s": total * ROWS / 1e6, "system_s": kernel * ROWS / 1e6}
    else:
        server = {"cpu_s": server_us * ROWS / 1e6}
    (cell_dir / "run1.server-cpu").write_text(json.dumps(server))


def report_of(results: Path) -> tuple[dict, str]:
    subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "sql_report.py"), str(results)],
                   check=True, capture_output=True)
    doc = json.loads((results / "sql-experiments.json").read_text())
    return doc, (results / "sql-experiments.md").read_text()


def test_the_kernel_part_of_each_side_bounds_what_faster_code_could_reach(tmp_path):
    raw = tmp_path / "sql-raw" / "B"
    write_larder_bench_run(raw / "larder", 100_000)
    # 2 + 6 µs of client, 7 µs of server of which 5 in the kernel: 15 µs a
    # row in all, 11 of them in the kernel; 1.5 vCPUs busy over 10 s.
    write_cpu(raw / "larder", (2.0, 6.0), (7.0, 5.0), elapsed_s=10.0)
    write_sysbench_run(raw / "mariadb-innodb", 40_000)
    write_cpu(raw / "mariadb-innodb", (4.0, 11.0), (30.0, 8.0), elapsed_s=22.5)

    doc, markdown = report_of(tmp_path)

    larder = doc["experiments"]["B"]["cells"]["larder"]
    assert larder["client_cpu_us_per_row"] == 8.0
    assert larder["client_system_us_per_row"] == 6.0
    assert larder["server_cpu_us_per_row"] == 7.0
    assert larder["server_system_us_per_row"] == 5.0
    assert larder["vcpus_busy"] == 1.5
    assert round(larder["kernel_only_rows_per_second"], 3) == round(100_000 * 15 / 11, 3)
    assert round(larder["kernel_only_ratio_to_mariadb_innodb"], 6) == round(100_000 * 15 / 11 / 40_000, 6)
    assert larder["ratio_to_mariadb_innodb"] == 2.5
    innodb = doc["experiments"]["B"]["cells"]["mariadb-innodb"]
    assert round(innodb["kernel_only_rows_per_second"], 3) == round(40_000 * 45 / 19, 3)

    [target] = doc["targets"]
    assert target["measured"] == "2.50x (3.41x with no user-space time on Larder's side, at the load measured)"
    assert target["met"] is False
    assert "| larder | 1.50 | 2.0 | 6.0 | 2.0 | 5.0 | 73% | 136,364 | 3.41x |" in markdown
    assert "| mariadb-innodb | 2.00 | 4.0 | 11.0 | 22.0 | 8.0 | 42% | 94,737 | 2.37x |" in markdown


def test_runs_without_the_servers_kernel_part_report_no_bound(tmp_path):
    raw = tmp_path / "sql-raw" / "B"
    write_larder_bench_run(raw / "larder", 100_000)
    write_cpu(raw / "larder", (2.0, 6.0), 7.0, elapsed_s=10.0)
    write_sysbench_run(raw / "mariadb-innodb", 40_000)
    write_cpu(raw / "mariadb-innodb", (4.0, 11.0), 30.0, elapsed_s=22.5)

    doc, markdown = report_of(tmp_path)

    larder = doc["experiments"]["B"]["cells"]["larder"]
    assert larder["server_cpu_us_per_row"] == 7.0
    assert larder["server_system_us_per_row"] is None
    assert larder["kernel_only_rows_per_second"] is None
    assert doc["targets"][0]["measured"] == "2.50x"
    assert "no user-space time" not in markdown


def test_a_run_that_read_no_rows_gives_no_bound(tmp_path):
    raw = tmp_path / "sql-raw" / "B"
    cell = raw / "larder"
    cell.mkdir(parents=True)
    latency = {"p50_us": 0.0, "p99_us": 0.0, "mean_us": 0.0, "max_us": 0.0}
    (cell / "run1.out").write_text(json.dumps({
        "requests": 0, "measured_seconds": 1.0, "ops_per_second": 0.0, "latency": {"all": latency},
        "misses": 0, "errors": 0, "failed_connections": 100,
    }))
    write_cpu(cell, (2.0, 6.0), (7.0, 5.0), elapsed_s=1.0)
    write_sysbench_run(raw / "mariadb-innodb", 40_000)
    write_cpu(raw / "mariadb-innodb", (4.0, 11.0), (30.0, 8.0), elapsed_s=22.5)

    doc, markdown = report_of(tmp_path)

    larder = doc["experiments"]["B"]["cells"]["larder"]
    assert larder["errors"] == 100
    assert larder["kernel_only_rows_per_second"] is None
    assert larder["client_cpu_us_per_row"] is None
    assert "| larder |" not in markdown.split("no user-space time")[-1].split("## Target")[0]
    assert "| mariadb-innodb | 2.00 |" in markdown
