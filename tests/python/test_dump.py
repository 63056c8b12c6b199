"""`larder export` and `larder import`, through the real binary and real servers.

Items written by a real client (pymemcache) to a real Larder come out of
`larder export` as memcached `set` commands that a real memcached takes as
they stand (sent down a socket, nothing comes back), and that `larder
import` stores in a fresh data directory a restarted Larder then serves:
the same values, flags and expiry. A dump with anything but `set` commands
in it is refused with exit code 2 and one line naming the request, and
leaves no data directory behind. And memcached's own `memcached-tool ...
dump` dumps a running Larder, through `lru_crawler metadump all`.
"""

from __future__ import annotations

import base64
import socket
import subprocess
from pathlib import Path

import pytest
from pymemcache.client.base import Client

from conftest import LARDER_BIN

COMMAND_TIMEOUT_S = 60
ITEMS = {
    "plain": (b"value", 0, 0),
    "binary": (bytes(range(256)) * 40, 42, 0),
    "crlf": (b"a\r\nset x 0 0 1\r\ny\r\n", 7, 0),
    "empty": (b"", 1, 0),
    "expiring": (b"soon", 3, 3600),
}
# A key the text protocol cannot carry, stored through the meta protocol
# in base64: the dump carries it as an `ms` with the key in base64.
AWKWARD_KEY = base64.b64encode(b"a b\r\nflush_all\x00").decode()
AWKWARD_VALUE = b"kept apart"


def client(server) -> Client:
    return Client(server.address, connect_timeout=5, timeout=10, default_noreply=False)


def larder(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LARDER_BIN, *args], capture_output=True, timeout=COMMAND_TIMEOUT_S)


def fill(server, awkward: bool = True) -> None:
    c = client(server)
    for key, (value, flags, expire) in ITEMS.items():
        assert c.set(key, value, expire=expire, flags=flags)
    assert c.set("deleted", b"x")
    assert c.delete("deleted")
    c.close()
    if not awkward:
        return
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(f"ms {AWKWARD_KEY} {len(AWKWARD_VALUE)} b F9\r\n".encode() + AWKWARD_VALUE + b"\r\n")
        assert sock.makefile("rb").readline() == b"HD\r\n"


def meta_get(sock: socket.socket, key: str, more: str = "") -> tuple:
    """`mg KEY v f t` (and `more` flags) on a raw socket: the header's fields and the value."""
    sock.sendall(f"mg {key} v f t{more}\r\n".encode())
    stream = sock.makefile("rb")
    fields = stream.readline().split()
    assert fields[0] == b"VA", (key, fields)
    value = stream.read(int(fields[1]) + 2)[:-2]
    return fields, value


def check(server) -> None:
    with socket.create_connection(server.address, timeout=10) as sock:
        for key, (value, flags, expire) in ITEMS.items():
            fields, got = meta_get(sock, key)
            assert got == value, (key, got[:100])
            assert b"f%d" % flags in fields, (key, fields)
            ttl = next(int(field[1:]) for field in fields if field.startswith(b"t"))
            if expire:
                assert 0 < ttl <= expire, (key, fields)
            else:
                assert ttl == -1, (key, fields)
        fields, got = meta_get(sock, AWKWARD_KEY, " b")
        assert got == AWKWARD_VALUE and b"f9" in fields, (fields, got)
    c = client(server)
    assert c.get_many(list(ITEMS) + ["deleted"]) == {key: item[0] for key, item in ITEMS.items()}
    c.close()


def test_an_export_loads_into_memcached_and_through_import_into_a_fresh_larder(servers, tmp_path):
    source = servers.larder()
    fill(source)
    assert source.stop() == 0
    dump = tmp_path / "dump"
    exported = larder("export", "--data-dir", str(source.data_dir), "--output", str(dump))
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.decode().strip() == (
        f"larder: exported {len(ITEMS) + 1} items "
        f"({sum(len(item[0]) for item in ITEMS.values()) + len(AWKWARD_VALUE)} bytes of values) "
        f"from {source.data_dir}"
    )
    assert not (tmp_path / "dump.partial").exists()
    text = dump.read_bytes()
    assert text.count(b" noreply\r\n") == len(ITEMS), text[:300]
    assert text.count(f"ms {AWKWARD_KEY} ".encode()) == 1 and b"flush_all" not in text, text[:300]

    # Into a real memcached, as it stands: `noreply`, so nothing comes back.
    memcached = servers.memcached()
    with socket.create_connection(memcached.address, timeout=10) as sock:
        sock.sendall(text + b"mn\r\n")
        reply = b""
        while not reply.endswith(b"MN\r\n"):
            chunk = sock.recv(65536)
            assert chunk, reply
            reply += chunk
    assert reply == b"MN\r\n", reply
    check(memcached)

    # Into a fresh data directory, served by a new Larder.
    target = tmp_path / "target"
    imported = larder("import", "--data-dir", str(target), str(dump))
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr.decode().startswith(f"larder: imported {len(ITEMS) + 1} items "), imported.stderr
    check(servers.larder(data_dir=target))


def test_an_export_to_standard_output_is_the_same_dump(servers, tmp_path):
    source = servers.larder()
    fill(source)
    assert source.stop() == 0
    dump = tmp_path / "dump"
    assert larder("export", "--data-dir", str(source.data_dir), "-o", str(dump)).returncode == 0
    piped = larder("export", "--data-dir", str(source.data_dir))
    assert piped.returncode == 0, piped.stderr
    # Items come in the keydir's order, which a restart may change. Each
    # item ends with CRLF, so its pieces between CRLFs are its own.
    def commands(text: bytes) -> list:
        return sorted(text.split(b"\r\n"))

    assert commands(piped.stdout) == commands(dump.read_bytes())


@pytest.mark.parametrize(
    "text,where,reason",
    [
        (b"set a 0 0 1\r\nx\r\nget a\r\n", "request 2 (at byte 16)", "`get` is not a plain store"),
        (b"set a 0 0 1\r\nx\r\nset b 0 0 9\r\nabc", "request 2 (at byte 16)", "the file ends inside this request"),
        (b"set a 0 0 1\r\nxyz\r\n", "request 1 (at byte 0)", "CLIENT_ERROR bad data chunk"),
        (b"set a 0 0 2000000\r\n", "request 1 (at byte 0)", "SERVER_ERROR object too large for cache"),
    ],
)
def test_a_bad_dump_is_refused_with_one_line_and_changes_nothing(tmp_path, text, where, reason):
    dump = tmp_path / "dump"
    dump.write_bytes(text)
    target = tmp_path / "target"
    result = larder("import", "--data-dir", str(target), str(dump))
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"larder: {dump}: {where}: {reason}"), lines
    assert not target.exists()


def test_a_directory_a_server_holds_is_not_exported(servers, tmp_path):
    server = servers.larder()
    result = larder("export", "--data-dir", str(server.data_dir), "-o", str(tmp_path / "dump"))
    assert result.returncode == 1, result.stderr
    assert "in use" in result.stderr.decode(), result.stderr
    assert not (tmp_path / "dump").exists() and not (tmp_path / "dump.partial").exists()
    # The server goes on serving.
    c = client(server)
    assert c.set("still", b"here") and c.get("still") == b"here"
    c.close()


MEMCACHED_TOOL = Path("/usr/share/memcached/scripts/memcached-tool")


def test_memcached_tool_dumps_a_running_larder(servers):
    # memcached-tool (from the memcached package) lists the keys with
    # `lru_crawler metadump all`, then gets each and prints it as an `add`.
    assert MEMCACHED_TOOL.exists(), f"{MEMCACHED_TOOL} (package memcached) is not installed"
    server = servers.larder()
    # Not the awkward key: memcached-tool would send its raw bytes in a `get`.
    fill(server, awkward=False)
    result = subprocess.run(
        ["perl", str(MEMCACHED_TOOL), f"{server.address[0]}:{server.address[1]}", "dump"],
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    dumped = result.stdout
    for key, (value, flags, expire) in ITEMS.items():
        head = f"add {key} {flags} ".encode()
        at = dumped.find(head)
        assert at >= 0, (key, dumped[:300])
        line, _, rest = dumped[at:].partition(b"\r\n")
        exptime, length = (int(field) for field in line.split()[3:5])
        assert length == len(value) and rest[:length] == value, (key, line)
        assert (exptime > 0) == (expire > 0), (key, line)
    assert b"add deleted " not in dumped
