"""Memcached clients in Go, Java and Node.js, written by others, against Larder.

Each program under tests/clients/<language>/ drives one widely used client
library through its own API, asserts every result, and exits 1 naming each
check that failed, or prints "ok N checks" (N check groups, all passed):

  go-gomemcache             gomemcache (text protocol)
  java-spymemcached         spymemcached 2.12.3, its default connection
                            factory (text protocol)
  java-spymemcached-binary  the same program and jar with --binary:
                            spymemcached's BinaryConnectionFactory (binary
                            protocol), the same check groups, each asserting
                            the binary protocol's answer where it differs
                            (status codes for reply lines, keys of any bytes,
                            an unsigned expiry), and get-and-touch, incr with
                            a default and a cas on append, prepend and delete,
                            which the client offers on binary only
  node-memcached            the `memcached` npm package 2.2.2 (text protocol)
  node-memjs                memjs 1.3.2, which speaks only the binary
                            protocol (tests/clients/node/memjs_compat.js)

Every program runs against the real memcached (its own test): that is what
shows its expectations are memcached's behaviour, not guesses. Then against
Larder. Then, through the same client, keys are written to Larder, the
server is killed with SIGKILL, started again on the same data directory, and
every key is read back. `-k against_memcached` runs the memcached half alone.

The toolchains (go, java with mvn, node with npm) come with the machines
the test command runs on, or scripts/test.sh installs Debian's packages.
The clients come from each language's registry at the versions the programs
pin. The Go program is built into a scratch directory; Maven builds into
tests/clients/java/target and npm installs into tests/clients/node/
node_modules (both ignored by git); programs that share a directory and its
build steps (the two Java ones, the two Node.js ones) share one build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

from conftest import REPO_ROOT

CLIENTS_DIR = REPO_ROOT / "tests" / "clients"
BUILD_TIMEOUT_S = 300  # a first build downloads the client and its build tools
RUN_TIMEOUT_S = 180
PERSISTED_KEYS = 2000


@dataclass(frozen=True)
class ClientProgram:
    name: str
    directory: Path
    tools: Sequence[str]
    # Commands run in `directory` to build the program, once per test run;
    # "{out}" is replaced by a scratch directory of the test run.
    build: Sequence[Sequence[str]]
    # The program's argv before "HOST:PORT MODE [ARGS]" (the Go program
    # takes the address as the value of its -addr flag).
    command: Sequence[str]


PROGRAMS = [
    ClientProgram(
        name="go-gomemcache",
        directory=CLIENTS_DIR / "go",
        tools=["go"],
        build=[["go", "build", "-mod=readonly", "-o", "{out}/compat", "."]],
        command=["{out}/compat", "-addr"],
    ),
    ClientProgram(
        name="java-spymemcached",
        directory=CLIENTS_DIR / "java",
        tools=["java", "mvn"],
        build=[["mvn", "-q", "-B", "package"]],
        command=["java", "-jar", str(CLIENTS_DIR / "java" / "target" / "larder-spymemcached-check.jar")],
    ),
    ClientProgram(
        name="java-spymemcached-binary",
        directory=CLIENTS_DIR / "java",
        tools=["java", "mvn"],
        build=[["mvn", "-q", "-B", "package"]],
        command=["java", "-jar", str(CLIENTS_DIR / "java" / "target" / "larder-spymemcached-check.jar"), "--binary"],
    ),
    ClientProgram(
        name="node-memcached",
        directory=CLIENTS_DIR / "node",
        tools=["node", "npm"],
        build=[["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]],
        command=["node", str(CLIENTS_DIR / "node" / "compat.js")],
    ),
    ClientProgram(
        name="node-memjs",
        directory=CLIENTS_DIR / "node",
        tools=["node", "npm"],
        build=[["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]],
        command=["node", str(CLIENTS_DIR / "node" / "memjs_compat.js")],
    ),
]


class BuiltPrograms:
    """Builds each program the first time a test asks for it; programs with
    the same directory and build steps share one build (and its scratch
    directory)."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.commands: Dict[str, List[str]] = {}
        self.failures: Dict[str, str] = {}
        # (directory, build steps) -> (scratch directory, why it failed or "")
        self.builds: Dict[Tuple[str, Tuple[Tuple[str, ...], ...]], Tuple[Path, str]] = {}

    def command(self, program: ClientProgram) -> List[str]:
        if program.name in self.failures:
            pytest.fail(self.failures[program.name], pytrace=False)
        if program.name not in self.commands:
            failure = self._build(program)
            if failure:
                self.failures[program.name] = failure
                pytest.fail(failure, pytrace=False)
        return self.commands[program.name]

    def _build(self, program: ClientProgram) -> str:
        """Builds `program`; returns why it failed, or "" once its command is known."""
        missing = [tool for tool in program.tools if shutil.which(tool) is None]
        if missing:
            return f"{program.name} needs {', '.join(missing)} on PATH"
        key = (str(program.directory), tuple(tuple(step) for step in program.build))
        if key not in self.builds:
            out = self.scratch / program.name
            out.mkdir()
            self.builds[key] = (out, self._run_build(program, out))
        out, failure = self.builds[key]
        if failure:
            return failure
        self.commands[program.name] = [part.replace("{out}", str(out)) for part in program.command]
        return ""

    @staticmethod
    def _run_build(program: ClientProgram, out: Path) -> str:
        for step in program.build:
            argv = [part.replace("{out}", str(out)) for part in step]
            done = run_in(program.directory, argv, BUILD_TIMEOUT_S)
            if done.returncode != 0:
                return (
                    f"building {program.name}: {' '.join(argv)} exited {done.returncode}\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
        return ""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltPrograms:
    return BuiltPrograms(tmp_path_factory.mktemp("client-builds"))


def run_in(directory: Path, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
    )


def run_program(built: BuiltPrograms, program: ClientProgram, server, *args: str) -> subprocess.CompletedProcess:
    if isinstance(server.address, str):  # a Unix domain socket's path
        target = server.address
    else:
        host, port = server.address
        target = f"{host}:{port}"
    return run_in(program.directory, built.command(program) + [target, *args], RUN_TIMEOUT_S)


def explain(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"


def assert_all_passed(done: subprocess.CompletedProcess, against: str) -> None:
    """Exit 0, and the program's last line "ok N checks" with N > 0."""
    assert done.returncode == 0, f"against {against}:\n{explain(done)}"
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert re.fullmatch(r"ok [1-9][0-9]* checks", last), f"against {against}: last line {last!r}\n{explain(done)}"


def assert_verify_failed(done: subprocess.CompletedProcess, keys: str) -> None:
    """The program's own verification failure (exit 1, not a crash, a usage
    error or a timeout), reporting keys `missing`, or only `wrong`."""
    assert done.returncode == 1 and "FAIL verify" in done.stderr, explain(done)
    reported_missing = re.search(r"persist:\d+: .*missing", done.stderr) is not None
    assert re.search(r"persist:\d+: ", done.stderr), explain(done)
    assert reported_missing == (keys == "missing"), f"want keys {keys}:\n{explain(done)}"


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_client_checks_pass_against_memcached(program, built, servers):
    """The program's expectations are memcached's answers."""
    assert_all_passed(run_program(built, program, servers.memcached(), "checks"), "memcached itself")


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_client_checks_pass_against_larder(program, built, servers):
    assert_all_passed(run_program(built, program, servers.larder(durability="everysec"), "checks"), "Larder")


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_client_writes_survive_sigkill(program, built, servers):
    larder = servers.larder(durability="always")
    seed = "7"

    # The verification can fail: on an empty server it must, for missing keys.
    empty = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), seed)
    assert_verify_failed(empty, keys="missing")

    written = run_program(built, program, larder, "write", str(PERSISTED_KEYS), seed)
    assert written.returncode == 0, explain(written)
    larder.restart(crash=True)

    read = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), seed)
    assert read.returncode == 0, f"after SIGKILL and restart:\n{explain(read)}"
    assert f"verified {PERSISTED_KEYS} keys" in read.stdout, explain(read)
    # And another seed's values are not what the server holds: every key is
    # there, with other contents.
    other = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), "8")
    assert_verify_failed(other, keys="wrong")


def test_go_client_checks_pass_over_a_unix_socket(built, servers, tmp_path):
    """gomemcache takes a server address containing a slash as a Unix
    domain socket's path: the same checks, over memcached's socket and then
    Larder's (`-s`), and a Larder's writes there read back after SIGKILL."""
    go = next(program for program in PROGRAMS if program.name == "go-gomemcache")
    memcached = servers.memcached(unix_socket=tmp_path / "memcached.sock")
    assert_all_passed(run_program(built, go, memcached, "checks"), "memcached's socket")
    larder = servers.larder(durability="always", unix_socket=tmp_path / "larder.sock")
    assert_all_passed(run_program(built, go, larder, "checks"), "Larder's socket")
    written = run_program(built, go, larder, "write", str(PERSISTED_KEYS), "11")
    assert written.returncode == 0, explain(written)
    larder.kill()
    assert (tmp_path / "larder.sock").is_socket(), "SIGKILL leaves the socket file"
    larder.start()  # which replaces it
    read = run_program(built, go, larder, "verify", str(PERSISTED_KEYS), "11")
    assert read.returncode == 0, f"after SIGKILL and restart:\n{explain(read)}"
    assert f"verified {PERSISTED_KEYS} keys" in read.stdout, explain(read)
