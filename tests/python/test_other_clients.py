"""Memcached clients in Go, Java and Node.js, written by others, against Larder.

Each program under tests/clients/<language>/ drives one widely used client
library through its own API (gomemcache, spymemcached, the `memcached` npm
package), asserts every result, and exits non-zero naming each check that
failed. Every program runs against the real memcached first: that is what
shows its expectations are memcached's behaviour, not guesses. Then against
Larder. Then, through the same client, keys are written to Larder, the
server is killed with SIGKILL, started again on the same data directory, and
every key is read back.

The toolchains (go, java with mvn, node with npm) come with the machines
the test command runs on; their packages are fetched, at the versions the
programs pin, from the language's registry the first time.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

from conftest import REPO_ROOT

CLIENTS_DIR = REPO_ROOT / "tests" / "clients"
BUILD_TIMEOUT_S = 900  # the first build downloads the client and its build tools
RUN_TIMEOUT_S = 180
PERSISTED_KEYS = 2000


@dataclass(frozen=True)
class ClientProgram:
    name: str
    directory: Path
    tools: Sequence[str]
    # Commands run in `directory` to build the program, once per test run;
    # "{out}" is replaced by a scratch directory outside the repository.
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
        name="node-memcached",
        directory=CLIENTS_DIR / "node",
        tools=["node", "npm"],
        build=[["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]],
        command=["node", str(CLIENTS_DIR / "node" / "compat.js")],
    ),
]


class BuiltPrograms:
    """Builds each program the first time a test asks for it."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.commands: Dict[str, List[str]] = {}

    def command(self, program: ClientProgram) -> List[str]:
        if program.name not in self.commands:
            missing = [tool for tool in program.tools if shutil.which(tool) is None]
            assert not missing, f"{program.name} needs {', '.join(missing)} on PATH"
            out = self.scratch / program.name
            out.mkdir()
            for step in program.build:
                argv = [part.replace("{out}", str(out)) for part in step]
                done = run_in(program.directory, argv, BUILD_TIMEOUT_S)
                assert done.returncode == 0, (
                    f"building {program.name}: {' '.join(argv)} exited {done.returncode}\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
            self.commands[program.name] = [part.replace("{out}", str(out)) for part in program.command]
        return self.commands[program.name]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltPrograms:
    return BuiltPrograms(tmp_path_factory.mktemp("client-builds"))


def run_in(directory: Path, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
    )


def run_program(built: BuiltPrograms, program: ClientProgram, server, *args: str) -> subprocess.CompletedProcess:
    host, port = server.address
    return run_in(program.directory, built.command(program) + [f"{host}:{port}", *args], RUN_TIMEOUT_S)


def explain(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"


def passed_checks(done: subprocess.CompletedProcess) -> int:
    """The count from the program's last line, "ok N checks"."""
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    words = last.split()
    assert len(words) == 3 and words[0] == "ok" and words[2] == "checks", f"last line {last!r}"
    return int(words[1])


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_client_checks_pass_against_memcached_and_larder(program, built, servers):
    reference = run_program(built, program, servers.memcached(), "checks")
    assert reference.returncode == 0, f"{program.name} against memcached itself:\n{explain(reference)}"
    expected = passed_checks(reference)
    assert expected > 0

    done = run_program(built, program, servers.larder(durability="everysec"), "checks")
    assert done.returncode == 0, f"{program.name} against Larder:\n{explain(done)}"
    assert passed_checks(done) == expected, "Larder ran a different number of checks than memcached"


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_client_writes_survive_sigkill(program, built, servers):
    larder = servers.larder(durability="always")
    seed = "7"

    # The verification can fail: on an empty server it must.
    empty = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), seed)
    assert empty.returncode != 0, f"verify passed on an empty server:\n{explain(empty)}"

    written = run_program(built, program, larder, "write", str(PERSISTED_KEYS), seed)
    assert written.returncode == 0, explain(written)
    larder.restart(crash=True)

    read = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), seed)
    assert read.returncode == 0, f"after SIGKILL and restart:\n{explain(read)}"
    # And a different seed's values are not what the server holds.
    other = run_program(built, program, larder, "verify", str(PERSISTED_KEYS), "8")
    assert other.returncode != 0, f"verify with another seed passed:\n{explain(other)}"
