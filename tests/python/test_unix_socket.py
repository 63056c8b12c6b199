"""Serving on a Unix domain socket (`-s PATH`, `-a MODE`), as memcached does.

What the two servers share is checked on the real memcached first, through
the same client (pymemcache, which takes a path as a Unix socket's address),
and then on Larder: ordinary commands, the socket file's permissions and
`stats settings` (and on Larder alone, `stats conns`). What is Larder's own is checked on Larder alone: writes
over the socket surviving SIGKILL, a clean stop removing the file and its
lock file (`PATH.lock`), a second Larder on a path in use stopped by that
lock, a socket memcached listens on or a path that is not a socket stopping
the start (memcached would take the path over), and bad modes refused.
"""

from __future__ import annotations

import socket
import stat
import subprocess
from pathlib import Path

import pytest
from pymemcache.client.base import Client

from conftest import LARDER_BIN


def client(server) -> Client:
    return Client(server.address, connect_timeout=5, timeout=10, default_noreply=False)


def mode_of(path: Path) -> int:
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode), f"{path} is not a socket"
    return stat.S_IMODE(info.st_mode)


def serve(*args: str) -> subprocess.CompletedProcess:
    """`larder serve ARGS`, expected to stop by itself."""
    return subprocess.run([LARDER_BIN, "serve", *args], capture_output=True, text=True, timeout=30)


def start(servers, name: str, socket_path: Path, extra=()):
    if name == "memcached":
        return servers.memcached(extra=extra, unix_socket=socket_path)
    return servers.larder(extra=extra, unix_socket=socket_path)


@pytest.mark.parametrize("name", ["memcached", "larder"])
def test_commands_and_settings_over_the_socket(servers, tmp_path, name):
    path = tmp_path / f"{name}.sock"
    server = start(servers, name, path)
    assert mode_of(path) == 0o700  # memcached's default -a
    c = client(server)
    assert c.set("k", b"v1", expire=0, flags=5)
    assert c.get("k") == b"v1"
    value, cas = c.gets("k")
    assert value == b"v1"
    assert c.cas("k", b"v2", cas) is True
    assert c.cas("k", b"v3", cas) is False
    assert c.add("k", b"other") is False
    assert c.set("n", b"10")
    assert c.incr("n", 5) == 15
    assert c.get_many(["k", "n", "missing"]) == {"k": b"v2", "n": b"15"}
    assert c.delete("k") is True
    assert c.get("k") is None
    settings = c.stats("settings")
    assert settings[b"domain_socket"] == str(path).encode()
    assert settings[b"umask"] == 0o700  # pymemcache reads it as octal
    assert settings[b"tcpport"] == server.port  # -p, though not listened on
    if name == "larder":
        # `stats conns` names the socket `unix:PATH`: the listener's address,
        # and each connection's address and listen address. (memcached 1.6
        # cuts the listener's to 32 bytes, past which it prints stray bytes,
        # and prints `?:<AF 0>` for a connection's own address.)
        conns = c.stats("conns")
        fields: dict = {}
        for stat_name, value in conns.items():
            fd, field = stat_name.decode().split(":", 1)
            fields.setdefault(fd, {})[field] = value.decode() if isinstance(value, bytes) else value
        listeners = [f for f in fields.values() if f.get("state") == "conn_listening"]
        assert len(listeners) == 1 and listeners[0]["addr"] == f"unix:{path}", conns
        clients = [f for f in fields.values() if "listen_addr" in f]
        # The asking connection, and perhaps the start-up probe's if its
        # close is not yet seen (it connects and closes at once, and a busy
        # machine may accept it late): every one is named by the socket.
        asking = [f for f in clients if f.get("state") == "conn_parse_cmd"]
        assert len(asking) == 1, conns
        assert all(f["listen_addr"] == f["addr"] == f"unix:{path}" for f in clients), conns
    c.close()


@pytest.mark.parametrize("name", ["memcached", "larder"])
def test_the_socket_gets_the_mode_given_with_a(servers, tmp_path, name):
    path = tmp_path / f"{name}.sock"
    server = start(servers, name, path, extra=["-a", "0770"])
    assert mode_of(path) == 0o770
    assert client(server).stats("settings")[b"umask"] == 0o770


def test_acknowledged_writes_over_the_socket_survive_sigkill(servers, tmp_path):
    path = tmp_path / "larder.sock"
    larder = servers.larder(durability="always", unix_socket=path)
    c = client(larder)
    for i in range(500):
        assert c.set(f"key-{i}", f"value-{i}".encode())
    c.close()
    larder.kill()
    assert stat.S_ISSOCK(path.lstat().st_mode), "SIGKILL leaves the socket file"
    lock = tmp_path / "larder.sock.lock"
    assert lock.is_file(), "and its lock file, no longer locked"
    larder.start()  # which takes the lock and replaces the socket file
    c = client(larder)
    found = c.get_many([f"key-{i}" for i in range(500)])
    assert found == {f"key-{i}": f"value-{i}".encode() for i in range(500)}
    c.close()
    assert larder.stop() == 0
    assert not path.exists(), "a clean stop removes the socket file"
    assert not lock.exists(), "and its lock file"


def test_a_socket_in_use_or_a_path_that_is_not_a_socket_stops_the_start(servers, tmp_path):
    live = tmp_path / "live.sock"
    servers.larder(unix_socket=live)
    taken = serve("-s", str(live), "--data-dir", str(tmp_path / "second"))
    assert taken.returncode == 1, taken
    lines = taken.stderr.strip().splitlines()
    assert lines[-1] == (
        f"larder: cannot listen on unix socket {live}: the lock file {live}.lock is held by "
        "another process (a Larder starting, serving or stopping on this path)"
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(live))  # the first server still has it

    memcached_socket = tmp_path / "memcached.sock"
    servers.memcached(unix_socket=memcached_socket)
    taken = serve("-s", str(memcached_socket), "--data-dir", str(tmp_path / "fourth"))
    assert taken.returncode == 1, taken
    assert taken.stderr.strip().splitlines()[-1] == (
        f"larder: cannot listen on unix socket {memcached_socket}: a server is listening on it already"
    )
    assert not Path(f"{memcached_socket}.lock").exists(), "a failed start removes its lock file"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(memcached_socket))  # memcached still has it

    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    refused = serve("-s", str(file), "--data-dir", str(tmp_path / "third"))
    assert refused.returncode == 1, refused
    assert "is not a socket" in refused.stderr.strip().splitlines()[-1]
    assert file.read_text() == "keep me"


@pytest.mark.parametrize("mode", ["999", "rw", "+700", "01777"])
def test_a_bad_mode_is_refused_with_one_line(tmp_path, mode):
    done = serve("-s", str(tmp_path / "x.sock"), "-a", mode, "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        f'larder: "{mode}" is not a socket permission mode (octal, 0 to 0777, e.g. 0700)'
    ]
    assert not (tmp_path / "d").exists(), "nothing is created for a refused start"


def test_memcacheds_long_name_for_the_mode_is_taken(servers, tmp_path):
    path = tmp_path / "larder.sock"
    servers.larder(unix_socket=path, extra=["--unix-mask", "0750"])
    assert mode_of(path) == 0o750
