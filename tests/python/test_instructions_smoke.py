"""Smoke tests of benchmarks/instructions.sh at a tiny scale.

The script counts, for memcached and Larder, the user-space instructions
(callgrind) and system calls (strace) per request. These tests run it end to
end with real servers and check that every count it reports was taken over
the measured requests alone, and that it refuses bad settings before
starting anything. No count is compared between servers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import LARDER_BIN, REPO_ROOT, run_script

SCRIPT = REPO_ROOT / "benchmarks" / "instructions.sh"
SCRIPT_TIMEOUT_S = 300


def run_instructions(tmp_path: Path, name: str, **settings) -> tuple[int, Path, Path]:
    """Runs the script with `settings` over tiny defaults; returns its exit
    status, results directory and log."""
    results = tmp_path / f"{name}-results"
    work = tmp_path / f"{name}-work"
    work.mkdir()
    defaults = dict(
        REQUESTS="2000",
        KEYS="500",
        CONNS="10",
        INSTALL="0",
        LARDER=LARDER_BIN,
        RESULTS_DIR=str(results),
        WORK_DIR=str(work),
    )
    env = {**os.environ, **defaults, **settings}
    log = tmp_path / f"{name}.log"
    status = run_script(SCRIPT, env, log, SCRIPT_TIMEOUT_S)
    return status, results, log


def test_counts_instructions_and_system_calls_of_every_server_and_workload(tmp_path):
    status, results, log = run_instructions(
        tmp_path, "both", SERVERS="memcached larder", WORKLOADS="get set"
    )
    assert status == 0, log.read_text()[-4000:]

    report = json.loads((results / "instructions.json").read_text())
    assert set(report["workloads"]) == {"get", "set"}
    for workload, cells in report["workloads"].items():
        assert [cell["server"] for cell in cells] == ["memcached", "larder"], workload
        for cell in cells:
            where = f"{workload} {cell['server']}"
            # Closed loop: the client stops once 2000 are answered; up to one
            # request per connection may be in flight then.
            assert 2000 <= cell["requests"] <= 2010, where
            assert 2000 <= cell["syscall_requests"] <= 2010, where
            assert cell["instructions_per_request"] > 0, where
            groups = cell["syscalls_by_group_per_request"]
            # Every request is read and answered once at least: strace saw
            # the threads that serve connections, not just the main one.
            assert groups["receive"] >= 1.0, where
            assert groups["send"] >= 1.0, where
        assert cells[0]["instructions_vs_first"] == 1.0
        assert cells[1]["instructions_vs_first"] == (
            cells[1]["instructions_per_request"] / cells[0]["instructions_per_request"]
        )

    table = (results / "instructions.md").read_text()
    assert "## get" in table and "## set" in table
    commands = (results / "commands.txt").read_text()
    assert "--instr-atstart=no" in commands
    assert "strace -f -c" in commands


def test_the_preload_is_not_counted(tmp_path):
    # Twenty times the keys to preload, the same requests: if the preload's
    # sets were counted, the larger one would cost about twenty times more
    # per request.
    per_request = {}
    for keys in ("500", "10000"):
        status, results, log = run_instructions(
            tmp_path, f"keys{keys}", SERVERS="larder", WORKLOADS="get", KEYS=keys
        )
        assert status == 0, log.read_text()[-4000:]
        report = json.loads((results / "instructions.json").read_text())
        per_request[keys] = report["workloads"]["get"][0]["instructions_per_request"]
    ratio = per_request["10000"] / per_request["500"]
    assert 0.5 < ratio < 2.0, per_request


def test_bad_settings_are_refused_before_anything_starts(tmp_path):
    cases = {
        "unknown": (dict(SERVERS="redis"), "unknown server 'redis'"),
        "twice": (dict(SERVERS="larder larder"), "named twice"),
        "no-binary": (dict(SERVERS=f"larder:{tmp_path}/missing"), "no larder binary at"),
        "workload": (dict(WORKLOADS="scan"), "unknown workload 'scan'"),
        "requests": (dict(REQUESTS="0"), "REQUESTS must be a positive integer"),
    }
    for name, (settings, message) in cases.items():
        status, results, log = run_instructions(tmp_path, name, **settings)
        text = log.read_text()
        assert status != 0, name
        assert message in text, (name, text[-2000:])
        assert "error:" in text, name
        assert not results.exists(), name
        assert ": instructions\n" not in text, name
