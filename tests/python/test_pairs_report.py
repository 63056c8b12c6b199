"""The arithmetic of the benchmark reports (benchmarks/pairs_report.py and
the stolen-CPU figure of benchmarks/lib.sh) on inputs made up here, so that
the expected figures are known exactly."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from pairs_report import build, markdown, ratio_at_equal_steal  # noqa: E402


def pair(ratio: float, stolen_a: float, stolen_b: float) -> dict:
    return {
        "A": {"host_steal_percent": stolen_a},
        "B": {"host_steal_percent": stolen_b},
        "ratio_b_to_a": ratio,
    }


def test_the_fit_recovers_the_ratio_hidden_under_stolen_cpu():
    # B is 1.08x A at equal steal and loses 2.5% per point of steal more
    # than A: pairs whose median alone would say otherwise.
    true_ratio, per_point = 1.08, -0.025
    pairs = [
        pair(true_ratio * math.exp(per_point * (b - a)), a, b)
        for a, b in [(1.0, 30.0), (2.0, 25.0), (20.0, 3.0), (4.0, 18.0), (5.0, 5.5)]
    ]
    median = sorted(p["ratio_b_to_a"] for p in pairs)[2]
    assert median < 1.0  # the median is misled by the steal
    fit = ratio_at_equal_steal(pairs)
    assert fit is not None
    assert fit["ratio_b_to_a"] == pytest.approx(true_ratio, rel=1e-9)
    assert fit["log_ratio_per_stolen_percent"] == pytest.approx(per_point, rel=1e-9)
    assert fit["correlation"] == pytest.approx(-1.0)


def test_no_fit_without_the_figures_with_too_few_pairs_or_one_difference():
    three = [pair(1.1, 1.0, 2.0), pair(0.9, 5.0, 1.0), pair(1.0, 3.0, 3.5)]
    assert ratio_at_equal_steal(three) is not None
    assert ratio_at_equal_steal(three[:2]) is None
    missing = three + [pair(1.0, None, 2.0)]
    assert ratio_at_equal_steal(missing) is None
    # The same difference in every pair cannot separate steal from servers.
    same_difference = [pair(r, 1.0, 3.0) for r in (1.1, 0.9, 1.0)]
    assert ratio_at_equal_steal(same_difference) is None


def write_run(raw: Path, name: str, ops: float, stolen: float, waited: str = "1 quiet",
              p99_us: float = 900.0) -> None:
    """One side of a pair as pairs.sh leaves it: larder bench's JSON, the
    server's CPU seconds, the stolen CPU and the wait after the preload."""
    bench = {
        "ops_per_second": ops,
        "measured_seconds": 4.0,
        "settings": {"warmup_seconds": 0.5},
        "latency": {"all": {"p50_us": 100.0, "p99_us": p99_us}},
        "errors": 0,
    }
    (raw / f"{name}.json").write_text(json.dumps(bench))
    (raw / f"{name}.cpu").write_text(json.dumps({"server_cpu_s": 0.9}))
    (raw / f"{name}.steal").write_text(json.dumps({"host_steal_percent": stolen}))
    (raw / f"{name}.settle").write_text(waited + "\n")


def test_the_report_shows_the_fit_next_to_the_median(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    # B is 1.05x A at equal steal and loses 2% per point more than A.
    sides = [(2.0, 12.0), (10.0, 1.0), (3.0, 3.0), (1.0, 6.0)]
    for n, (a, b) in enumerate(sides, start=1):
        write_run(raw, f"pair{n}-A", 10_000.0, a)
        write_run(raw, f"pair{n}-B", 10_000.0 * 1.05 * math.exp(-0.02 * (b - a)), b,
                  "30 busy" if n == 3 else "2 quiet")
    doc = build(tmp_path)
    fit = doc["summary"]["at_equal_steal"]
    assert fit["ratio_b_to_a"] == pytest.approx(1.05, rel=1e-9)
    text = markdown(doc)
    assert "At equal CPU stolen by the host: **1.050x**" in text
    assert "-2.0% per point" in text
    assert "| 1 | unknown | 10,000 |" in text and text.count("| 2.0 | 12.0 |") == 1
    assert "**Measured while the machine was still busy after the preload**: pair 3 B." in text


def test_the_report_gives_the_median_of_the_pairs_p99_ratios(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    # Pair by pair B's p99 is 0.8x, 1.2x, 0.9x, 1.25x and 0.7x A's, while A's
    # own p99 wanders from pair to pair.
    p99s = [(1000.0, 800.0), (2000.0, 2400.0), (1000.0, 900.0), (2000.0, 2500.0), (3000.0, 2100.0)]
    for n, (a, b) in enumerate(p99s, start=1):
        write_run(raw, f"pair{n}-A", 10_000.0, 1.0, p99_us=a)
        write_run(raw, f"pair{n}-B", 11_000.0, 1.0, p99_us=b)
    doc = build(tmp_path)
    summary = doc["summary"]
    assert summary["p99_ratio_b_to_a"]["median"] == pytest.approx(0.9)
    assert summary["p99_ratio_b_to_a"]["min"] == pytest.approx(0.7)
    assert summary["p99_ratio_b_to_a"]["max"] == pytest.approx(1.25)
    assert summary["b_p99_lower_in"] == 3
    text = markdown(doc)
    assert "**p99 B / A: 0.900x** (median of the pairs' p99 ratios; min 0.700x, max 1.250x; " \
        "B's p99 lower in 3 of 5)." in text
    assert "| 2,000 | 2,500 | 1.250x |" in text
    # The sides' own medians (2,000 and 2,100 µs) would have said 1.05x.
    assert summary["B"]["p99_us"]["median"] / summary["A"]["p99_us"]["median"] == pytest.approx(1.05)


def test_a_pair_whose_a_side_has_no_p99_gives_no_p99_ratio(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_run(raw, "pair1-A", 10_000.0, 1.0, p99_us=0.0)
    write_run(raw, "pair1-B", 10_000.0, 1.0)
    doc = build(tmp_path)
    assert "p99_ratio_b_to_a" not in doc["summary"]
    text = markdown(doc)
    assert "p99 B / A:" not in text and "| 0 | 900 | n/a |" in text


def write_stats(raw: Path, name: str, logged: int, compacted: int) -> None:
    """A Larder's `stats` around a run as pairs.sh saves them, with other
    lines among the two that count."""
    for suffix, scale in (("stats-before", 1), ("stats-after", 3)):
        (raw / f"{name}.{suffix}").write_text(
            f"pid 42\nlarder_log_bytes_written {logged * scale // 2}\n"
            f"version 0.1.0\nlarder_compaction_bytes_written {compacted * scale // 2}\n")


def test_the_report_gives_the_bytes_compaction_wrote_per_byte_logged(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for n, (a, b) in enumerate([(0.5, 0.2), (0.7, 0.3), (0.4, 0.25)], start=1):
        for side, share in (("A", a), ("B", b)):
            write_run(raw, f"pair{n}-{side}", 10_000.0, 0.0)
            # Before the run the server had logged and compacted as much
            # again (the preload): only what the run added counts.
            write_stats(raw, f"pair{n}-{side}", 1_000_000, int(share * 1_000_000))
    doc = build(tmp_path)
    assert doc["pairs"][0]["A"]["compaction_bytes_per_logged_byte"] == pytest.approx(0.5)
    assert doc["summary"]["B"]["compaction_bytes_per_logged_byte"] == pytest.approx(
        {"median": 0.25, "min": 0.2, "max": 0.3})
    assert "per byte logged during the runs (Larder's `stats`), median [min-max]: " \
        "A 0.50 [0.40-0.70]; B 0.25 [0.20-0.30]." in markdown(doc)


def test_the_report_gives_no_compaction_figure_without_both_stats(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for side in "AB":
        write_run(raw, f"pair1-{side}", 10_000.0, 0.0)
    write_stats(raw, "pair1-A", 1_000_000, 500_000)
    (raw / "pair1-A.stats-after").unlink()
    doc = build(tmp_path)
    assert doc["pairs"][0]["A"]["compaction_bytes_per_logged_byte"] is None
    assert "compaction_bytes_per_logged_byte" not in doc["summary"]["A"]
    assert "per byte logged" not in markdown(doc)


def test_the_report_gives_the_compactor_threads_cpu_per_request(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    # 10,000 ops/s over 4.5 s (measured and warm-up): 45,000 requests.
    for n, (a, b) in enumerate([(0.045, 0.009), (0.0225, 0.018), (0.036, None)], start=1):
        for side, seconds in (("A", a), ("B", b)):
            write_run(raw, f"pair{n}-{side}", 10_000.0, 0.0)
            cpu = {"server_cpu_s": 0.9, "compactor_cpu_s": seconds}
            (raw / f"pair{n}-{side}.cpu").write_text(json.dumps(cpu))
    doc = build(tmp_path)
    assert doc["pairs"][0]["A"]["compactor_cpu_us_per_request"] == pytest.approx(1.0)
    assert doc["pairs"][2]["B"]["compactor_cpu_us_per_request"] is None
    assert doc["summary"]["A"]["compactor_cpu_us_per_request"] == pytest.approx(
        {"median": 0.8, "min": 0.5, "max": 1.0})
    # B lacks it in one pair (not a Larder there, or an older result): no summary.
    assert "compactor_cpu_us_per_request" not in doc["summary"]["B"]
    assert "compactor thread (`larder-compact`) in µs per request, median [min-max]: " \
        "A 0.80 [0.50-1.00]." in markdown(doc)


def test_the_cpu_of_threads_is_read_by_their_name(tmp_path):
    # A process whose busy thread names itself larder-compact, as the server's
    # compactor does, while its main thread sleeps. The name is set by the
    # thread itself: a process's own name is not settled when Popen returns
    # (the kernel renames an exec'ing process after it closes the descriptors
    # Popen waits on).
    spinner = (
        "import ctypes, threading, time\n"
        "def spin():\n"
        "    ctypes.CDLL(None).prctl(15, b'larder-compact', 0, 0, 0)\n"
        "    while True: pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "time.sleep(600)\n")
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; ' \
        'thread_cpu_seconds "$1" larder-compact; thread_cpu_seconds "$1" larder-absent; ' \
        'cpu_seconds "$1"'
    busy = subprocess.Popen([sys.executable, "-c", spinner])

    def read() -> list[float]:
        out = subprocess.run(["bash", "-c", script, "bash", str(busy.pid)],
                             check=True, capture_output=True, text=True).stdout
        return [float(x) for x in out.split()]
    try:
        tries = 200
        while tries and read()[0] < 0.05:
            tries -= 1
            subprocess.run(["sleep", "0.05"], check=True)
        compactor, absent, process = read()
        tasks = {t.name: (t / "comm").read_text().strip()
                 for t in Path(f"/proc/{busy.pid}/task").iterdir()}
    finally:
        busy.kill()
        busy.wait()
    assert compactor >= 0.05, f"threads of the busy process: {tasks}"
    assert absent == 0.0
    # Read after the thread's figure, the whole process has used at least as much.
    assert process >= compactor


def test_the_cpu_of_threads_of_a_process_gone_is_none_and_fails_nothing():
    # pairs.sh runs under `set -euo pipefail`: a thread (or the process)
    # ending while it is read must not end the script.
    script = f'set -euo pipefail; source "{REPO_ROOT}/benchmarks/lib.sh"; ' \
        'thread_cpu_seconds "$1" larder-compact; thread_ticks "$1" >/dev/null; echo done'
    gone = subprocess.Popen(["true"])
    gone.wait()
    out = subprocess.run(["bash", "-c", script, "bash", str(gone.pid)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.00", "done"]


def test_seconds_between_two_readings_is_their_difference_to_the_hundredth():
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; ' \
        'seconds_between 1.25 3.50; seconds_between 12.00 12.00; seconds_between 0 0.126'
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["2.25", "0.00", "0.13"]


def test_a_runs_cpu_file_is_the_difference_of_two_readings(tmp_path):
    # cpu_reading gives "PROCESS COMPACTOR", "-" for a server without a
    # compactor; write_cpu turns two of them into the run's .cpu file.
    larder, other = tmp_path / "larder.cpu", tmp_path / "memcached.cpu"
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; ' \
        'write_cpu "$1" "1.25 0.50" "3.50 0.75"; write_cpu "$2" "4.00 -" "4.10 -"'
    subprocess.run(["bash", "-c", script, "bash", str(larder), str(other)], check=True)
    assert json.loads(larder.read_text()) == {"server_cpu_s": 2.25, "compactor_cpu_s": 0.25}
    assert json.loads(other.read_text()) == {"server_cpu_s": 0.1, "compactor_cpu_s": None}


def test_a_cpu_reading_names_a_compactor_only_for_a_larder_and_fails_for_a_process_gone():
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; cpu_reading "$1" "$2"'

    def reading(name: str, pid: int) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script, "bash", name, str(pid)], capture_output=True, text=True)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        larder, other = reading("larder-everysec", sleeper.pid), reading("memcached", sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    # The sleeper has no thread named larder-compact: 0.00 for a Larder.
    assert larder.returncode == 0 and larder.stdout.split()[1] == "0.00", larder
    assert other.returncode == 0 and other.stdout.split()[1] == "-", other
    # The process's own seconds, to the hundredth, as cpu_seconds gives them.
    assert re.fullmatch(r"\d+\.\d\d", larder.stdout.split()[0]), larder
    assert re.fullmatch(r"\d+\.\d\d", other.stdout.split()[0]), other
    assert reading("larder-everysec", sleeper.pid).returncode != 0


def steal_between(before: str, after: str, tmp_path: Path) -> Path:
    out = tmp_path / "run.steal"
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; write_steal "$1" "$2" "$3"'
    subprocess.run(["bash", "-c", script, "bash", str(out), before, after], check=True)
    return out


def test_stolen_cpu_is_the_steal_share_of_all_cpu_time(tmp_path):
    # 200 ticks passed on all CPUs, 20 of them stolen.
    out = steal_between("1000 10", "1200 30", tmp_path)
    assert json.loads(out.read_text()) == {"host_steal_percent": 10.0}
    assert json.loads(steal_between("5 1", "5 1", tmp_path).read_text()) == {"host_steal_percent": 0.0}
    out.unlink()
    steal_between("", "1200 30", tmp_path)
    assert not out.exists()


def cpu_line() -> list[int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    assert fields[0] == "cpu"
    return [int(x) for x in fields[1:]]


def test_host_ticks_reads_user_to_steal_from_proc_stat():
    # The counters only grow, so what /proc/stat says just before and just
    # after the script ran bounds what the script read: user to steal are
    # the first eight fields after "cpu" (guest, after them, is part of user
    # already), steal the eighth.
    before = cpu_line()
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; host_ticks'
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout
    after = cpu_line()
    total, stolen = map(int, out.split())
    assert sum(before[:8]) <= total <= sum(after[:8])
    assert before[7] <= stolen <= after[7]


def settle(seconds_max: int, busy_ticks: list[int] | None = None) -> str:
    """Runs lib.sh's settle. With `busy_ticks`, its clock does not tick
    (sleep returns at once) and each reading of the machine's busy CPU is
    the next of those figures, so the outcome does not depend on the load
    of the machine running the test."""
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"\n'
    if busy_ticks is not None:
        readings = " ".join(str(t) for t in busy_ticks)
        script += f"""readings=({readings}); n=0
sleep() {{ :; }}
busy_ticks() {{ echo "${{readings[$n]}}"; }}
"""
        # Each reading runs in a subshell, so the index moves in the caller:
        # settle reads once before its loop and once per pass.
        script += 'eval "$(declare -f settle | sed \'s/busy_ticks)"/busy_ticks)"; n=$((n + 1))/g\')"\n'
    script += 'settle "$1"'
    return subprocess.run(["bash", "-c", script, "bash", str(seconds_max)], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_settle_stops_at_the_first_quiet_second():
    # CLK_TCK is 100 on Linux: a tenth of one CPU is 10 ticks per second.
    assert settle(30, [0, 50, 100, 105]) == "3 quiet"
    assert settle(30, [0, 9]) == "1 quiet"


def test_settle_gives_up_at_its_bound_while_the_machine_stays_busy():
    assert settle(3, [0, 20, 40, 60, 80]) == "3 busy"
    assert settle(0, []) == "0 skipped"


def test_settle_sees_a_really_busy_machine():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # One CPU kept busy is far above a tenth of one.
        assert settle(2) == "2 busy"
    finally:
        spinner.kill()
        spinner.wait()


def test_busy_ticks_reads_user_nice_system_irq_and_softirq():
    before = cpu_line()
    script = f'source "{REPO_ROOT}/benchmarks/lib.sh"; busy_ticks'
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout
    after = cpu_line()
    busy = [0, 1, 2, 5, 6]  # idle, iowait and steal (3, 4, 7) are not busy
    assert sum(before[i] for i in busy) <= int(out) <= sum(after[i] for i in busy)


def test_the_report_names_zipfian_keys_only_when_the_run_drew_them(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for n in (1, 2):
        write_run(raw, f"pair{n}-A", 10_000.0, 0.0)
        write_run(raw, f"pair{n}-B", 10_000.0, 0.0)
    for skew, expected in (("0.99", "mix, keys zipfian (skew 0.99), 50 connections"), ("", "mix, 50 connections")):
        (tmp_path / "machine.txt").write_text(
            f"settings: A='a' B='b' PAIRS=2 WORKLOAD=mix CONNS=50 ZIPF_SKEW='{skew}' DURATION=4s\n"
        )
        assert expected in markdown(build(tmp_path))
