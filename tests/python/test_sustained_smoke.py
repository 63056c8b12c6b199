"""Smoke test of benchmarks/sustained_writes.sh (Experiment D) at a tiny scale.

Runs the whole script (server, preload, overwrites with `larder bench
--interval`, disk and stats sampler, report) for 6 seconds over 20,000 keys
and checks that its outputs exist and agree with each other: one interval per
2 seconds, each with replies, adding up to the run's total; disk samples with
the server's figures and CPU ticks; each interval's CPU shares; live data
computed the same way the report says.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from conftest import LARDER_BIN, REPO_ROOT, run_script

SCRIPT = REPO_ROOT / "benchmarks" / "sustained_writes.sh"
KEYS = 20_000
VALUE_BYTES = 100
SCRIPT_TIMEOUT_S = 50


def record_bytes_of_every_key(keys: int) -> int:
    """28-byte header + "key:" + decimal id + value, per key (independent of
    the reporter's own arithmetic)."""
    return sum(28 + len(f"key:{key_id}") + VALUE_BYTES for key_id in range(keys))


def test_sustained_writes_script_produces_consistent_results(tmp_path: Path) -> None:
    if not Path(LARDER_BIN).exists():
        pytest.fail(f"larder binary not found at {LARDER_BIN}", pytrace=False)
    results = tmp_path / "results"
    env = dict(
        os.environ,
        LARDER=LARDER_BIN,
        RESULTS_DIR=str(results),
        WORK_DIR=str(tmp_path / "work"),
        DURATION="6s",
        INTERVAL="2s",
        SAMPLE_INTERVAL="2s",
        KEYS=str(KEYS),
        VALUE_SIZE=str(VALUE_BYTES),
        CONNS="8",
        # Small segments, so that segments seal and compaction runs even in
        # a few seconds.
        SEGMENT_BYTES=str(1 << 20),
    )
    log_path = tmp_path / "script.log"
    code = run_script(SCRIPT, env, log_path, SCRIPT_TIMEOUT_S)
    log = log_path.read_text()
    assert code == 0, f"the script exited {code}:\n{log[-4000:]}"

    doc = json.loads((results / "sustained-writes.json").read_text())
    md = (results / "sustained-writes.md").read_text()
    # How the server served its connections, from its start line.
    io = doc["machine"]["io_larder"]
    assert io == "uring" or io.startswith("epoll"), io
    assert f"- io_larder: `{io}`" in md
    svg = ElementTree.parse(results / "sustained-writes.svg").getroot()
    raw = results / "sustained-writes-raw"

    # Intervals: one per 2 s of the 6 s run, each with replies, tiling the
    # run and adding up to its total.
    intervals = doc["intervals"]
    assert [i["index"] for i in intervals] == [0, 1, 2], intervals
    assert all(i["requests"] > 0 and i["ops_per_second"] > 0 for i in intervals), intervals
    assert all(0 < i["p50_us"] <= i["p99_us"] <= i["max_us"] for i in intervals), intervals
    assert intervals[0]["start_seconds"] == 0
    for before, after in zip(intervals, intervals[1:]):
        assert after["start_seconds"] == before["end_seconds"], intervals
    assert sum(i["requests"] for i in intervals) == doc["overall"]["requests"]
    assert doc["overall"]["errors"] == 0 and doc["overall"]["failed_connections"] == 0, doc["overall"]
    assert log.count("[interval ") == 3, "a line per interval while running:\n" + log

    # Samples: disk use and the server's figures, from launch to after the end.
    samples = doc["samples"]
    assert len(samples) >= 3, samples
    assert samples[0]["t"] < 1.0 and samples[-1]["t"] >= 5.0, [s["t"] for s in samples]
    for sample in samples:
        assert sample["du_bytes"] > 0, sample
        assert sample["curr_items"] == KEYS, "overwrites neither add nor lose keys"
        assert sample["larder_writes_failing"] == 0, sample
        for field in ("larder_live_bytes", "larder_dead_bytes", "larder_segments", "larder_compactions"):
            assert isinstance(sample[field], int), (field, sample)

    # CPU: the machine's ticks in every sample, the server's while it ran,
    # and from them each interval's share of the vCPUs, which cannot much
    # exceed the machine's (ticks are 10 ms apart and a virtual machine's
    # steal accounting is approximate: a quarter's slack; a wrong unit would
    # be off by 100x).
    for sample in samples:
        assert set(sample["cpu_ticks"]) == {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}
        assert all(isinstance(v, int) for v in sample["cpu_ticks"].values()), sample
        assert isinstance(sample["server_cpu_ticks"], int), sample
    assert samples[-1]["server_cpu_ticks"] > samples[0]["server_cpu_ticks"], "the server worked"
    most = int(doc["machine"]["nproc"]) * 1.25
    for interval in intervals[:-1]:
        cpu = interval["cpu"]
        assert cpu is not None, interval
        assert 0 < cpu["server_vcpus"] <= most and 0 < cpu["client_vcpus"] <= most, cpu
        assert 0 <= cpu["steal_vcpus"] <= cpu["machine_vcpus"] <= most, cpu
    summary = doc["slow_intervals"]
    assert summary["slow"]["intervals"] + summary["others"]["intervals"] == len(intervals), summary
    assert all(intervals[k]["ops_per_second"] < summary["slow_below_ops_per_second"] for k in summary["slow_indexes"])
    assert "## Slow intervals and CPU" in md and "| server CPU | load generator CPU | stolen |" in md

    # Live data: KEYS x record size, which is also what the server counts.
    live = record_bytes_of_every_key(KEYS)
    assert doc["live_data"]["bytes"] == live
    assert doc["live_data"]["server_live_bytes_last"] == live
    assert samples[-1]["du_bytes"] >= live, "the data directory holds at least the live records"

    # Targets: both judged, and stated in the markdown with the machine.
    assert len(doc["targets"]) == 2 and all(isinstance(t["met"], bool) for t in doc["targets"])
    assert doc["targets"][0]["ratio"] > 0
    assert "## Targets" in md and "KEYS x record size" in md
    # Three intervals are enough for a line and its error.
    trend = doc["trend"]
    # (A trend is given only with its first window's rate above zero.)
    assert trend is not None and trend["intervals"] == 3 and trend["last_ops_per_second"] > 0, trend
    assert "Trend: a straight line fitted to the 3 intervals' rates" in md
    assert md.count("| yes |") + md.count("| **no** |") == 2, md
    assert "- nproc: " in md and "- memory: " in md
    assert "--interval 2s" in md and "--durability everysec" in md
    assert svg.tag.endswith("svg") and len(svg.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 4

    # Nothing left behind: the work directory is removed with the server gone.
    assert not any((tmp_path / "work").iterdir()), list((tmp_path / "work").iterdir())
    assert (raw / "overwrite.json").exists() and (raw / "samples.jsonl").exists()
