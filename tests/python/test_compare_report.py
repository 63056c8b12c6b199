"""The arithmetic of benchmarks/report.py (the report of compare.sh) on runs
made up here, so that the expected figures are known exactly: the server's
CPU per request, and next to the ratio of two servers' medians the median
of their ratios run by run and in how many runs one was ahead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from report import run_by_run, run_ratios  # noqa: E402

MEASURED_S, WARMUP_S = 4.0, 0.5


def write_run(raw: Path, server: str, cell: str, run: int, ops: float, cpu: dict | None) -> None:
    """One run as compare.sh leaves it: larder bench's JSON and, when given,
    the server's CPU over it (the .cpu file of write_cpu in lib.sh)."""
    directory = raw / server
    directory.mkdir(parents=True, exist_ok=True)
    workload = cell.split("-")[0]
    latency = {"p50_us": 100.0, "p90_us": 200.0, "p99_us": 900.0, "p999_us": 2000.0, "max_us": 5000.0}
    bench = {
        "ops_per_second": ops,
        "measured_seconds": MEASURED_S,
        "settings": {"warmup_seconds": WARMUP_S},
        "latency": {
            "all": latency,
            "get": {"count": 1 if workload != "set" else 0, "p99_us": 900.0},
            "set": {"count": 1 if workload != "get" else 0, "p99_us": 900.0},
        },
        "errors": 0,
        "failed_connections": 0,
        "misses": 0,
        "first_failure": None,
    }
    (directory / f"{cell}-run{run}.json").write_text(json.dumps(bench))
    if cpu is not None:
        (directory / f"{cell}-run{run}.cpu").write_text(json.dumps(cpu))


def cpu_for(ops: float, us_per_request: float, compactor_us: float | None = None) -> dict:
    """A .cpu file giving exactly these microseconds per request."""
    served = ops * (MEASURED_S + WARMUP_S)
    return {
        "server_cpu_s": us_per_request * served / 1e6,
        "compactor_cpu_s": None if compactor_us is None else compactor_us * served / 1e6,
    }


@pytest.fixture
def report(tmp_path) -> tuple[dict, str]:
    raw = tmp_path / "raw"
    runs = {
        # cell: server -> ops/s of runs 1, 2, 3
        "set-c500-p1": {
            "memcached": [100_000, 100_000, 100_000],
            # Median 1.05x memcached's, ahead in runs 2 and 3 only.
            "larder-everysec": [95_000, 105_000, 110_000],
            # Median 70k: ahead of Redis's median 66k, and in runs 2 and 3.
            "larder-always": [60_000, 80_000, 70_000],
            "redis-always": [65_000, 75_000, 66_000],
        },
        "get-c50-p1": {
            "memcached": [200_000, 200_000, 205_000],
            # Median above memcached's, behind it in two runs of three.
            "larder-everysec": [190_000, 230_000, 202_000],
        },
    }
    for cell, servers in runs.items():
        for server, ops_by_run in servers.items():
            for run, ops in enumerate(ops_by_run, start=1):
                if server == "memcached":
                    cpu = cpu_for(ops, 10.0)
                elif server == "larder-everysec":
                    cpu = cpu_for(ops, 8.0 + run, compactor_us=0.5 * run)
                elif server == "larder-always" and run == 2:
                    cpu = None  # not recorded: the cell's figure is n/a
                else:
                    cpu = cpu_for(ops, 12.0)
                write_run(raw, server, cell, run, ops, cpu)
    subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "report.py"), str(tmp_path)],
                   check=True, capture_output=True)
    return (json.loads((tmp_path / "results.json").read_text()),
            (tmp_path / "results.md").read_text())


def cell_of(doc: dict, cell_id: str) -> dict:
    [cell] = [c for c in doc["cells"] if c["id"] == cell_id]
    return cell["servers"]


def test_the_report_gives_each_servers_cpu_per_request(report):
    doc, markdown = report
    sets = cell_of(doc, "set-c500-p1")
    assert sets["memcached"]["server_cpu_us_per_request"] == pytest.approx(
        {"median": 10.0, "min": 10.0, "max": 10.0})
    assert sets["memcached"]["compactor_cpu_us_per_request"] is None
    assert sets["larder-everysec"]["server_cpu_us_per_request"] == pytest.approx(
        {"median": 10.0, "min": 9.0, "max": 11.0})
    assert sets["larder-everysec"]["compactor_cpu_us_per_request"] == pytest.approx(
        {"median": 1.0, "min": 0.5, "max": 1.5})
    # One run without its .cpu file: no figure rather than one from two runs.
    assert sets["larder-always"]["server_cpu_us_per_request"] is None
    table = markdown.split("## set-only (0:1), 500 connections, pipeline 1", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert "| 10.0 [10.0-10.0] |" in rows["memcached"]
    assert "| 10.0 [9.0-11.0] (compactor 1.00) |" in rows["larder-everysec"]
    assert "| n/a |" in rows["larder-always"]


def test_the_targets_give_the_runs_ratios_beside_the_ratio_of_medians(report):
    doc, markdown = report
    values = {(t["cell"], t["server"]): t for t in doc["targets"]}
    everysec = values[("set, 500 conns, P1", "larder-everysec")]
    assert everysec["value"] == "1.05x (per run 1.05x, ahead of memcached in 2 of 3)"
    assert everysec["met"]
    always = values[("set, 500 conns, P1", "larder-always")]
    assert always["value"] == "0.70x memcached, 1.06x redis-always (per run 1.06x, ahead of redis-always in 2 of 3)"
    assert always["met"]
    gets = values[("get, 50 conns, P1", "larder-everysec")]
    # The ratio of medians meets the target while Larder was behind in two
    # runs of three, and the median of the runs' ratios is under 1.
    assert gets["value"] == "1.01x ops/s, p99 1.00x (per run 0.99x, ahead of memcached in 1 of 3)"
    assert gets["met"]
    assert "| 1.05x (per run 1.05x, ahead of memcached in 2 of 3) | yes |" in markdown
    # Each server's ops/s by run, for reading the pairs again.
    assert cell_of(doc, "get-c50-p1")["larder-everysec"]["ops_by_run"] == {
        "1": 190_000, "2": 230_000, "3": 202_000}


def test_runs_are_compared_only_where_both_servers_have_them():
    mine = {"ops_by_run": {1: 10.0, 2: 30.0, 4: 50.0}}
    theirs = {"ops_by_run": {1: 20.0, 2: 20.0, 3: 20.0, 4: 50.0}}
    # Runs 1, 2 and 4 are shared; ahead in run 2 only (a tie is not ahead).
    assert run_ratios(mine, theirs) == [0.5, 1.5, 1.0]
    assert run_by_run(mine, theirs, "them") == "per run 1.00x, ahead of them in 1 of 3"
    assert run_by_run(theirs, mine, "them") == "per run 1.00x, ahead of them in 1 of 3"
    assert run_by_run({"ops_by_run": {1: 10.0}}, {"ops_by_run": {2: 5.0}}, "them") == "no run shared with them"


def test_runs_past_the_ninth_keep_their_order(tmp_path):
    # File names sort run10 before run2; every per-run figure must not.
    raw = tmp_path / "raw"
    for run in range(1, 12):
        write_run(raw, "memcached", "get-c50-p1", run, 1000.0 * run, cpu_for(1000.0 * run, 10.0))
        (raw / "memcached" / f"get-c50-p1-run{run}.steal").write_text(
            json.dumps({"host_steal_percent": float(run)}))
    subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "report.py"), str(tmp_path)],
                   check=True, capture_output=True)
    doc = json.loads((tmp_path / "results.json").read_text())
    memcached = cell_of(doc, "get-c50-p1")["memcached"]
    assert memcached["host_steal_percent"]["all"] == [float(run) for run in range(1, 12)]
    assert list(memcached["ops_by_run"]) == [str(run) for run in range(1, 12)]
    markdown = (tmp_path / "results.md").read_text()
    assert "| " + ", ".join(f"{run:.1f}" for run in range(1, 12)) + " [11.0] |" in markdown
