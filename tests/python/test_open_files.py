"""Larder and the limit on open files.

memcached raises its soft limit on open files to fit its connections, and
stops accepting while it has no descriptor left. Larder raises its soft
limit to the hard one (its segment files need descriptors too) and stops
accepting the same way. These
tests start a real server and change its limit from outside with prlimit.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from typing import List

from conftest import HOST

# Below -c plus this many files the server warns (lib.rs).
FILES_BESIDES_CONNECTIONS = 64


def soft_open_files_limit(pid: int) -> int:
    soft, _hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    return soft


def cpu_ticks(pid: int) -> int:
    """User plus system CPU time of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def version(sock: socket.socket) -> bytes:
    sock.sendall(b"version\r\n")
    reply = b""
    while not reply.endswith(b"\r\n"):
        data = sock.recv(256)
        assert data, "connection closed"
        reply += data
    return reply


def test_the_server_raises_its_soft_limit_to_the_hard_limit(servers):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1024 + FILES_BESIDES_CONNECTIONS
    assert hard >= wanted, f"this machine's hard limit ({hard}) is below what the test needs"
    # The server inherits a soft limit far below what -c 1024 needs.
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        larder = servers.larder(extra=["-c", "1024"])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert soft_open_files_limit(larder.pid) == hard
    assert "open files limit" not in larder.stderr()


def test_out_of_file_descriptors_the_server_waits_instead_of_spinning(servers):
    larder = servers.larder()
    pid = larder.pid
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    open_now = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_now + 4, hard))

    accepted: List[socket.socket] = []
    waiting: List[socket.socket] = []
    try:
        # Connect until one is not served: it waits in the listen queue.
        for _ in range(20):
            sock = socket.create_connection((HOST, larder.port), timeout=1.0)
            try:
                assert version(sock).startswith(b"VERSION ")
                accepted.append(sock)
            except socket.timeout:
                waiting.append(sock)
                break
        assert waiting, "every connection was served: the limit did not bite"
        assert len(accepted) >= 1

        # While it cannot accept, the server does not spin: over 2 seconds it
        # uses far less than the whole core a retry loop takes.
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        before = cpu_ticks(pid)
        time.sleep(2.0)
        used = cpu_ticks(pid) - before
        assert used < ticks_per_second // 2, f"{used} ticks of CPU in 2 s while out of descriptors"

        # Connections already open are still served.
        for sock in accepted:
            assert version(sock).startswith(b"VERSION ")

        # Once connections close, the waiting one is accepted and served.
        for sock in accepted:
            sock.close()
        accepted.clear()
        waiting[0].settimeout(10.0)
        assert version(waiting[0]).startswith(b"VERSION ")
    finally:
        for sock in accepted + waiting:
            sock.close()
    log = larder.stderr()
    assert log.count("cannot accept a connection") == 1, log[-2000:]


def larder_under_open_files_limit(servers, limit: int, connections: int):
    """A Larder started with soft and hard open-files limits of `limit`
    (set by prlimit, which then runs it: same process)."""
    larder = servers.larder(extra=["-c", str(connections)], start=False)
    argv_for = larder.argv_for
    larder.argv_for = lambda port: ["prlimit", f"--nofile={limit}:{limit}", "--", *argv_for(port)]
    return larder.start()


def test_the_server_warns_when_its_hard_limit_is_below_what_its_connections_need(servers):
    limit = 200
    larder = larder_under_open_files_limit(servers, limit, connections=1024)
    assert resource.prlimit(larder.pid, resource.RLIMIT_NOFILE) == (limit, limit)
    with socket.create_connection((HOST, larder.port), timeout=5) as sock:
        assert version(sock).startswith(b"VERSION ")
    warnings = [line for line in larder.stderr().splitlines() if "open files limit" in line]
    assert len(warnings) == 1, larder.stderr()
    assert "raise ulimit -n" in warnings[0]


def test_no_warning_when_the_hard_limit_covers_the_connections(servers):
    limit = 200
    larder = larder_under_open_files_limit(servers, limit, connections=limit - FILES_BESIDES_CONNECTIONS)
    with socket.create_connection((HOST, larder.port), timeout=5) as sock:
        assert version(sock).startswith(b"VERSION ")
    assert "open files limit" not in larder.stderr()
