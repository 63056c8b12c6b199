"""Every text command through pymemcache's Client, against a running larder.

Each test uses its own keys on a server started for that test, so tests are
independent. Expiry tests sleep a little (memcached-style TTLs have 1 s
resolution), so they are grouped to keep the total time small.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheIllegalInputError,
    MemcacheServerError,
)
from pymemcache.serde import PickleSerde

MIB = 1024 * 1024


def make_client(server, **kwargs) -> Client:
    options = dict(connect_timeout=5, timeout=10, default_noreply=False)
    options.update(kwargs)
    return Client(server.address, **options)


@pytest.fixture
def client(larder) -> Iterator[Client]:
    c = make_client(larder)
    try:
        yield c
    finally:
        c.close()


class FlagsSerde:
    """Stores bytes as-is with a caller-chosen flags value; records what comes back."""

    def __init__(self):
        self.next_flags = 0
        self.seen_flags = {}

    def serialize(self, key, value):
        return value, self.next_flags

    def deserialize(self, key, value, flags):
        self.seen_flags[key] = flags
        return value


# ---- storage and retrieval -----------------------------------------------------


def test_set_get_overwrite(client):
    assert client.set("k", b"v1") is True
    assert client.get("k") == b"v1"
    assert client.set("k", b"value two") is True
    assert client.get("k") == b"value two"
    assert client.get("missing") is None
    assert client.get("missing", default=b"dflt") == b"dflt"


def test_empty_value(client):
    assert client.set("empty", b"") is True
    assert client.get("empty") == b""


def test_get_many_and_set_many(client):
    assert client.set_many({"a": b"1", "b": b"22", "c": b"333"}) == []
    assert client.get_many(["a", "b", "c", "nope"]) == {"a": b"1", "b": b"22", "c": b"333"}
    assert client.get_many([]) == {}


def test_gets_and_cas(client):
    assert client.gets("nothing") == (None, None)
    client.set("k", b"one")
    value, cas = client.gets("k")
    assert value == b"one"
    assert cas is not None and int(cas) > 0
    assert client.cas("k", b"two", cas) is True
    assert client.get("k") == b"two"
    # The old token is stale now.
    assert client.cas("k", b"three", cas) is False
    assert client.get("k") == b"two"
    value2, cas2 = client.gets("k")
    assert value2 == b"two" and cas2 != cas
    # cas on a missing key: NOT_FOUND -> None
    assert client.cas("absent", b"x", cas2) is None
    assert client.get("absent") is None


def test_gets_many_cas_unique_per_key(client):
    client.set("x", b"1")
    client.set("y", b"2")
    result = client.gets_many(["x", "y", "z"])
    assert set(result) == {"x", "y"}
    assert result["x"][0] == b"1" and result["y"][0] == b"2"
    assert result["x"][1] != result["y"][1]


def test_cas_changes_on_every_write(client):
    client.set("k", b"1")
    seen = {client.gets("k")[1]}
    client.set("k", b"2")
    seen.add(client.gets("k")[1])
    client.append("k", b"3")
    seen.add(client.gets("k")[1])
    client.incr("k", 1)
    seen.add(client.gets("k")[1])
    assert len(seen) == 4
    assert client.get("k") == b"24"


def test_add(client):
    assert client.add("k", b"first") is True
    assert client.add("k", b"second") is False
    assert client.get("k") == b"first"


def test_replace(client):
    assert client.replace("k", b"x") is False
    assert client.get("k") is None
    client.set("k", b"a")
    assert client.replace("k", b"b") is True
    assert client.get("k") == b"b"


def test_append_prepend(client):
    assert client.append("k", b"tail") is False
    assert client.prepend("k", b"head") is False
    assert client.get("k") is None
    client.set("k", b"middle")
    assert client.append("k", b"-tail") is True
    assert client.prepend("k", b"head-") is True
    assert client.get("k") == b"head-middle-tail"


def test_delete(client):
    client.set("k", b"v")
    assert client.delete("k") is True
    assert client.get("k") is None
    assert client.delete("k") is False
    client.set_many({"a": b"1", "b": b"2"})
    assert client.delete_many(["a", "b", "c"]) is True
    assert client.get_many(["a", "b"]) == {}


def test_incr_decr(client):
    assert client.incr("n", 1) is None
    assert client.decr("n", 1) is None
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 3) == 12
    assert client.decr("n", 100) == 0  # no underflow
    assert client.incr("n", 2**64 - 1) == 2**64 - 1
    assert client.incr("n", 2) == 1  # wraps at 2^64
    assert client.get("n").rstrip(b" ") == b"1"
    client.set("big", b"99")
    assert client.incr("big", 1) == 100
    assert client.get("big") == b"100"


def test_incr_errors(client):
    client.set("text", b"abc")
    with pytest.raises(MemcacheClientError, match="non-numeric value"):
        client.incr("text", 1)
    assert client.get("text") == b"abc"
    with pytest.raises(MemcacheClientError, match="non-numeric value"):
        client.decr("text", 1)
    assert client.get("text") == b"abc"
    # pymemcache refuses a non-integer delta itself, so send it raw.
    client.set("n", b"1")
    with pytest.raises(MemcacheClientError, match="invalid numeric delta argument"):
        client.raw_command(b"incr n abc")
    assert client.get("n") == b"1"


def test_touch(client):
    assert client.touch("k", 100) is False
    client.set("k", b"v")
    assert client.touch("k", 100) is True
    assert client.get("k") == b"v"


def _gat(client: Client, key: str, expire: int):
    gat = getattr(client, "gat", None)
    if gat is not None:  # pymemcache >= 4.1 (or a future pin)
        return gat(key, expire)
    reply = client.raw_command(f"gat {expire} {key}".encode(), b"END\r\n")
    if reply == b"":  # raw_command strips the END\r\n terminator
        return None
    header, _, rest = reply.partition(b"\r\n")
    assert header.startswith(f"VALUE {key} ".encode()), reply
    length = int(header.split()[3])
    return rest[:length]


def test_gat(client):
    assert _gat(client, "k", 100) is None
    client.set("k", b"v")
    assert _gat(client, "k", 100) == b"v"
    assert client.get("k") == b"v"


def test_flush_all(client):
    client.set_many({"a": b"1", "b": b"2"})
    assert client.flush_all() is True
    assert client.get_many(["a", "b"]) == {}
    # Writes after the flush are kept.
    client.set("c", b"3")
    assert client.get("c") == b"3"


def test_stats_and_version(client):
    client.set("k", b"v")
    client.get("k")
    client.get("missing")
    stats = client.stats()
    for field in ("pid", "uptime", "time", "version", "curr_connections", "cmd_get", "cmd_set",
                  "get_hits", "get_misses", "curr_items", "total_items"):  # fmt: skip
        assert field.encode() in stats, field
    assert stats[b"cmd_get"] >= 2
    assert stats[b"get_hits"] >= 1
    assert stats[b"get_misses"] >= 1
    assert stats[b"cmd_set"] >= 1
    assert stats[b"curr_items"] >= 1
    version = client.version()
    assert isinstance(version, bytes) and version.strip()


def test_the_expiry_sweep_walks_only_while_an_item_can_expire(client):
    """`larder_expiry_walks` counts the keydir partitions the background
    sweep walked: none while every item is kept forever, then some once an
    item with an expiry time is stored, and the expired item is reclaimed.
    (The sweep looks at 8 of 256 partitions every 100 ms, so it reaches any
    one partition within about 3.2 s.)"""

    def stat(name: str) -> int:
        return int(client.stats()[name.encode()])

    client.set("forever", b"v")
    time.sleep(3.5)  # a whole turn of the sweep over the partitions
    assert stat("larder_expiry_walks") == 0, "walked a keydir of items that never expire"
    reclaimed = stat("reclaimed")
    client.set("expiring", b"v", expire=1)
    deadline = time.monotonic() + 30
    while stat("larder_expiry_walks") == 0 or stat("reclaimed") == reclaimed:
        assert time.monotonic() < deadline, "the sweep never walked the item's partition"
        time.sleep(0.2)
    assert client.get("expiring") is None


def test_verbosity_and_quit(client, larder):
    assert client.raw_command(b"verbosity 1") == b"OK"
    client.quit()
    # A new connection works after quit.
    client2 = make_client(larder)
    try:
        client2.set("after", b"quit")
        assert client2.get("after") == b"quit"
    finally:
        client2.close()


# ---- noreply ---------------------------------------------------------------------


def test_noreply_paths(larder):
    quiet = make_client(larder, default_noreply=True)
    loud = make_client(larder)
    try:
        assert quiet.set("k", b"1") is True
        assert quiet.add("k", b"x") is True  # noreply: the client cannot know
        assert quiet.replace("k", b"2") is True
        assert quiet.append("k", b"3") is True
        assert quiet.prepend("k", b"0") is True
        assert quiet.touch("k", 1000) is True
        assert quiet.set("n", b"20") is True
        assert quiet.incr("n", 1, noreply=True) is None
        assert quiet.decr("n", 2, noreply=True) is None
        # The noreply requests above travel on another connection: wait until
        # the server has processed them (a reply on that connection comes
        # after everything sent before it) before reading on this one.
        quiet.version()
        value, cas = loud.gets("k")
        assert value == b"023"
        assert quiet.cas("k", b"via-cas", cas, noreply=True) is True
        assert quiet.delete("gone") is True
        assert quiet.set("gone", b"x") is True
        assert quiet.delete("gone") is True
        # The quiet connection is still in sync: its next reply is its own.
        assert quiet.get("k") == b"via-cas"
        assert loud.get("k") == b"via-cas"
        assert loud.get("gone") is None
        assert loud.get("n") == b"19"
        assert quiet.flush_all(noreply=True) is True
        assert quiet.get("k") is None  # a round trip: the flush is done
        assert loud.get("k") is None
    finally:
        quiet.close()
        loud.close()


# ---- values ------------------------------------------------------------------------


def test_binary_value_all_byte_values(client):
    value = bytes(range(256)) * 4 + b"\r\nEND\r\n" + bytes(range(255, -1, -1))
    assert client.set("bin", value) is True
    assert client.get("bin") == value
    assert client.get_many(["bin"]) == {"bin": value}


def test_large_values(client):
    # Well under memcached's item limit (which counts its own item header).
    big = bytes((i * 7) & 0xFF for i in range(MIB - 1024))
    assert client.set("big", big) is True
    assert client.get("big") == big
    too_big = b"x" * (MIB + 1)
    with pytest.raises(MemcacheServerError, match="too large"):
        client.set("huge", too_big)
    assert client.get("huge") is None
    # The connection is still usable after the refused value.
    assert client.get("big") == big


def test_value_of_one_mib_minus_one_with_raised_limit(servers, data_dir):
    server = servers.larder(data_dir=data_dir, extra=["-I", "2m"])
    c = make_client(server)
    try:
        value = bytes((i * 13) & 0xFF for i in range(MIB - 1))
        assert c.set("k", value) is True
        assert c.get("k") == value
        value = b"y" * MIB
        assert c.set("k2", value) is True
        assert c.get("k2") == value
    finally:
        c.close()


def test_flags_round_trip(larder):
    serde = FlagsSerde()
    c = make_client(larder, serde=serde)
    try:
        for i, flags in enumerate([0, 1, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF]):
            serde.next_flags = flags
            assert c.set(f"f{i}", b"v") is True
            assert c.get(f"f{i}") == b"v"
            assert serde.seen_flags[f"f{i}"] == flags
        # append/prepend keep the original flags; incr too.
        serde.next_flags = 42
        c.set("keep", b"1")
        serde.next_flags = 7
        assert c.append("keep", b"2") is True
        assert c.prepend("keep", b"9") is True
        assert c.incr("keep", 1) == 913
        assert c.get("keep") == b"913"
        assert serde.seen_flags["keep"] == 42
    finally:
        c.close()


def test_pickle_serde_round_trip(larder):
    c = make_client(larder, serde=PickleSerde())
    try:
        values = {
            "str": "héllo wörld",
            "int": 12345678901234,
            "bytes": b"\x00\xff",
            "dict": {"a": [1, 2, 3], "b": None},
            "float": 1.5,
        }
        for key, value in values.items():
            assert c.set(key, value) is True
        for key, value in values.items():
            got = c.get(key)
            assert got == value and type(got) is type(value), key
        assert c.get_many(list(values)) == values
    finally:
        c.close()


# ---- keys ------------------------------------------------------------------------


def test_key_limits(client):
    key250 = "k" * 250
    assert client.set(key250, b"v") is True
    assert client.get(key250) == b"v"
    with pytest.raises(MemcacheClientError):
        client.set("k" * 251, b"v")


def test_unicode_and_bad_keys_rejected_by_client(client):
    for bad in ["ключ", "naïve", "key with space", "tab\tkey", "new\nline"]:
        with pytest.raises(MemcacheIllegalInputError):
            client.set(bad, b"v")
        with pytest.raises(MemcacheIllegalInputError):
            client.get(bad)
    # The connection is unaffected.
    assert client.set("ok", b"v") is True
    assert client.get("ok") == b"v"


def test_unicode_keys_when_client_allows_them(larder):
    c = make_client(larder, allow_unicode_keys=True, encoding="utf-8")
    try:
        assert c.set("ключ", b"v") is True
        assert c.get("ключ") == b"v"
    finally:
        c.close()


# ---- expiry ----------------------------------------------------------------------


def test_expiry_touch_and_gat(client):
    # Two seconds, not one: expiry counts whole seconds, so an item set to
    # live 1 s may expire at once if a second boundary falls just after the
    # set; with 2 s it lives at least 1 s and is gone after 2.2 s.
    client.set("short", b"1", expire=2)
    client.set("long", b"2", expire=100)
    client.set("forever", b"3")
    client.set("touched", b"4", expire=2)
    client.set("gat", b"5", expire=2)
    client.set("shortened", b"6", expire=100)
    client.set("negative", b"7", expire=-1)  # expires at once
    assert client.get("negative") is None
    assert client.touch("touched", 100) is True
    assert _gat(client, "gat", 100) == b"5"
    assert client.touch("shortened", 2) is True
    assert client.get("short") == b"1"
    time.sleep(2.2)
    assert client.get("short") is None
    assert client.get("shortened") is None
    assert client.get_many(["long", "forever", "touched", "gat"]) == {
        "long": b"2",
        "forever": b"3",
        "touched": b"4",
        "gat": b"5",
    }
    # An expired key can be added again.
    assert client.add("short", b"new") is True
    assert client.get("short") == b"new"
