"""What larder acknowledged survives a restart: clean (SIGTERM) and crash (SIGKILL).

A workload of sets, deletes, incr/decr, append/prepend, cas, touch, TTLs and a
flush_all is applied while a model records what the server must hold; after
the restart on the same data dir every key is read back and compared exactly
(value bytes and flags), including keys that must be absent.

Under `always` a write is acknowledged after fdatasync; under `everysec` it is
acknowledged once written to the OS. A process kill (SIGKILL) therefore loses
nothing acknowledged in either mode; only a power cut may lose up to ~1 s under
everysec, which these tests do not simulate (the engine's own tests do).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Dict, List, Optional, Tuple

import pytest
from pymemcache.client.base import Client

SHORT_TTL_S = 3
LONG_TTL_S = 1000
# TTLs have 1 s resolution (memcached's clock ticks once a second), so a key
# with TTL t set at time s is surely alive before s + t - CLOCK_SLACK_S and
# surely gone after s + t + CLOCK_SLACK_S.
CLOCK_SLACK_S = 1.1


class FlagsSerde:
    """Bytes in and out; the flags of each value travel with it."""

    def serialize(self, key, value):
        data, flags = value
        return data, flags

    def deserialize(self, key, value, flags):
        return value, flags


def connect(server) -> Client:
    return Client(server.address, serde=FlagsSerde(), connect_timeout=5, timeout=10, default_noreply=False)


class Model:
    """What the server must hold: key -> (value, flags), or None for absent."""

    def __init__(self):
        self.state: Dict[str, Optional[Tuple[bytes, int]]] = {}
        self.expiring: Dict[str, float] = {}  # key -> monotonic time of its set with SHORT_TTL_S
        self.long_ttl: List[str] = []  # keys that must report a TTL close to LONG_TTL_S

    def wait_until_expired(self) -> None:
        if self.expiring:
            deadline = max(self.expiring.values()) + SHORT_TTL_S + CLOCK_SLACK_S
            time.sleep(max(0.0, deadline - time.monotonic()))

    def check(self, client: Client) -> None:
        keys = sorted(self.state)
        got = {}
        for start in range(0, len(keys), 100):
            got.update(client.get_many(keys[start : start + 100]))
        now = time.monotonic()
        problems = []
        for key in keys:
            want = self.state[key]
            have = got.get(key)
            if have is not None:
                have = (have[0], have[1])
            if key in self.expiring:
                age = now - self.expiring[key]
                if age > SHORT_TTL_S + CLOCK_SLACK_S:
                    want = None
                elif age > SHORT_TTL_S - CLOCK_SLACK_S and have is None:
                    want = None  # may or may not have expired yet
            if have != want:
                problems.append(f"{key}: want {short(want)}, have {short(have)}")
        assert not problems, f"{len(problems)} of {len(keys)} keys wrong:\n" + "\n".join(problems[:40])


def short(item) -> str:
    if item is None:
        return "<absent>"
    value, flags = item
    return f"{value[:40]!r}{'...' if len(value) > 40 else ''} ({len(value)} bytes) flags={flags}"


def value_for(i: int) -> bytes:
    body = f"value-{i}-".encode() * (1 + i % 7)
    if i % 13 == 0:
        body += bytes(range(256))  # every byte value, CR LF included
    if i % 50 == 1:
        body += bytes((i * j) & 0xFF for j in range(100_000))  # a few large values
    return body


def run_workload(client: Client, model: Model, n: int = 300) -> None:
    s = model.state
    # Flushed keys must stay flushed after the restart.
    for i in range(10):
        client.set(f"flushed-{i}", (b"old", 1))
        s[f"flushed-{i}"] = None
    assert client.flush_all() is True
    for i in range(n):
        key = f"key-{i}"
        value, flags = value_for(i), i * 2654435761 % (1 << 32)
        assert client.set(key, (value, flags)) is True
        s[key] = (value, flags)
        if i % 7 == 0:
            assert client.delete(key) is True
            s[key] = None
        elif i % 5 == 0:
            assert client.set(key, (b"100", flags)) is True
            assert client.incr(key, i) == 100 + i
            s[key] = (str(100 + i).encode(), flags)
        elif i % 9 == 0:
            # decr to a shorter number: memcached pads with spaces in place.
            assert client.set(key, (b"1000", flags)) is True
            assert client.decr(key, 1) == 999
            s[key] = (b"999 ", flags)
        elif i % 3 == 0:
            assert client.append(key, (b"-tail", 0)) is True
            assert client.prepend(key, (b"head-", 0)) is True
            s[key] = (b"head-" + value + b"-tail", flags)
        elif i % 11 == 0:
            assert client.set(key, (value, flags), expire=SHORT_TTL_S) is True
            model.expiring[key] = time.monotonic()
        elif i % 17 == 0:
            assert client.set(key, (value, flags), expire=SHORT_TTL_S) is True
            assert client.touch(key, LONG_TTL_S) is True
            model.long_ttl.append(key)
        elif i % 19 == 0:
            assert client.set(key, (value, flags), expire=LONG_TTL_S) is True
            model.long_ttl.append(key)
        elif i % 23 == 0:
            (_, _), cas = client.gets(key)
            assert client.cas(key, (b"swapped", 5), cas) is True
            s[key] = (b"swapped", 5)
    for i in range(n, n + 20):  # replaced, deleted and re-added keys: the last write wins
        key = f"key-{i}"
        assert client.add(key, (b"first", 1)) is True
        assert client.replace(key, (b"second", 2)) is True
        s[key] = (b"second", 2)
        if i % 2:
            assert client.delete(key) is True
            assert client.add(key, (b"third", 3)) is True
            s[key] = (b"third", 3)


def meta_ttl(server, key: str) -> int:
    """Remaining TTL via the meta protocol (`mg key t` -> `HD t<secs>`)."""
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(f"mg {key} t\r\n".encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            assert chunk, f"connection closed; got {reply!r}"
            reply += chunk
    fields = reply.split()
    assert fields[0] == b"HD", reply
    return int(fields[1][1:])


def check_long_ttls(server, model: Model) -> None:
    for key in model.long_ttl:
        ttl = meta_ttl(server, key)
        assert LONG_TTL_S - 60 <= ttl <= LONG_TTL_S, f"{key}: ttl {ttl} after restart"


@pytest.mark.parametrize("durability", ["always", "everysec", "none"])
def test_clean_restart_keeps_everything(servers, data_dir, durability):
    server = servers.larder(durability=durability, data_dir=data_dir)
    client = connect(server)
    model = Model()
    run_workload(client, model)
    model.check(client)
    client.close()

    server.restart()  # SIGTERM (asserts exit code 0), then start on the same dir
    client = connect(server)
    model.check(client)
    check_long_ttls(server, model)

    # Writes after a restart persist too, and TTLs keep running across restarts.
    for i in range(50):
        key = f"after-{i}"
        assert client.set(key, (f"after-{i}".encode(), i)) is True
        model.state[key] = (f"after-{i}".encode(), i)
    assert client.delete("key-1") is True
    model.state["key-1"] = None
    client.close()
    model.wait_until_expired()

    server.restart()
    client = connect(server)
    model.check(client)
    client.close()


@pytest.mark.parametrize("durability", ["always", "everysec"])
def test_sigkill_loses_nothing_acknowledged(servers, data_dir, durability):
    server = servers.larder(durability=durability, data_dir=data_dir)
    client = connect(server)
    model = Model()
    run_workload(client, model)
    client.close()

    server.restart(crash=True)  # SIGKILL right after the last acknowledgement
    client = connect(server)
    model.check(client)
    check_long_ttls(server, model)
    client.close()


@pytest.mark.parametrize("durability", ["always", "everysec"])
def test_sigkill_during_concurrent_writes(servers, data_dir, durability):
    """Writers keep going while the server is killed; every acknowledged write survives."""
    server = servers.larder(durability=durability, data_dir=data_dir)
    writers = 4
    acked: List[List[str]] = [[] for _ in range(writers)]
    errors: List[str] = []
    stop = threading.Event()

    def payload(key: str) -> bytes:
        return (key.encode() + b"|") * 20

    def write(w: int) -> None:
        c = connect(server)
        try:
            for i in range(100_000):
                if stop.is_set():
                    return
                key = f"w{w}-{i}"
                if c.set(key, (payload(key), w)) is not True:
                    errors.append(f"{key}: set not stored")
                    return
                acked[w].append(key)
        except Exception:
            return  # the kill: in-flight writes have no acknowledgement
        finally:
            c.close()

    threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in range(writers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sum(map(len, acked)) < 2000 and time.monotonic() < deadline:
        time.sleep(0.02)
    server.kill()
    stop.set()
    for t in threads:
        t.join(timeout=15)
    assert not errors, errors
    total = sum(map(len, acked))
    assert total >= 100, f"only {total} writes acknowledged before the kill"

    server.start()
    client = connect(server)
    missing = []
    for w in range(writers):
        keys = acked[w]
        for start in range(0, len(keys), 100):
            batch = keys[start : start + 100]
            got = client.get_many(batch)
            for key in batch:
                if got.get(key) != (payload(key), w):
                    missing.append(f"{key}: {got.get(key)!r}")
        # The first write that was not acknowledged may or may not be there,
        # but if it is there it is whole.
        nxt = f"w{w}-{len(keys)}"
        maybe = client.get(nxt)
        assert maybe is None or maybe == (payload(nxt), w), f"{nxt} torn: {maybe!r}"
    client.close()
    assert not missing, f"{len(missing)} of {total} acknowledged writes lost:\n" + "\n".join(missing[:20])
