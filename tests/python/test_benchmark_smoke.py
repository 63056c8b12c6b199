"""Smoke tests of the comparison scripts at a tiny scale.

The real runs (benchmarks/compare.sh, benchmarks/sql_experiments.sh) take
tens of minutes and are not part of the test command; these run each script
end to end in about a minute, with real servers, and check that every cell
it was asked for has measured figures and no errors. No figure is compared
with a threshold: on a shared 2-core machine only the plumbing is tested.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from conftest import LARDER_BIN, REPO_ROOT, run_script

SCRIPT_TIMEOUT_S = 240


def one_cpu_two_ways() -> tuple[str, str]:
    """One CPU this process may use, as two different `taskset -c` lists
    ("N" and "N-N"), so that a test can tell which one a command got."""
    cpu = min(os.sched_getaffinity(0))
    return f"{cpu}", f"{cpu}-{cpu}"


def run_compare(tmp_path, **settings) -> Path:
    """Runs compare.sh at a tiny size with `settings` as its environment
    (over the defaults below); asserts it succeeded and returns its results
    directory."""
    results = tmp_path / "results"
    defaults = dict(
        RUNS="1",
        # Enough for the CPU checks below: /proc counts in 10 ms ticks, and
        # the reading spans warm-up and measured time, 0.7 s, in which the
        # least busy cell (larder-always sets, one in flight) costs its
        # server some 30 ticks.
        DURATION="500ms",
        WARMUP="200ms",
        KEYS="2000",
        INSTALL="0",
        # Waits at least a second before each measured run, longer only while
        # the machine is busy; bounded so that a busy test machine stays quick.
        SETTLE_SECONDS_MAX="3",
        SERVER_CPUS="",
        CLIENT_CPUS="",
        LARDER=LARDER_BIN,
        RESULTS_DIR=str(results),
        WORK_DIR=str(tmp_path / "work"),
    )
    env = {**os.environ, **defaults, **settings}
    (tmp_path / "work").mkdir()
    log = tmp_path / "compare.log"
    status = run_script(REPO_ROOT / "benchmarks" / "compare.sh", env, log, SCRIPT_TIMEOUT_S)
    assert status == 0, log.read_text()[-4000:]
    return results


def test_compare_script_measures_every_cell(tmp_path):
    results = run_compare(
        tmp_path,
        SERVERS="memcached larder-everysec larder-always",
        WORKLOADS="get set",
        CONNS="4",
        PIPELINES="1 4",
    )

    report = json.loads((results / "results.json").read_text())
    cells = {cell["id"]: cell for cell in report["cells"]}
    wanted = {f"{w}-c4-p{p}" for w in ("get", "set") for p in (1, 4)}
    assert set(cells) == wanted, sorted(cells)
    for cell_id, cell in cells.items():
        assert set(cell["servers"]) == {"memcached", "larder-everysec", "larder-always"}, cell_id
        for server, figures in cell["servers"].items():
            where = f"{cell_id} {server}"
            assert figures["runs"] == 1, where
            assert figures["ops_per_second"]["median"] > 0, where
            assert figures["errors"] == 0 and figures["failed_connections"] == 0, where
            assert figures["latency_us"]["p99"] >= figures["latency_us"]["p50"] > 0, where
            # This test runs on Linux, where /proc/stat has the steal field.
            stolen = figures["host_steal_percent"]
            assert stolen is not None and len(stolen["all"]) == 1, where
            assert 0 <= stolen["max"] <= 100, where
            # Every server spends some ticks of CPU in a run (see
            # run_compare); only a Larder has a compactor.
            cpu = figures["server_cpu_us_per_request"]
            assert cpu is not None and cpu["median"] > 0, where
            compactor = figures["compactor_cpu_us_per_request"]
            assert (compactor is not None) == server.startswith("larder-"), where
            assert compactor is None or 0 <= compactor["median"] <= cpu["median"], where
        assert cell["servers"]["memcached"]["ratio_to_memcached"] == 1.0
    for server in ("memcached", "larder-everysec", "larder-always"):
        busy = []
        for cell_id in wanted:
            settled = (results / "raw" / server / f"{cell_id}-run1.settle").read_text().split()
            assert len(settled) == 2 and 1 <= int(settled[0]) <= 3, (server, cell_id, settled)
            assert settled[1] == "quiet" or settled == ["3", "busy"], (server, cell_id, settled)
            if settled[1] == "busy":
                busy.append(f"{cell_id} run 1")
        waits = report["wait_before_runs"][server]
        assert waits["runs"] == len(wanted) and waits["busy"] == sorted(busy), (server, waits)
    markdown = (results / "results.md").read_text()
    assert "| larder-always |" in markdown
    # The at-a-glance table: a row per cell, a ratio per server but memcached.
    glance = markdown.split("## All cells at a glance", 1)[1].split("\n## ", 1)[0]
    assert "| cell | memcached ops/s (p99 µs) | larder-everysec | larder-always |" in glance
    rows = [line for line in glance.splitlines() if line.startswith(("| get, ", "| set, "))]
    assert len(rows) == len(wanted), rows
    for row in rows:
        ratios = row.strip("|").split("|")[2:]
        assert len(ratios) == 2 and all(cell.strip().endswith("x)") for cell in ratios), row
    assert list((results / "charts").glob("*.svg")), "no charts written"
    commands = (results / "raw" / "commands.txt").read_text().splitlines()
    [start] = [c for c in commands if c.startswith("start larder-always: ")]
    assert " serve -l 127.0.0.1 " in start and start.endswith(" --durability always"), start
    [run] = [c for c in commands if c.startswith("larder-always/set-c4-p4-run1.json: ")]
    assert " bench -s 127.0.0.1:" in run and " -P 4 --ratio 0:1 " in run, run
    assert not any("taskset" in c for c in commands), "pinned without being asked"
    # How each Larder served its connections: what --io auto settled on.
    facts = (results / "machine.txt").read_text().splitlines()
    for server in ("larder-everysec", "larder-always"):
        [choice] = [f.split(": ", 1)[1] for f in facts if f.startswith(f"io_{server}: ")]
        assert choice == "uring" or choice.startswith("epoll"), (server, choice)


def test_compare_script_interleaves_each_cells_runs_reversing_even_ones_and_reports_drift(tmp_path):
    results = run_compare(
        tmp_path,
        RUNS="2",
        SETTLE_SECONDS_MAX="1",
        SERVERS="memcached larder-none",
        WORKLOADS="get set",
        CONNS="2",
        PIPELINES="1",
    )

    commands = (results / "raw" / "commands.txt").read_text().splitlines()
    steps = [c.split(":")[0] for c in commands]
    # Every server started and preloaded once, before any measured run;
    # then each cell's runs, the second in reverse order.
    assert steps == [
        "start memcached",
        "memcached/preload.json",
        "start larder-none",
        "larder-none/preload.json",
        "memcached/get-c2-p1-run1.json",
        "larder-none/get-c2-p1-run1.json",
        "larder-none/get-c2-p1-run2.json",
        "memcached/get-c2-p1-run2.json",
        "memcached/set-c2-p1-run1.json",
        "larder-none/set-c2-p1-run1.json",
        "larder-none/set-c2-p1-run2.json",
        "memcached/set-c2-p1-run2.json",
    ], steps
    report = json.loads((results / "results.json").read_text())
    for server in ("memcached", "larder-none"):
        drift = report["round_drift"][server]
        assert drift["cells"] == 2, (server, drift)
        ratios = []
        for cell_id in ("get-c2-p1", "set-c2-p1"):
            first, second = (
                json.loads((results / "raw" / server / f"{cell_id}-run{n}.json").read_text())["ops_per_second"]
                for n in (1, 2)
            )
            ratios.append(second / first)
        assert drift["by_round"] == [1.0, statistics.median(ratios)], (server, drift)
    assert "## Each run against the first" in (results / "results.md").read_text()
    # Each data directory is measured once, at the end of the run; Larder's
    # holds its log, memcached's nothing.
    assert set(report["data_dir_kib_at_end"]) == {"memcached", "larder-none"}, report["data_dir_kib_at_end"]
    assert report["data_dir_kib_at_end"]["larder-none"] > 0, report["data_dir_kib_at_end"]


def test_compare_script_leaves_out_a_server_whose_preload_fails_and_says_so(tmp_path):
    # memcached refuses a value of exactly 1 MiB (its item header counts
    # against the limit); Larder stores it.
    results = run_compare(
        tmp_path,
        SERVERS="memcached larder-none",
        KEYS="20",
        VALUE_SIZE="1048576",
        WORKLOADS="get",
        CONNS="1",
        PIPELINES="1",
    )

    commands = (results / "raw" / "commands.txt").read_text().splitlines()
    assert not any(c.startswith("memcached/get-") for c in commands), commands
    report = json.loads((results / "results.json").read_text())
    assert set(report["preload_failed"]) == {"memcached"}, report["preload_failed"]
    assert "preload failed" in report["preload_failed"]["memcached"], report["preload_failed"]
    [cell] = report["cells"]
    assert set(cell["servers"]) == {"larder-none"}, cell
    assert cell["servers"]["larder-none"]["ops_per_second"]["median"] > 0, cell
    assert "## Left out of the run: the preload failed" in (results / "results.md").read_text()


@pytest.mark.parametrize(
    "servers, leftover, message",
    [
        ("memcached larder-none", "larder-none", "already exists (left by an earlier run?)"),
        ("larder-none memcached larder-none", None, "SERVERS names a server twice"),
    ],
)
def test_compare_script_refuses_a_used_data_directory_and_a_server_named_twice(
    tmp_path, servers, leftover, message
):
    work = tmp_path / "work"
    work.mkdir()
    if leftover:
        (work / leftover).mkdir()
        (work / leftover / "old-segment").write_bytes(b"from an aborted run")
    env = {
        **os.environ,
        "SERVERS": servers,
        "INSTALL": "0",
        "LARDER": LARDER_BIN,
        "RESULTS_DIR": str(tmp_path / "results"),
        "WORK_DIR": str(work),
    }
    log = tmp_path / "compare.log"
    status = run_script(REPO_ROOT / "benchmarks" / "compare.sh", env, log, SCRIPT_TIMEOUT_S)

    output = log.read_text()
    assert status == 1, output
    assert message in output, output
    # Refused before anything started or was written.
    assert " preloading " not in output, output
    assert not (tmp_path / "results").exists()
    if leftover:
        assert (work / leftover / "old-segment").read_bytes() == b"from an aborted run"


def test_compare_script_pins_servers_and_measured_runs_when_asked(tmp_path):
    server_cpus, client_cpus = one_cpu_two_ways()
    results = run_compare(
        tmp_path,
        SERVERS="memcached larder-none",
        WORKLOADS="get",
        CONNS="1",
        PIPELINES="1",
        SERVER_CPUS=server_cpus,
        CLIENT_CPUS=client_cpus,
    )

    commands = (results / "raw" / "commands.txt").read_text().splitlines()
    for server in ("memcached", "larder-none"):
        [start] = [c for c in commands if c.startswith(f"start {server}: ")]
        assert start.startswith(f"start {server}: taskset -c {server_cpus} "), start
        [run] = [c for c in commands if c.startswith(f"{server}/get-c1-p1-run1.json: ")]
        assert run.startswith(f"{server}/get-c1-p1-run1.json: taskset -c {client_cpus} "), run
        # The preload is not measured and may use every CPU.
        [preload] = [c for c in commands if c.startswith(f"{server}/preload.json: ")]
        assert "taskset" not in preload, preload
        figures = json.loads((results / "results.json").read_text())["cells"][0]["servers"][server]
        assert figures["ops_per_second"]["median"] > 0, server
    settings = (results / "machine.txt").read_text()
    assert f"SERVER_CPUS='{server_cpus}' CLIENT_CPUS='{client_cpus}'" in settings


def run_sql_experiments(tmp_path, **settings) -> Path:
    """Runs sql_experiments.sh at smoke size with `settings` as its
    environment (over the defaults below); asserts it succeeded and returns
    its results directory."""
    results = tmp_path / "results"
    defaults = dict(
        SMOKE="1",
        SERVER_CPUS="",
        CLIENT_CPUS="",
        LARDER=LARDER_BIN,
        RESULTS_DIR=str(results),
        TMPDIR=str(tmp_path),
    )
    env = {**os.environ, **defaults, **settings}
    log = tmp_path / "sql.log"
    status = run_script(REPO_ROOT / "benchmarks" / "sql_experiments.sh", env, log, SCRIPT_TIMEOUT_S)
    assert status == 0, log.read_text()[-4000:]
    return results


def test_sql_experiments_script_measures_every_server(tmp_path):
    results = run_sql_experiments(tmp_path)

    report = json.loads((results / "sql-experiments.json").read_text())
    expected = {
        "A": {"larder", "memcached", "mariadb-innodb"},
        "B": {"larder", "memcached", "mariadb-innodb", "mariadb-memory"},
    }
    for name, servers in expected.items():
        cells = report["experiments"][name]["cells"]
        assert set(cells) == servers, (name, sorted(cells))
        for server, cell in cells.items():
            where = f"experiment {name} {server}"
            assert cell["rows_per_second"]["median"] > 0, where
            assert cell["errors"] == 0, where
            assert cell["misses"] == 0, where
    markdown = (results / "sql-experiments.md").read_text()
    assert markdown.count("| larder |") >= 2
    assert "- io_larder: `uring`" in markdown or "- io_larder: `epoll" in markdown, markdown[:2000]


def test_sql_experiments_script_pins_servers_and_clients(tmp_path):
    server_cpus, client_cpus = one_cpu_two_ways()
    results = run_sql_experiments(
        tmp_path,
        EXPERIMENTS="B",
        SERVERS_B="larder mariadb-innodb",
        SERVER_CPUS=server_cpus,
        CLIENT_CPUS=client_cpus,
    )

    commands = (results / "sql-raw" / "commands.txt").read_text().splitlines()
    for label, cpus in (
        ("B start larder", server_cpus),
        ("B start mariadb", server_cpus),
        ("B larder run1", client_cpus),
        ("B mariadb-innodb run1", client_cpus),
    ):
        [line] = [c for c in commands if c.startswith(label + ":")]
        assert line.startswith(f"{label}: taskset -c {cpus} "), line
    # taskset execs the server, so the PID the script measures is the
    # server's own: it used CPU while it was read.
    for server in ("larder", "mariadb-innodb"):
        used = json.loads((results / "sql-raw" / "B" / server / "run1.server-cpu").read_text())
        assert used["cpu_s"] > 0, server
        assert 0 <= used["system_s"] <= used["cpu_s"], (server, used)
    markdown = (results / "sql-experiments.md").read_text()
    assert f"pinned to CPUs {server_cpus} and every measured client to CPUs {client_cpus}" in markdown


def test_sql_experiments_script_reads_over_unix_sockets(tmp_path):
    results = run_sql_experiments(
        tmp_path, EXPERIMENTS="B", SERVERS_B="larder memcached mariadb-innodb", TRANSPORT="unix"
    )

    cells = json.loads((results / "sql-experiments.json").read_text())["experiments"]["B"]["cells"]
    assert set(cells) == {"larder", "memcached", "mariadb-innodb"}
    for server, cell in cells.items():
        assert cell["rows_per_second"]["median"] > 0, server
        assert (cell["errors"], cell["misses"]) == (0, 0), server
    commands = (results / "sql-raw" / "commands.txt").read_text().splitlines()

    def command(label: str) -> list:
        [line] = [c for c in commands if c.startswith(label + ":")]
        return line.split()

    for server in ("larder", "memcached"):
        started = command(f"B start {server}")
        assert "-p" not in started and "-l" not in started, started
        socket_path = started[started.index("-s") + 1]
        assert socket_path.endswith("/server.sock"), started
        client = command(f"B {server} run1")
        assert client[client.index("-s") + 1] == socket_path, client
    sysbench = command("B mariadb-innodb run1")
    assert any(word.startswith("--mysql-socket=") for word in sysbench), sysbench
    assert not any(word.startswith("--mysql-port=") for word in sysbench), sysbench
    assert "over each server's Unix domain socket" in (results / "sql-experiments.md").read_text()


def test_sql_experiments_script_refuses_cpus_the_machine_lacks(tmp_path):
    env = dict(os.environ, SMOKE="1", SERVER_CPUS="4095", LARDER=LARDER_BIN, TMPDIR=str(tmp_path))
    log = tmp_path / "sql.log"
    status = run_script(REPO_ROOT / "benchmarks" / "sql_experiments.sh", env, log, SCRIPT_TIMEOUT_S)
    assert status != 0
    assert "cannot pin to CPUs '4095'" in log.read_text()


def test_pairs_script_alternates_two_builds_and_reports_their_ratio(tmp_path):
    results = tmp_path / "results"
    # A names its own binary (a link to the same build, under another name),
    # B takes LARDER's: each side must start the binary it was given.
    a_binary = tmp_path / "larder-a"
    a_binary.symlink_to(LARDER_BIN)
    env = {
        **os.environ,
        "A": f"larder-none:{a_binary}",
        "B": "larder-always-epoll",
        "PAIRS": "2",
        "WORKLOAD": "set",
        "CONNS": "4",
        "KEYS": "2000",
        # As in run_compare: enough for the server's CPU reading.
        "DURATION": "500ms",
        "WARMUP": "200ms",
        "INSTALL": "0",
        "SETTLE_SECONDS_MAX": "3",
        "SERVER_CPUS": "",
        "CLIENT_CPUS": "",
        "LARDER": LARDER_BIN,
        "RESULTS_DIR": str(results),
        "WORK_DIR": str(tmp_path / "work"),
    }
    log = tmp_path / "pairs.log"
    status = run_script(REPO_ROOT / "benchmarks" / "pairs.sh", env, log, SCRIPT_TIMEOUT_S)
    assert status == 0, log.read_text()[-4000:]

    doc = json.loads((results / "pairs.json").read_text())
    assert [(p["pair"], p["order"]) for p in doc["pairs"]] == [(1, "A B"), (2, "B A")]
    for p in doc["pairs"]:
        for side in ("A", "B"):
            run = p[side]
            assert run["ops_per_second"] > 0 and run["errors"] == 0, (p["pair"], side)
            assert run["server_cpu_us_per_request"] > 0, (p["pair"], side)
            assert 0 <= run["host_steal_percent"] <= 100, (p["pair"], side)
            settled = (results / "raw" / f"pair{p['pair']}-{side}.settle").read_text().split()
            assert settled[1] == "quiet" or settled == ["3", "busy"], (p["pair"], side)
            assert 1 <= int(settled[0]) <= 3, (p["pair"], side)
            assert run["wait_after_preload"] == " ".join(settled), (p["pair"], side)
            # Both sides are Larders that logged sets: the report reads
            # their stats from around the run.
            assert run["compaction_bytes_per_logged_byte"] >= 0, (p["pair"], side)
            assert 0 <= run["compactor_cpu_us_per_request"] <= run["server_cpu_us_per_request"], \
                (p["pair"], side)
        assert p["ratio_b_to_a"] == p["B"]["ops_per_second"] / p["A"]["ops_per_second"]
    ratios = [p["ratio_b_to_a"] for p in doc["pairs"]]
    assert doc["summary"]["ratio_b_to_a"]["median"] == statistics.median(ratios)
    assert "**B / A: " in (results / "pairs.md").read_text()

    # Each side ran the server it named, in alternating order.
    commands = (results / "raw" / "commands.txt").read_text().splitlines()
    starts = [c for c in commands if " start: " in c]
    assert [c.split(":")[0] for c in starts] == [
        "pair 1 A start", "pair 1 B start", "pair 2 B start", "pair 2 A start"]
    for c in starts:
        a_side = " A start: " in c
        binary, tail = (str(a_binary), "--durability none") if a_side \
            else (LARDER_BIN, "--durability always --io epoll")
        assert c.split(": ", 1)[1].startswith(f"{binary} serve "), c
        assert c.endswith(tail), c
    facts = (results / "machine.txt").read_text().splitlines()
    assert any(f.startswith("larder_A: ") for f in facts), facts
    # A on its default (--io auto: rings where the kernel allows them), B
    # on epoll by name; each recorded once, from its server's start line.
    [a_io] = [f for f in facts if f.startswith("io_A: ")]
    assert a_io in ("io_A: uring", "io_A: epoll") or a_io.startswith("io_A: epoll: io_uring refused"), a_io
    assert [f for f in facts if f.startswith("io_B: ")] == ["io_B: epoll"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("memcached:/bin/true", "only a Larder server takes a binary: 'memcached:/bin/true'"),
        ("larder-none:", "no binary after ':' in 'larder-none:'"),
        ("larder-none:/nonexistent/larder", "no larder binary at /nonexistent/larder"),
        ("larder-sometimes", "unknown server 'larder-sometimes'"),
    ],
)
def test_pairs_script_refuses_a_bad_side_before_writing_anything(tmp_path, spec, message):
    env = {**os.environ, "A": "larder-none", "B": spec, "INSTALL": "0",
           "LARDER": LARDER_BIN, "RESULTS_DIR": str(tmp_path / "results")}
    log = tmp_path / "pairs.log"
    status = run_script(REPO_ROOT / "benchmarks" / "pairs.sh", env, log, SCRIPT_TIMEOUT_S)
    assert status != 0
    assert message in log.read_text()
    assert not (tmp_path / "results").exists()
