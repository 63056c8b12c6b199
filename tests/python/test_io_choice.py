"""How Larder chooses to serve its connections (`--io`).

By default (`auto`) it serves them on io_uring rings where the kernel lets
it set them up, and on epoll where it does not, as in a container whose
seccomp profile refuses io_uring (Docker's default one does). The refusal
is made real here: `without_io_uring.py` starts the server under a seccomp
filter that fails `io_uring_setup` with EPERM. Either way the start line
and `stats settings` (`larder_io`) say which it chose; `--io uring` asked
for outright where it is refused stops the start with one line, before the
data directory is touched.

On rings, a thread that runs out of work polls a little before it sleeps
(`--idle-poll-us`, 50 µs by default); an idle server must still sleep.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

from conftest import HOST, LARDER_BIN, ServerFactory, ServerProcess, free_port

WITHOUT_IO_URING = Path(__file__).resolve().parent / "without_io_uring.py"


def kernel_allows_io_uring() -> bool:
    """Whether this process may set up a ring (io_uring_setup, number 425)."""
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(425, 2, params)
    if fd < 0:
        return False
    libc.close(fd)
    return True


def serve_argv(data_dir: Path, io: Sequence[str], refuse_rings: bool):
    def argv(port: int) -> List[str]:
        wrapper = [sys.executable, str(WITHOUT_IO_URING)] if refuse_rings else []
        return [
            *wrapper,
            LARDER_BIN,
            "serve",
            "-l",
            HOST,
            "-p",
            str(port),
            "--data-dir",
            str(data_dir),
            *io,
        ]

    return argv


def start(servers: ServerFactory, tmp_path: Path, io: Sequence[str], refuse_rings: bool) -> ServerProcess:
    server = ServerProcess("larder", serve_argv(tmp_path / "data", io, refuse_rings), tmp_path)
    servers.servers.append(server)  # stopped by its PID at teardown
    return server.start()


def settings(server: ServerProcess) -> Dict[str, str]:
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"stats settings\r\n")
        reply = b""
        while not reply.endswith(b"END\r\n"):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed mid-reply: {reply!r}"
            reply += chunk
    lines = reply.decode().split("\r\n")
    return {
        parts[1]: parts[2]
        for parts in (line.split(" ", 2) for line in lines if line.startswith("STAT "))
    }


def set_and_get(server: ServerProcess) -> None:
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"set k 7 0 5\r\nvalue\r\nget k\r\n")
        want = b"STORED\r\nVALUE k 7 5\r\nvalue\r\nEND\r\n"
        reply = b""
        while len(reply) < len(want):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed mid-reply: {reply!r}"
            reply += chunk
    assert reply == want


def start_line(server: ServerProcess) -> str:
    lines = [line for line in server.stderr().splitlines() if " listening on " in line]
    assert len(lines) == 1, server.stderr()
    return lines[0]


@pytest.mark.parametrize("refuse_rings", [False, True], ids=["kernel", "seccomp-refused"])
@pytest.mark.parametrize("io", [[], ["--io", "auto"]], ids=["default", "auto"])
def test_the_default_serves_on_rings_where_allowed_and_on_epoll_where_refused_saying_why(
    servers: ServerFactory, tmp_path: Path, io: List[str], refuse_rings: bool
) -> None:
    server = start(servers, tmp_path, io, refuse_rings)
    if refuse_rings or not kernel_allows_io_uring():
        assert settings(server)["larder_io"] == "epoll"
        assert ", io epoll: io_uring refused here (" in start_line(server), start_line(server)
        if refuse_rings:
            assert start_line(server).endswith(
                "(Operation not permitted (os error 1)))"
            ), start_line(server)
    else:
        assert settings(server)["larder_io"] == "uring"
        assert start_line(server).endswith(", io uring)"), start_line(server)
    set_and_get(server)
    assert server.stop() == 0


def test_epoll_asked_for_is_kept_where_rings_are_allowed(servers: ServerFactory, tmp_path: Path) -> None:
    server = start(servers, tmp_path, ["--io", "epoll"], refuse_rings=False)
    assert settings(server)["larder_io"] == "epoll"
    assert start_line(server).endswith(", io epoll)")
    set_and_get(server)
    assert server.stop() == 0


def test_uring_asked_for_where_it_is_refused_stops_the_start_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    argv = serve_argv(data_dir, ["--io", "uring"], refuse_rings=True)(free_port())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        "larder: cannot use io_uring (Operation not permitted (os error 1)): "
    ), done.stderr
    assert "--io epoll" in done.stderr
    assert not data_dir.exists(), "a refused start must not create the data directory"


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name, in parentheses, may hold spaces: split after it.
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks / os.sysconf("SC_CLK_TCK")


# An idle server, two ring threads each polling without end, would use about
# IDLE_SECONDS of CPU per thread; sleeping, it uses a few ticks.
IDLE_SECONDS = 2.0
IDLE_CPU_SECONDS_MAX = 0.25


def test_an_idle_server_stops_polling_and_sleeps(servers: ServerFactory, tmp_path: Path) -> None:
    server = start(servers, tmp_path, [], refuse_rings=False)
    # Only rings poll: where the kernel refuses them this checks epoll.
    want_io = "uring" if kernel_allows_io_uring() else "epoll"
    assert settings(server)["larder_io"] == want_io
    assert settings(server)["larder_idle_poll_us"] == "50"
    with socket.create_connection(server.address, timeout=10) as idle_client:
        for _ in range(200):
            set_and_get(server)
        idle_client.sendall(b"version\r\n")
        assert idle_client.recv(100).startswith(b"VERSION ")
        # Every ring thread has had work and now has none; one holds a
        # connection whose next request never comes.
        before = cpu_seconds(server.pid)
        time.sleep(IDLE_SECONDS)
        used = cpu_seconds(server.pid) - before
    assert used < IDLE_CPU_SECONDS_MAX, f"an idle server used {used:.2f} s of CPU in {IDLE_SECONDS} s"
    assert server.stop() == 0


def test_the_idle_poll_can_be_turned_off_and_is_held_to_a_millisecond(
    servers: ServerFactory, tmp_path: Path
) -> None:
    server = start(servers, tmp_path, ["--idle-poll-us", "0"], refuse_rings=False)
    assert settings(server)["larder_idle_poll_us"] == "0"
    set_and_get(server)
    assert server.stop() == 0
    data_dir = tmp_path / "refused"
    argv = serve_argv(data_dir, ["--idle-poll-us", "1001"], refuse_rings=False)(free_port())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done
    assert done.stderr == "larder: idle poll 1001 us is outside 0..=1000 us\n", done.stderr
    assert not data_dir.exists(), "a refused start must not create the data directory"
