"""Fixtures that start real server processes for the black-box tests.

Every server started here runs in its own process group, is tracked, and is
stopped when its fixture ends, whatever the test's outcome: SIGTERM to the
server's PID first (so Larder syncs and exits 0), SIGKILL to its process group
after a bounded wait. No test leaves a process behind.

Environment:
  LARDER_BIN      the larder binary (default: <repo>/target/release/larder)
  MEMCACHED_BIN   the reference memcached (default: /usr/bin/memcached)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LARDER_BIN = os.environ.get("LARDER_BIN", str(REPO_ROOT / "target" / "release" / "larder"))
MEMCACHED_BIN = os.environ.get("MEMCACHED_BIN", "/usr/bin/memcached")
# How every Larder server the tests start serves its connections (`--io`):
# unset for the default (`auto`: rings where the kernel allows them);
# scripts/test.sh runs the client suites again with `epoll` where it does.
LARDER_IO = os.environ.get("LARDER_TEST_IO")

# Parameters that name the one server a test talks to.
SERVER_PARAMETERS = ("server", "own_server", "name")


def talks_to_memcached_alone(item: pytest.Item) -> bool:
    """Whether a collected test talks to memcached and not to Larder: a test
    parametrised with memcached as its server, or one named as checking
    memcached itself."""
    if item.name.split("[")[0].endswith("_against_memcached"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(params.get(name) == "memcached" for name in SERVER_PARAMETERS)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """In a pass with LARDER_TEST_IO set (the suites again, Larder serving
    its connections another way), leave out the tests that talk to memcached
    alone: nothing in them changed since the first pass."""
    if not LARDER_IO:
        return
    kept, left_out = [], []
    for item in items:
        (left_out if talks_to_memcached_alone(item) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


HOST = "127.0.0.1"
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL if the test runner itself dies (Linux)."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def _unix_socket_accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        try:
            sock.connect(str(path))
            return True
        except OSError:
            return False


class ServerProcess:
    """One server process (larder or memcached) listening on 127.0.0.1:port,
    or on the Unix domain socket `unix_socket` when one is given (its
    command line then says so: `-s PATH`).

    `argv_for(port)` builds the command line; the same object can be started
    again after a stop (same port, same data dir) to test restarts.
    """

    def __init__(
        self,
        name: str,
        argv_for: Callable[[int], List[str]],
        log_dir: Path,
        unix_socket: Optional[Path] = None,
    ):
        self.name = name
        self.argv_for = argv_for
        self.port = free_port()
        self.unix_socket = unix_socket
        self.log_dir = log_dir
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.last_returncode: Optional[int] = None
        self.data_dir: Optional[Path] = None
        self.durability: Optional[str] = None
        self._stderr_path: Optional[Path] = None

    # -- lifecycle -------------------------------------------------------

    def start(self) -> "ServerProcess":
        assert self.proc is None, f"{self.name} is already running"
        self._wait_port_free()
        self.starts += 1
        self._stderr_path = self.log_dir / f"{self.name}-{self.starts}.stderr"
        stdout_path = self.log_dir / f"{self.name}-{self.starts}.stdout"
        argv = self.argv_for(self.port)
        with open(self._stderr_path, "wb") as err, open(stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # own process group: cleanup can't miss a child
                preexec_fn=_die_with_parent,  # even a SIGKILLed pytest leaves no server behind
            )
        self._wait_ready(argv)
        return self

    def _accepts(self) -> bool:
        if self.unix_socket is not None:
            return _unix_socket_accepts(self.unix_socket)
        return _port_accepts(self.port)

    def _where(self) -> str:
        return f"unix socket {self.unix_socket}" if self.unix_socket else f"{HOST}:{self.port}"

    def _wait_port_free(self) -> None:
        # A killed predecessor (or a child of it) may still hold the listening
        # socket for a moment; the readiness probe must not mistake it for us.
        deadline = time.monotonic() + 10
        while self._accepts():
            if time.monotonic() > deadline:
                pytest.fail(f"{self._where()} is still in use by another process", pytrace=False)
            time.sleep(0.05)

    def _wait_ready(self, argv: Sequence[str]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                proc, self.proc = self.proc, None
                self._reap_group(proc)  # children it may have left
                code = self.last_returncode = proc.returncode
                pytest.fail(
                    f"{self.name} exited with {code} before listening\n"
                    f"argv: {' '.join(argv)}\nstderr:\n{self.stderr()}",
                    pytrace=False,
                )
            if self._accepts():
                return
            time.sleep(0.02)
        self.kill()
        pytest.fail(
            f"{self.name} did not listen on {self._where()} within {READY_TIMEOUT_S}s\n"
            f"argv: {' '.join(argv)}\nstderr:\n{self.stderr()}",
            pytrace=False,
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM the server's PID and wait; SIGKILL its group if it hangs.

        Returns the exit code (negative signal number if killed); fails the
        test if SIGKILL was needed.
        """
        if self.proc is None:
            return self.last_returncode if self.last_returncode is not None else 0
        proc = self.proc
        hung = False
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                hung = True
        self._reap_group(proc)
        self.proc = None
        self.last_returncode = proc.returncode
        if hung:
            pytest.fail(
                f"{self.name} (pid {proc.pid}) ignored SIGTERM for {timeout}s and was killed\n"
                f"stderr:\n{self.stderr()}",
                pytrace=False,
            )
        return proc.returncode

    def kill(self) -> int:
        """SIGKILL the server (the crash case): no chance to sync anything."""
        if self.proc is None:
            return self.last_returncode if self.last_returncode is not None else 0
        proc = self.proc
        self._reap_group(proc, force=True)
        self.proc = None
        self.last_returncode = proc.returncode
        return proc.returncode

    def restart(self, crash: bool = False) -> "ServerProcess":
        """Stop (SIGTERM, or SIGKILL when crash=True) and start on the same port and data."""
        if crash:
            self.kill()
        else:
            code = self.stop()
            assert code == 0, f"{self.name} exited {code} on SIGTERM\nstderr:\n{self.stderr()}"
        return self.start()

    @staticmethod
    def _reap_group(proc: subprocess.Popen, force: bool = False) -> None:
        # The server is the leader of its own group (start_new_session), so
        # its pid is the group id; this only reaches processes we started.
        if force or proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - kernel trouble
            pass
        # Children left in the group after the leader exited (a wrapper's).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    # -- diagnostics -----------------------------------------------------

    def stderr(self) -> str:
        if self._stderr_path is None or not self._stderr_path.exists():
            return "<no stderr captured>"
        data = self._stderr_path.read_bytes()
        return data[-20000:].decode("utf-8", "replace")

    @property
    def address(self):
        """(host, port), or the socket's path as a string (as pymemcache takes it)."""
        if self.unix_socket is not None:
            return str(self.unix_socket)
        return (HOST, self.port)

    def __repr__(self) -> str:
        return f"<{self.name} {self._where()} pid={self.proc.pid if self.proc else None}>"


def run_script(script: Path, env: dict, log_path: Path, timeout_s: float) -> int:
    """Runs a bash script in its own process group, output to `log_path`, and
    returns its exit code. On a timeout, SIGTERM lets the script's trap stop
    the servers it started, SIGKILL to the group is the backstop, and the
    test fails with the end of the log."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["bash", str(script)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            pytest.fail(f"{script.name} ran past {timeout_s}s:\n{log_path.read_text()[-4000:]}")


def larder_argv(data_dir: Path, durability: str, extra: Sequence[str] = ()) -> Callable[[int], List[str]]:
    def argv(port: int) -> List[str]:
        return [
            LARDER_BIN,
            "serve",
            "-p",
            str(port),
            "-l",
            HOST,
            "--data-dir",
            str(data_dir),
            "--durability",
            durability,
            *(["--io", LARDER_IO] if LARDER_IO else []),
            *extra,
        ]

    return argv


def memcached_argv(extra: Sequence[str] = ()) -> Callable[[int], List[str]]:
    def argv(port: int) -> List[str]:
        cmd = [MEMCACHED_BIN, "-p", str(port), "-l", HOST, "-U", "0", "-m", "64"]
        if os.geteuid() == 0:
            cmd += ["-u", "root"]  # memcached refuses to run as root without -u
        return cmd + list(extra)

    return argv


class ServerFactory:
    """Starts servers on demand and stops every one of them at teardown."""

    def __init__(self, tmp_root: Path):
        self.tmp_root = tmp_root
        self.servers: List[ServerProcess] = []

    def larder(
        self,
        durability: str = "everysec",
        data_dir: Optional[Path] = None,
        extra: Sequence[str] = (),
        start: bool = True,
        unix_socket: Optional[Path] = None,
    ) -> ServerProcess:
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=self.tmp_root))
        if not Path(LARDER_BIN).exists():
            pytest.fail(
                f"larder binary not found at {LARDER_BIN}: run `cargo build --release -p larder` "
                "or set LARDER_BIN",
                pytrace=False,
            )
        if unix_socket is not None:
            extra = [*extra, "-s", str(unix_socket)]
        argv = larder_argv(data_dir, durability, extra)
        server = ServerProcess("larder", argv, self.tmp_root, unix_socket)
        server.data_dir = data_dir
        server.durability = durability
        self.servers.append(server)
        return server.start() if start else server

    def memcached(self, extra: Sequence[str] = (), unix_socket: Optional[Path] = None) -> ServerProcess:
        if not Path(MEMCACHED_BIN).exists():
            pytest.fail(f"memcached not found at {MEMCACHED_BIN}", pytrace=False)
        if unix_socket is not None:
            extra = [*extra, "-s", str(unix_socket)]
        server = ServerProcess("memcached", memcached_argv(extra), self.tmp_root, unix_socket)
        self.servers.append(server)
        return server.start()

    def close(self) -> None:
        errors = []
        for server in reversed(self.servers):
            try:
                if server.running():
                    code = server.stop()
                    if server.name == "larder" and code != 0:
                        errors.append(f"{server!r} exited {code} on SIGTERM (want 0)\n{server.stderr()}")
                elif server.proc is not None:
                    code = server.proc.poll()
                    server.kill()  # reaps it, kills stragglers in its group
                    errors.append(f"{server!r} died by itself with exit code {code}\n{server.stderr()}")
            except BaseException as exc:  # keep stopping the others
                server.kill()
                errors.append(f"{server!r}: {exc}")
        self.servers.clear()
        if errors:
            raise AssertionError("trouble stopping servers:\n" + "\n".join(errors))


def _factory(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp(name))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """Start any number of larder/memcached servers in a test; all stopped at its end.

    `servers.larder(durability=..., data_dir=...)` returns a running server whose
    `.restart()` / `.restart(crash=True)` / `.stop()` / `.kill()` / `.start()`
    work on the same port and data dir.
    """
    yield from _factory(tmp_path_factory, "servers")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh, empty data directory for one test."""
    path = tmp_path / "larder-data"
    path.mkdir()
    return path


@pytest.fixture
def larder(servers: ServerFactory, data_dir: Path) -> ServerProcess:
    """A larder server (durability everysec) on a fresh data dir, for one test."""
    return servers.larder(durability="everysec", data_dir=data_dir)


@pytest.fixture
def memcached(servers: ServerFactory) -> ServerProcess:
    """A real memcached for one test."""
    return servers.memcached()


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """Like `servers`, shared by a whole test module (cheaper for big tables)."""
    yield from _factory(tmp_path_factory, "module-servers")


@pytest.fixture(scope="module")
def module_larder(module_servers: ServerFactory) -> ServerProcess:
    return module_servers.larder(durability="everysec")


@pytest.fixture(scope="module")
def module_memcached(module_servers: ServerFactory) -> ServerProcess:
    return module_servers.memcached()
