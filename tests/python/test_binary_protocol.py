"""memcached's binary protocol, as memcached 1.6.18 speaks it, asked of Larder.

Every test runs twice: against a real memcached (which validates the test)
and against Larder (the `server` fixture is parametrised over the two). The
expected replies are memcached's own, byte for byte; only what legitimately
differs between two correct servers is normalised away:

  * the CAS unique: a reply's CAS is compared as "zero" or "nonzero" only,
    and where it matters the tests check it round-trips (a CAS a server
    returned makes a CAS-guarded request succeed, a wrong one fails);
  * the VERSION text (checked to be a plain version string);
  * `stat` values (only the presence of common names is compared, plus the
    few values both servers must agree on: pid, tcpport, item_size_max).

Everything else (opcode, status, extras, key, value, the echoed opaque, which
quiet requests answer, when the connection closes) is memcached's.

The protocol, in short: a request is a 24-byte header (magic 0x80, opcode,
key length u16, extras length u8, data type 0, vbucket u16, total body length
u32, opaque u32, CAS u64; all big-endian) followed by extras, key and value.
A response has the same header with magic 0x81 and a status where the
vbucket was. NOOP answers after every reply to the requests before it, so it
is the fence that shows when quiet requests (which answer only failures, or
only hits) have all been handled.

Keys are unique to each test (the `key` fixture) since the module's two
servers are shared; tests that flush use servers of their own. Both servers
run with their default item size limit, 1 MiB (memcached's `-I 1m`).
"""

from __future__ import annotations

import base64
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List

import pytest

GUARD_TIMEOUT_S = 5.0  # only reached when a server fails to answer at all
SILENCE_S = 0.3  # how long a server is given to (wrongly) answer a partial request

# ---- the protocol's numbers ---------------------------------------------------

REQUEST_MAGIC = 0x80
RESPONSE_MAGIC = 0x81

GET, SET, ADD, REPLACE, DELETE, INCREMENT, DECREMENT, QUIT = range(0x00, 0x08)
FLUSH, GETQ, NOOP, VERSION, GETK, GETKQ, APPEND, PREPEND = range(0x08, 0x10)
STAT, SETQ, ADDQ, REPLACEQ, DELETEQ, INCREMENTQ, DECREMENTQ, QUITQ = range(0x10, 0x18)
FLUSHQ, APPENDQ, PREPENDQ, VERBOSITY, TOUCH, GAT, GATQ = range(0x18, 0x1F)
SASL_LIST_MECHS, SASL_AUTH = 0x20, 0x21
GATK, GATKQ = 0x23, 0x24

SUCCESS = 0x0000
KEY_ENOENT = 0x0001
KEY_EEXISTS = 0x0002
E2BIG = 0x0003
EINVAL = 0x0004
NOT_STORED = 0x0005
DELTA_BADVAL = 0x0006
UNKNOWN_COMMAND = 0x0081

# The text memcached puts in the value of an error response.
MESSAGES = {
    KEY_ENOENT: b"Not found",
    KEY_EEXISTS: b"Data exists for key.",
    E2BIG: b"Too large.",
    EINVAL: b"Invalid arguments",
    NOT_STORED: b"Not stored.",
    DELTA_BADVAL: b"Non-numeric server-side value for incr or decr",
    UNKNOWN_COMMAND: b"Unknown command",
}

HEADER = struct.Struct(">BBHBBHIIQ")
assert HEADER.size == 24

MB = 1024 * 1024
# An absolute expiration time (more than 30 days' worth of seconds is a Unix
# time) long before either server started: the item expires at once.
LONG_AGO = 30 * 24 * 3600 + 1


def request(
    opcode: int,
    key: bytes = b"",
    extras: bytes = b"",
    value: bytes = b"",
    opaque: int = 0,
    cas: int = 0,
    magic: int = REQUEST_MAGIC,
) -> bytes:
    """One binary request's bytes."""
    body = extras + key + value
    return HEADER.pack(magic, opcode, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


def store_extras(flags: int = 0, exptime: int = 0) -> bytes:
    """set/add/replace extras: flags u32, expiration u32."""
    return struct.pack(">II", flags, exptime)


def flags_extras(flags: int) -> bytes:
    """The 4-byte extras of a get hit: the item's flags."""
    return struct.pack(">I", flags)


def expiry_extras(exptime: int) -> bytes:
    """touch/gat/flush extras: expiration (or flush delay) u32."""
    return struct.pack(">I", exptime)


def delta_extras(delta: int, initial: int = 0, exptime: int = 0) -> bytes:
    """incr/decr extras: delta u64, initial u64, expiration u32."""
    return struct.pack(">QQI", delta, initial, exptime)


def counter(number: int) -> bytes:
    """The value of an incr/decr response: the new number as a u64."""
    return struct.pack(">Q", number)


# ---- responses ---------------------------------------------------------------

NONZERO = "nonzero"


@dataclass
class Response:
    """One response, with its CAS normalised to 0 or NONZERO (the real
    value in `raw_cas`) and the opaque left out of comparisons (tests that
    care check `.opaque` themselves; `Connection.ask` always does)."""

    opcode: int
    status: int
    extras: bytes = b""
    key: bytes = b""
    value: bytes = b""
    cas: object = 0
    opaque: int = field(default=0, compare=False)
    raw_cas: int = field(default=0, compare=False, repr=False)

    def __repr__(self) -> str:  # keep a failure's output short for big values
        value = self.value if len(self.value) <= 200 else self.value[:200] + b"...(%d bytes)" % len(self.value)
        return (
            f"Response(opcode=0x{self.opcode:02x}, status=0x{self.status:04x}, extras={self.extras!r}, "
            f"key={self.key!r}, value={value!r}, cas={self.cas!r}, opaque=0x{self.opaque:x})"
        )


def ok(opcode: int, extras: bytes = b"", key: bytes = b"", value: bytes = b"", cas: object = NONZERO) -> Response:
    """A success as memcached sends it."""
    return Response(opcode, SUCCESS, extras, key, value, cas)


def error(opcode: int, status: int) -> Response:
    """An error as memcached sends it: the status's text as the value, CAS 0."""
    return Response(opcode, status, value=MESSAGES[status], cas=0)


class Connection:
    """A binary-protocol client connection: requests out, whole responses in."""

    def __init__(self, address, timeout: float = GUARD_TIMEOUT_S):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._opaque = 0x5EED0000

    def close(self) -> None:
        self.sock.close()

    def next_opaque(self) -> int:
        self._opaque += 1
        return self._opaque

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, opcode: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"", cas: int = 0) -> int:
        """Sends a request with a fresh opaque; returns that opaque."""
        opaque = self.next_opaque()
        self.send(request(opcode, key, extras, value, opaque=opaque, cas=cas))
        return opaque

    def _read_exactly(self, count: int) -> bytes:
        self.sock.settimeout(self.timeout)
        data = bytearray()
        while len(data) < count:
            try:
                chunk = self.sock.recv(min(count - len(data), 1 << 20))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"connection closed after {len(data)} of {count} bytes: {bytes(data[:100])!r}")
            data += chunk
        return bytes(data)

    def read(self) -> Response:
        header = self._read_exactly(HEADER.size)
        magic, opcode, keylen, extlen, datatype, status, bodylen, opaque, cas = HEADER.unpack(header)
        assert magic == RESPONSE_MAGIC, f"not a response header: {header!r}"
        assert datatype == 0, f"data type {datatype} in {header!r}"
        assert keylen + extlen <= bodylen, f"key and extras longer than the body: {header!r}"
        body = self._read_exactly(bodylen)
        return Response(
            opcode=opcode,
            status=status,
            extras=body[:extlen],
            key=body[extlen : extlen + keylen],
            value=body[extlen + keylen :],
            cas=NONZERO if cas else 0,
            opaque=opaque,
            raw_cas=cas,
        )

    def ask(self, opcode: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"", cas: int = 0) -> Response:
        """One request, its one response (whose opaque must be the request's)."""
        opaque = self.send_request(opcode, key, extras, value, cas)
        response = self.read()
        assert response.opaque == opaque, f"opaque 0x{response.opaque:x} answers 0x{opaque:x}: {response}"
        return response

    def fence(self) -> List[Response]:
        """Sends a NOOP; returns every response that came before its answer."""
        opaque = self.send_request(NOOP)
        before = []
        while True:
            response = self.read()
            if response.opcode == NOOP and response.opaque == opaque:
                assert response == ok(NOOP, cas=0), response
                return before
            before.append(response)
            assert len(before) < 100_000, "no end to the responses"

    def fence_after(self, count: int) -> List[Response]:
        """Reads `count` responses, then sends a NOOP and checks nothing came
        between them and its answer."""
        answered = [self.read() for _ in range(count)]
        assert self.fence() == []
        return answered

    def assert_closed(self) -> None:
        """The server closes the connection without sending anything more."""
        self.sock.settimeout(self.timeout)
        rest = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                raise AssertionError(f"still open after {self.timeout}s; received {rest[:200]!r}")
            if not chunk:
                break
            rest += chunk
        assert rest == b"", f"received {rest[:200]!r} before the close"

    def assert_silent(self, seconds: float = SILENCE_S) -> None:
        """Nothing arrives for a moment (the server waits for the rest of a request)."""
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1)
        except socket.timeout:
            return
        finally:
            self.sock.settimeout(self.timeout)
        raise AssertionError(f"the server answered (or closed: {data!r}) before the request was complete")


# ---- fixtures ----------------------------------------------------------------


@pytest.fixture(params=["memcached", "larder"])
def server(request):
    """The module's memcached, then the module's Larder."""
    return request.getfixturevalue(f"module_{request.param}")


@pytest.fixture(params=["memcached", "larder"])
def own_server(request, servers):
    """A server of the test's own (for flushes, which reach every key)."""
    return servers.memcached() if request.param == "memcached" else servers.larder()


@pytest.fixture
def key(request) -> Callable[[str], bytes]:
    """key("a") -> a key unique to this test (and its parameters)."""
    prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    return lambda name="": f"{prefix}:{name}".encode()


@pytest.fixture
def conn(server) -> Iterator[Connection]:
    connection = Connection(server.address)
    try:
        yield connection
    finally:
        connection.close()


def get_cas(conn: Connection, k: bytes) -> int:
    response = conn.ask(GET, k)
    assert response.status == SUCCESS, response
    return response.raw_cas


# ---- get, getk and their quiet forms -----------------------------------------


def test_get_hit_returns_flags_as_4_byte_extras_and_miss_says_not_found(conn, key):
    k = key("a")
    stored = conn.ask(SET, k, store_extras(0xDEADBEEF), b"hello")
    assert stored == ok(SET), stored
    got = conn.ask(GET, k)
    assert got == ok(GET, extras=b"\xde\xad\xbe\xef", value=b"hello"), got
    # The CAS a set returns is the one a get reports.
    assert got.raw_cas == stored.raw_cas, (stored, got)
    miss = conn.ask(GET, key("missing"))
    assert miss == error(GET, KEY_ENOENT), miss


def test_getk_returns_the_key_on_a_hit_and_on_a_miss(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(7), b"value") == ok(SET)
    hit = conn.ask(GETK, k)
    assert hit == ok(GETK, extras=flags_extras(7), key=k, value=b"value"), hit
    # A getk miss carries the key and no "Not found" text.
    missing = key("missing")
    miss = conn.ask(GETK, missing)
    assert miss == Response(GETK, KEY_ENOENT, key=missing, value=b"", cas=0), miss


def test_quiet_gets_answer_hits_only(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(3), b"abc") == ok(SET)
    opaques = [
        conn.send_request(GETQ, missing),
        conn.send_request(GETKQ, missing),
        conn.send_request(GETQ, k),
        conn.send_request(GETKQ, k),
    ]
    answered = conn.fence()
    assert answered == [
        ok(GETQ, extras=flags_extras(3), value=b"abc"),
        ok(GETKQ, extras=flags_extras(3), key=k, value=b"abc"),
    ], answered
    assert [r.opaque for r in answered] == opaques[2:], answered


def test_a_key_of_250_bytes_is_the_longest_and_works(conn, key):
    k = (key("") + b"x" * 250)[:250]
    assert conn.ask(SET, k, store_extras(1), b"long") == ok(SET)
    got = conn.ask(GETK, k)
    assert got == ok(GETK, extras=flags_extras(1), key=k, value=b"long"), got


def test_a_key_may_hold_any_byte(conn, key):
    # The binary protocol frames keys by length: memcached stores keys with
    # spaces, CR, LF and NUL in them, which the text protocol cannot name.
    k = key("a") + b" \x00\r\n\xff"
    assert conn.ask(SET, k, store_extras(0), b"odd") == ok(SET)
    got = conn.ask(GETK, k)
    assert got == ok(GETK, extras=flags_extras(0), key=k, value=b"odd"), got
    assert conn.ask(GET, key("a")) == error(GET, KEY_ENOENT)
    # A meta get names it in base64 (`b`) over the text protocol.
    with socket.create_connection(conn.sock.getpeername(), timeout=GUARD_TIMEOUT_S) as text:
        text.sendall(b"mg " + base64.b64encode(k) + b" b v\r\n")
        reply = b""
        while not reply.endswith(b"\r\n") or reply.count(b"\r\n") < 2:
            chunk = text.recv(4096)
            assert chunk, reply
            reply += chunk
        assert reply == b"VA 3\r\nodd\r\n", reply


# ---- set, add, replace and their quiet forms ---------------------------------


def test_set_add_replace(conn, key):
    k, fresh, missing = key("a"), key("fresh"), key("missing")
    assert conn.ask(SET, k, store_extras(1), b"one") == ok(SET)
    assert conn.ask(ADD, k, store_extras(2), b"two") == error(ADD, KEY_EEXISTS)
    assert conn.ask(ADD, fresh, store_extras(3), b"three") == ok(ADD)
    assert conn.ask(REPLACE, missing, store_extras(4), b"four") == error(REPLACE, KEY_ENOENT)
    assert conn.ask(REPLACE, k, store_extras(5), b"five") == ok(REPLACE)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(5), value=b"five")
    assert conn.ask(GET, fresh) == ok(GET, extras=flags_extras(3), value=b"three")
    assert conn.ask(GET, missing) == error(GET, KEY_ENOENT)
    # Each store makes a new CAS.
    first = conn.ask(SET, k, store_extras(0), b"x").raw_cas
    second = conn.ask(SET, k, store_extras(0), b"y").raw_cas
    assert first != second and first != 0 and second != 0, (first, second)


def test_quiet_stores_answer_failures_only(conn, key):
    k, added, missing = key("a"), key("added"), key("missing")
    assert conn.ask(SET, k, store_extras(0), b"old") == ok(SET)
    conn.send_request(SETQ, k, store_extras(1), b"set")
    addq_fails = conn.send_request(ADDQ, k, store_extras(2), b"add")
    conn.send_request(ADDQ, added, store_extras(3), b"added")
    replaceq_fails = conn.send_request(REPLACEQ, missing, store_extras(4), b"replace")
    conn.send_request(REPLACEQ, k, store_extras(5), b"replaced")
    answered = conn.fence()
    # Failures come back, with the quiet opcode and the request's opaque.
    assert answered == [error(ADDQ, KEY_EEXISTS), error(REPLACEQ, KEY_ENOENT)], answered
    assert [r.opaque for r in answered] == [addq_fails, replaceq_fails], answered
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(5), value=b"replaced")
    assert conn.ask(GET, added) == ok(GET, extras=flags_extras(3), value=b"added")
    assert conn.ask(GET, missing) == error(GET, KEY_ENOENT)


def test_an_expiration_long_past_stores_an_item_that_is_gone_at_once(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(0, LONG_AGO), b"v") == ok(SET)
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)


# ---- cas ---------------------------------------------------------------------


def test_cas_in_the_header_guards_set_replace_and_add(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(0), b"v1") == ok(SET)
    cas = get_cas(conn, k)
    assert cas != 0
    assert conn.ask(SET, k, store_extras(0), b"wrong", cas=cas + 1) == error(SET, KEY_EEXISTS)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"v1")
    stored = conn.ask(SET, k, store_extras(9), b"v2", cas=cas)
    assert stored == ok(SET), stored
    assert stored.raw_cas not in (0, cas), (cas, stored.raw_cas)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(9), value=b"v2")
    # The old CAS is spent.
    assert conn.ask(SET, k, store_extras(0), b"v3", cas=cas) == error(SET, KEY_EEXISTS)
    # ... and the new one is the item's.
    assert conn.ask(REPLACE, k, store_extras(0), b"v4", cas=cas) == error(REPLACE, KEY_EEXISTS)
    assert conn.ask(REPLACE, k, store_extras(0), b"v4", cas=stored.raw_cas) == ok(REPLACE)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"v4")
    # A CAS on a missing key: not found, for set and (oddly, since add
    # wants the key missing) for add too. Nothing is stored.
    assert conn.ask(SET, missing, store_extras(0), b"x", cas=12345) == error(SET, KEY_ENOENT)
    assert conn.ask(ADD, missing, store_extras(0), b"x", cas=12345) == error(ADD, KEY_ENOENT)
    assert conn.ask(GET, missing) == error(GET, KEY_ENOENT)


def test_a_quiet_set_with_a_wrong_cas_is_answered(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
    cas = get_cas(conn, k)
    conn.send_request(SETQ, k, store_extras(0), b"bad", cas=cas + 1)
    conn.send_request(SETQ, missing, store_extras(0), b"bad", cas=cas)
    conn.send_request(SETQ, k, store_extras(0), b"good", cas=cas)
    assert conn.fence() == [error(SETQ, KEY_EEXISTS), error(SETQ, KEY_ENOENT)]
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"good")


# ---- append and prepend --------------------------------------------------------


def test_append_and_prepend_keep_flags_and_answer_not_stored_for_a_missing_key(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(5), b"mid") == ok(SET)
    before = get_cas(conn, k)
    appended = conn.ask(APPEND, k, value=b">>")
    assert appended == ok(APPEND), appended
    assert appended.raw_cas != before
    assert conn.ask(PREPEND, k, value=b"<<") == ok(PREPEND)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(5), value=b"<<mid>>")
    assert conn.ask(APPEND, missing, value=b"x") == error(APPEND, NOT_STORED)
    assert conn.ask(PREPEND, missing, value=b"x") == error(PREPEND, NOT_STORED)
    assert conn.ask(GET, missing) == error(GET, KEY_ENOENT)


def test_quiet_append_and_prepend_answer_failures_only(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(1), b"v") == ok(SET)
    conn.send_request(APPENDQ, k, value=b"q")
    conn.send_request(PREPENDQ, k, value=b"p")
    conn.send_request(APPENDQ, missing, value=b"q")
    conn.send_request(PREPENDQ, missing, value=b"p")
    assert conn.fence() == [error(APPENDQ, NOT_STORED), error(PREPENDQ, NOT_STORED)]
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(1), value=b"pvq")


def test_append_with_a_cas_is_guarded_by_it(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
    cas = get_cas(conn, k)
    assert conn.ask(APPEND, k, value=b"x", cas=cas + 1) == error(APPEND, KEY_EEXISTS)
    assert conn.ask(APPEND, k, value=b"y", cas=cas) == ok(APPEND)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"vy")


# ---- delete ---------------------------------------------------------------------


def test_delete_and_its_cas_guard(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
    # A delete's success carries CAS 0.
    assert conn.ask(DELETE, k) == ok(DELETE, cas=0)
    assert conn.ask(DELETE, k) == error(DELETE, KEY_ENOENT)
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)
    assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
    cas = get_cas(conn, k)
    assert conn.ask(DELETE, k, cas=cas + 1) == error(DELETE, KEY_EEXISTS)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"v")
    assert conn.ask(DELETE, k, cas=cas) == ok(DELETE, cas=0)
    assert conn.ask(DELETE, k, cas=cas) == error(DELETE, KEY_ENOENT)


def test_quiet_delete_answers_a_miss_only(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
    conn.send_request(DELETEQ, k)
    miss = conn.send_request(DELETEQ, k)
    answered = conn.fence()
    assert answered == [error(DELETEQ, KEY_ENOENT)], answered
    assert answered[0].opaque == miss
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)


# ---- incr and decr -----------------------------------------------------------------


def test_incr_and_decr_create_a_missing_key_with_the_initial_value(conn, key):
    k, d = key("incr"), key("decr")
    created = conn.ask(INCREMENT, k, delta_extras(1, initial=5))
    assert created == ok(INCREMENT, value=counter(5)), created
    # The counter is stored as decimal text, with flags 0.
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"5")
    assert conn.ask(INCREMENT, k, delta_extras(10, initial=5)) == ok(INCREMENT, value=counter(15))
    assert conn.ask(DECREMENT, k, delta_extras(3, initial=5)) == ok(DECREMENT, value=counter(12))
    assert conn.ask(DECREMENT, d, delta_extras(1, initial=7)) == ok(DECREMENT, value=counter(7))
    assert conn.ask(GET, d) == ok(GET, extras=flags_extras(0), value=b"7")


def test_incr_and_decr_with_expiration_ffffffff_do_not_create(conn, key):
    k, existing = key("missing"), key("existing")
    assert conn.ask(INCREMENT, k, delta_extras(1, 5, 0xFFFFFFFF)) == error(INCREMENT, KEY_ENOENT)
    assert conn.ask(DECREMENT, k, delta_extras(1, 5, 0xFFFFFFFF)) == error(DECREMENT, KEY_ENOENT)
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)
    # On an existing key the expiration is not looked at.
    assert conn.ask(SET, existing, store_extras(4), b"10") == ok(SET)
    assert conn.ask(INCREMENT, existing, delta_extras(1, 5, 0xFFFFFFFF)) == ok(INCREMENT, value=counter(11))
    assert conn.ask(GET, existing) == ok(GET, extras=flags_extras(4), value=b"11")


def test_incr_of_a_non_numeric_value_is_refused(conn, key):
    text, huge = key("text"), key("huge")
    assert conn.ask(SET, text, store_extras(0), b"abc") == ok(SET)
    assert conn.ask(INCREMENT, text, delta_extras(1)) == error(INCREMENT, DELTA_BADVAL)
    assert conn.ask(DECREMENT, text, delta_extras(1)) == error(DECREMENT, DELTA_BADVAL)
    assert conn.ask(GET, text) == ok(GET, extras=flags_extras(0), value=b"abc")
    # One more than the largest u64 is not a number either.
    assert conn.ask(SET, huge, store_extras(0), b"18446744073709551616") == ok(SET)
    assert conn.ask(INCREMENT, huge, delta_extras(1)) == error(INCREMENT, DELTA_BADVAL)


def test_decr_stops_at_zero(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(0), b"5") == ok(SET)
    assert conn.ask(DECREMENT, k, delta_extras(20)) == ok(DECREMENT, value=counter(0))
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"0")


def test_incr_wraps_at_2_64_and_a_shorter_number_is_padded_with_spaces(conn, key):
    k, shrink = key("wrap"), key("shrink")
    assert conn.ask(SET, k, store_extras(3), b"18446744073709551614") == ok(SET)
    assert conn.ask(INCREMENT, k, delta_extras(3)) == ok(INCREMENT, value=counter(1))
    # memcached rewrites the number in place: "1" then 19 spaces (as its
    # text protocol does).
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(3), value=b"1" + b" " * 19)
    assert conn.ask(SET, shrink, store_extras(0), b"100") == ok(SET)
    assert conn.ask(DECREMENT, shrink, delta_extras(1)) == ok(DECREMENT, value=counter(99))
    assert conn.ask(GET, shrink) == ok(GET, extras=flags_extras(0), value=b"99 ")


def test_incr_with_a_cas(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(0), b"1") == ok(SET)
    cas = get_cas(conn, k)
    assert conn.ask(INCREMENT, k, delta_extras(1), cas=cas + 1) == error(INCREMENT, KEY_EEXISTS)
    done = conn.ask(INCREMENT, k, delta_extras(1), cas=cas)
    assert done == ok(INCREMENT, value=counter(2)), done
    assert done.raw_cas not in (0, cas)
    assert get_cas(conn, k) == done.raw_cas
    # Odd but so: a CAS on a missing key does not stop the initial value
    # being stored.
    assert conn.ask(INCREMENT, missing, delta_extras(1, initial=0), cas=5) == ok(INCREMENT, value=counter(0))
    assert conn.ask(GET, missing) == ok(GET, extras=flags_extras(0), value=b"0")


def test_quiet_incr_and_decr_answer_failures_only(conn, key):
    k, text, missing = key("a"), key("text"), key("missing")
    assert conn.ask(SET, k, store_extras(0), b"10") == ok(SET)
    assert conn.ask(SET, text, store_extras(0), b"abc") == ok(SET)
    conn.send_request(INCREMENTQ, k, delta_extras(5))
    conn.send_request(DECREMENTQ, k, delta_extras(2))
    conn.send_request(INCREMENTQ, missing, delta_extras(1, 0, 0xFFFFFFFF))
    conn.send_request(DECREMENTQ, text, delta_extras(1))
    assert conn.fence() == [error(INCREMENTQ, KEY_ENOENT), error(DECREMENTQ, DELTA_BADVAL)]
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(0), value=b"13")


# ---- touch and get-and-touch ---------------------------------------------------------


def text_ttl(server, k: bytes) -> bytes:
    """The item's remaining TTL, asked over a text connection (`mg KEY t`)."""
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT_S) as sock:
        sock.sendall(b"mg " + k + b" t\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(1024)
            assert chunk, reply
            reply += chunk
    return reply


def test_touch_answers_the_flags_only_and_keeps_the_cas(server, conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(42), b"val") == ok(SET)
    cas = get_cas(conn, k)
    touched = conn.ask(TOUCH, k, expiry_extras(1000))
    # Flags in the extras; no key, no value; the item's (unchanged) CAS.
    assert touched == ok(TOUCH, extras=flags_extras(42)), touched
    assert touched.raw_cas == cas
    ttl = text_ttl(server, k)  # the item had none (t-1) before the touch
    assert re.fullmatch(rb"HD t(\d+)\r\n", ttl) and 0 < int(ttl[4:-2]) <= 1000, ttl
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(42), value=b"val")
    assert conn.ask(TOUCH, missing, expiry_extras(1000)) == error(TOUCH, KEY_ENOENT)
    # A time long past: answered as a hit, then the item is gone.
    assert conn.ask(TOUCH, k, expiry_extras(LONG_AGO)) == ok(TOUCH, extras=flags_extras(42))
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)


def test_gat_and_gatk(server, conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(42, 1000), b"val") == ok(SET)
    cas = get_cas(conn, k)
    got = conn.ask(GAT, k, expiry_extras(0))
    assert got == ok(GAT, extras=flags_extras(42), value=b"val"), got
    assert got.raw_cas == cas
    assert text_ttl(server, k) == b"HD t-1\r\n"  # expiration 0: never
    assert conn.ask(GATK, k, expiry_extras(500)) == ok(GATK, extras=flags_extras(42), key=k, value=b"val")
    assert conn.ask(GAT, missing, expiry_extras(0)) == error(GAT, KEY_ENOENT)
    assert conn.ask(GATK, missing, expiry_extras(0)) == Response(GATK, KEY_ENOENT, key=missing, cas=0)
    assert conn.ask(GAT, k, expiry_extras(LONG_AGO)) == ok(GAT, extras=flags_extras(42), value=b"val")
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)


def test_quiet_gat_answers_hits_only(conn, key):
    k, missing = key("a"), key("missing")
    assert conn.ask(SET, k, store_extras(42), b"val") == ok(SET)
    conn.send_request(GATQ, missing, expiry_extras(0))
    conn.send_request(GATKQ, missing, expiry_extras(0))
    conn.send_request(GATQ, k, expiry_extras(0))
    conn.send_request(GATKQ, k, expiry_extras(0))
    answered = conn.fence()
    assert answered == [
        ok(GATQ, extras=flags_extras(42), value=b"val"),
        ok(GATKQ, extras=flags_extras(42), key=k, value=b"val"),
    ], answered


# ---- flush ----------------------------------------------------------------------


def test_flush_now_later_and_quietly(own_server):
    conn = Connection(own_server.address)
    try:
        for k in (b"a", b"b"):
            assert conn.ask(SET, k, store_extras(0), b"v") == ok(SET)
        assert conn.ask(FLUSH) == ok(FLUSH, cas=0)
        assert conn.ask(GET, b"a") == error(GET, KEY_ENOENT)
        assert conn.ask(GET, b"b") == error(GET, KEY_ENOENT)
        # Quiet: no answer.
        assert conn.ask(SET, b"c", store_extras(0), b"v") == ok(SET)
        conn.send_request(FLUSHQ)
        assert conn.fence() == []
        assert conn.ask(GET, b"c") == error(GET, KEY_ENOENT)
        # A delay in the 4-byte extras: items stay until then.
        assert conn.ask(SET, b"d", store_extras(0), b"v") == ok(SET)
        assert conn.ask(FLUSH, extras=expiry_extras(1000)) == ok(FLUSH, cas=0)
        assert conn.ask(GET, b"d") == ok(GET, extras=flags_extras(0), value=b"v")
        # A delay of 0 is now.
        assert conn.ask(FLUSH, extras=expiry_extras(0)) == ok(FLUSH, cas=0)
        assert conn.ask(GET, b"d") == error(GET, KEY_ENOENT)
        # memcached flushes what was stored up to the second before a delay
        # ends, so a delay of one second empties the cache at once.
        assert conn.ask(SET, b"e", store_extras(0), b"v") == ok(SET)
        assert conn.ask(FLUSH, extras=expiry_extras(1)) == ok(FLUSH, cas=0)
        assert conn.ask(GET, b"e") == error(GET, KEY_ENOENT)
    finally:
        conn.close()


# ---- noop, version, stat, verbosity, quit ----------------------------------------------


def test_noop_echoes_the_opaque(conn):
    for _ in range(3):
        assert conn.ask(NOOP) == ok(NOOP, cas=0)


def test_version_is_a_version_string(conn):
    answer = conn.ask(VERSION)
    assert (answer.opcode, answer.status, answer.extras, answer.key, answer.cas) == (VERSION, SUCCESS, b"", b"", 0)
    # The text itself differs (memcached: b"1.6.18").
    assert re.fullmatch(rb"\d+\.\d+\.\d+[\x21-\x7e]*", answer.value), answer


def read_stats(conn: Connection, group: bytes = b"") -> Dict[bytes, bytes]:
    """A stat request's packets, up to the empty one that ends them."""
    opaque = conn.send_request(STAT, group)
    stats: Dict[bytes, bytes] = {}
    while True:
        packet = conn.read()
        assert (packet.opcode, packet.status, packet.extras, packet.cas) == (STAT, SUCCESS, b"", 0), packet
        assert packet.opaque == opaque, packet
        if not packet.key and not packet.value:
            return stats
        assert packet.key and packet.key not in stats, (packet, stats)
        stats[packet.key] = packet.value


COMMON_STATS = {
    b"pid", b"uptime", b"time", b"version", b"pointer_size", b"curr_connections", b"total_connections",
    b"cmd_get", b"cmd_set", b"cmd_flush", b"cmd_touch", b"get_hits", b"get_misses", b"delete_misses",
    b"delete_hits", b"incr_misses", b"incr_hits", b"decr_misses", b"decr_hits", b"cas_misses", b"cas_hits",
    b"cas_badval", b"touch_hits", b"touch_misses", b"bytes_read", b"bytes_written", b"limit_maxbytes",
    b"threads", b"curr_items", b"total_items", b"bytes", b"evictions",
}  # fmt: skip

COMMON_SETTINGS = {
    b"maxbytes", b"maxconns", b"tcpport", b"udpport", b"inter", b"verbosity", b"evictions",
    b"domain_socket", b"umask", b"num_threads", b"cas_enabled", b"item_size_max", b"flush_enabled",
}  # fmt: skip


def test_stat_sends_one_packet_per_statistic_then_an_empty_one(server, conn):
    stats = read_stats(conn)
    assert COMMON_STATS <= set(stats), sorted(COMMON_STATS - set(stats))
    assert stats[b"pid"] == str(server.pid).encode(), stats[b"pid"]
    assert int(stats[b"curr_items"]) >= 0
    # The connection goes on.
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


def test_stat_settings(server, conn):
    settings = read_stats(conn, b"settings")
    assert COMMON_SETTINGS <= set(settings), sorted(COMMON_SETTINGS - set(settings))
    assert settings[b"tcpport"] == str(server.port).encode(), settings[b"tcpport"]
    assert settings[b"item_size_max"] == b"1048576", settings[b"item_size_max"]
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


def test_stat_takes_larders_own_groups(module_larder):
    # Larder's `segments` and `conns` groups, as `stats segments` and
    # `stats conns` in the text protocol (memcached has neither here).
    conn = Connection(module_larder.address)
    try:
        segments = read_stats(conn, b"segments")
        # At least the active segment, as `segment:<id>` = `len=.. live=.. dead=.. sealed=..`.
        assert segments and all(name.startswith(b"segment:") for name in segments), segments
        assert all(re.fullmatch(rb"len=\d+ live=\d+ dead=\d+ sealed=[01]", v) for v in segments.values()), segments
        conns = read_stats(conn, b"conns")
        assert any(value == b"conn_parse_cmd" for value in conns.values()), conns
    finally:
        conn.close()


def test_stat_of_an_unknown_group_is_not_found(conn):
    assert conn.ask(STAT, b"no_such_group") == error(STAT, KEY_ENOENT)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


COUNTED = [
    b"cmd_get", b"get_hits", b"get_misses", b"cmd_touch", b"touch_hits", b"touch_misses",
    b"cmd_set", b"cas_hits", b"cas_badval", b"cas_misses", b"delete_hits", b"delete_misses",
    b"incr_hits", b"incr_misses", b"decr_hits", b"decr_misses", b"total_items",
]  # fmt: skip


def test_each_command_counts_in_stat_as_in_memcached(own_server):
    conn = Connection(own_server.address)
    try:
        before = read_stats(conn)
        # Stores: two sets, a cas that matches, one that does not, one of a
        # missing key, a failed add.
        conn.ask(SET, b"ctr", store_extras(), b"abc")
        conn.ask(SET, b"n", store_extras(), b"5")
        cas = get_cas(conn, b"n")
        assert conn.ask(SET, b"n", store_extras(), b"6", cas=cas).status == SUCCESS
        assert conn.ask(SET, b"n", store_extras(), b"7", cas=cas).status == KEY_EEXISTS
        assert conn.ask(SET, b"nope", store_extras(), b"7", cas=cas).status == KEY_ENOENT
        assert conn.ask(ADD, b"n", store_extras(), b"8").status == KEY_EEXISTS
        # Counters: not a number, a cas that does not match, a created one,
        # a miss that creates nothing, two hits.
        assert conn.ask(INCREMENT, b"ctr", delta_extras(1)).status == DELTA_BADVAL
        assert conn.ask(INCREMENT, b"n", delta_extras(1), cas=cas).status == KEY_EEXISTS
        assert conn.ask(INCREMENT, b"newc", delta_extras(1, 10)).status == SUCCESS
        assert conn.ask(DECREMENT, b"gone", delta_extras(1, 0, 0xFFFFFFFF)).status == KEY_ENOENT
        assert conn.ask(INCREMENT, b"n", delta_extras(1)).status == SUCCESS
        assert conn.ask(DECREMENT, b"n", delta_extras(1)).status == SUCCESS
        # Reads: a hit, a miss, a getk miss, a touch and a gat each way.
        assert conn.ask(GET, b"n").status == SUCCESS
        assert conn.ask(GET, b"gone").status == KEY_ENOENT
        assert conn.ask(GETK, b"gone").status == KEY_ENOENT
        assert conn.ask(TOUCH, b"n", expiry_extras(100)).status == SUCCESS
        assert conn.ask(TOUCH, b"gone", expiry_extras(100)).status == KEY_ENOENT
        assert conn.ask(GAT, b"n", expiry_extras(100)).status == SUCCESS
        assert conn.ask(GAT, b"gone", expiry_extras(100)).status == KEY_ENOENT
        # Deletes: a hit and a miss.
        assert conn.ask(DELETE, b"ctr").status == SUCCESS
        assert conn.ask(DELETE, b"ctr").status == KEY_ENOENT
        after = read_stats(conn)
    finally:
        conn.close()
    moved = {name: int(after[name]) - int(before[name]) for name in COUNTED}
    # memcached's counts: a non-numeric counter and a cas mismatch are
    # neither hit nor miss; the get_cas reads count as gets.
    assert moved == {
        b"cmd_get": 4, b"get_hits": 2, b"get_misses": 2, b"cmd_touch": 4, b"touch_hits": 2,
        b"touch_misses": 2, b"cmd_set": 6, b"cas_hits": 1, b"cas_badval": 1, b"cas_misses": 1,
        b"delete_hits": 1, b"delete_misses": 1, b"incr_hits": 1, b"incr_misses": 0, b"decr_hits": 1,
        b"decr_misses": 1, b"total_items": 4,
    }, moved  # fmt: skip


def test_stat_groups_are_matched_by_their_start_and_detail_on_is_taken(conn):
    # As memcached's binary stat: `settings` and `reset` by their first
    # letters; `detail on` and `detail off` answer the end packet alone.
    settings = read_stats(conn, b"settingsjunk")
    assert COMMON_SETTINGS <= set(settings), sorted(COMMON_SETTINGS - set(settings))
    assert read_stats(conn, b"detail on") == {}
    assert read_stats(conn, b"detail off") == {}
    assert conn.ask(STAT, b"detail junk") == error(STAT, KEY_ENOENT)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


def test_verbosity_is_an_unknown_command(conn):
    # memcached 1.6 has no binary verbosity: 0x1b is answered "Unknown
    # command". (Sent with the 4-byte extras the protocol describes, memcached
    # then also swallows the next 4 bytes on the connection: it skips the
    # whole body length after having read the extras already. Not pinned.)
    assert conn.ask(VERBOSITY) == error(VERBOSITY, UNKNOWN_COMMAND)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


def test_quit_answers_then_closes(conn):
    assert conn.ask(QUIT) == ok(QUIT, cas=0)
    conn.assert_closed()


def test_quitq_closes_without_an_answer(conn, key):
    k = key("a")
    # What came before it is answered first.
    noop = conn.send_request(NOOP)
    conn.send_request(SETQ, k, store_extras(0), b"v")
    conn.send_request(QUITQ)
    answer = conn.read()
    assert answer == ok(NOOP, cas=0) and answer.opaque == noop, answer
    conn.assert_closed()


def test_quitq_alone_closes_without_an_answer(conn):
    conn.send_request(QUITQ)
    conn.assert_closed()


# ---- what is not a valid request --------------------------------------------------------


@pytest.mark.parametrize(
    "opcode, value",
    [
        (0x50, b""),
        (0xFF, b""),
        (0x50, b"0123456789"),  # a body with no key or extras is skipped
        (SASL_LIST_MECHS, b""),  # memcached runs without SASL
    ],
    ids=["0x50", "0xff", "0x50_with_a_value", "sasl_list_mechs"],
)
def test_an_unknown_opcode_is_answered_and_the_connection_goes_on(conn, key, opcode, value):
    assert conn.ask(opcode, value=value) == error(opcode, UNKNOWN_COMMAND)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)
    assert conn.ask(SET, key("a"), store_extras(0), b"v") == ok(SET)
    # (memcached mis-skips the body of an unknown command that has a key or
    # extras: it skips the whole body length after the key and extras, so
    # it eats that many bytes of the next request. Not pinned.)


def test_sasl_auth_without_sasl_is_an_unknown_command(conn):
    assert conn.ask(SASL_AUTH, b"PLAIN", value=b"\x00user\x00password") == error(SASL_AUTH, UNKNOWN_COMMAND)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)


@pytest.mark.parametrize(
    "first",
    [
        request(NOOP, magic=RESPONSE_MAGIC),
        request(NOOP, magic=0x00),
        b"get somekey\r\n",  # a binary connection does not turn into a text one
    ],
    ids=["response_magic", "magic_0", "text_command"],
)
def test_a_bad_magic_after_a_valid_request_closes_without_an_answer(conn, first):
    assert conn.ask(NOOP) == ok(NOOP, cas=0)
    conn.send(first + request(NOOP))
    conn.assert_closed()


LONG_KEY = b"k" * 251


# Each: a malformed request, memcached's status for it; the connection then closes.
MALFORMED = {
    "get_with_extras": (request(GET, b"malformed", extras=b"\0\0\0\0", opaque=0xA1), GET, EINVAL),
    "getq_with_extras": (request(GETQ, b"malformed", extras=b"\0\0\0\0", opaque=0xA2), GETQ, EINVAL),
    "get_without_key": (request(GET, opaque=0xA3), GET, EINVAL),
    "get_with_value": (request(GET, b"malformed", value=b"v", opaque=0xA4), GET, EINVAL),
    "get_key_251_bytes": (request(GET, LONG_KEY, opaque=0xA5), GET, EINVAL),
    "set_key_251_bytes": (request(SET, LONG_KEY, store_extras(), b"v", opaque=0xA6), SET, EINVAL),
    "set_without_extras": (request(SET, b"malformed", value=b"v", opaque=0xA7), SET, EINVAL),
    "set_without_key": (request(SET, b"", store_extras(), b"v", opaque=0xA8), SET, EINVAL),
    "touch_without_extras": (request(TOUCH, b"malformed", opaque=0xA9), TOUCH, EINVAL),
    "touch_with_8_byte_extras": (request(TOUCH, b"malformed", store_extras(), opaque=0xAA), TOUCH, EINVAL),
    "incr_with_3_byte_extras": (request(INCREMENT, b"malformed", b"abc", opaque=0xAB), INCREMENT, EINVAL),
    "incr_with_value": (request(INCREMENT, b"malformed", delta_extras(1), b"v", opaque=0xAC), INCREMENT, EINVAL),
    "append_with_extras": (request(APPEND, b"malformed", store_extras(), b"v", opaque=0xAD), APPEND, EINVAL),
    "delete_with_extras": (request(DELETE, b"malformed", b"\0\0\0\0", opaque=0xAE), DELETE, EINVAL),
    "delete_without_key": (request(DELETE, opaque=0xAF), DELETE, EINVAL),
    "noop_with_value": (request(NOOP, value=b"v", opaque=0xB0), NOOP, EINVAL),
    "version_with_key": (request(VERSION, b"malformed", opaque=0xB1), VERSION, EINVAL),
    "flush_with_8_byte_extras": (request(FLUSH, extras=b"\0" * 8, opaque=0xB2), FLUSH, EINVAL),
    "quit_with_value": (request(QUIT, value=b"v", opaque=0xB3), QUIT, EINVAL),
    "stat_with_extras": (request(STAT, extras=b"\0\0\0\0", opaque=0xB4), STAT, EINVAL),
    # A key longer than the whole body: memcached calls that an unknown command.
    "key_longer_than_body": (
        HEADER.pack(REQUEST_MAGIC, GET, 4, 0, 0, 0, 2, 0xB5, 0) + b"abcd",
        GET,
        UNKNOWN_COMMAND,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_request_is_answered_then_the_connection_closes(conn, name):
    data, opcode, status = MALFORMED[name]
    conn.send(data)
    answer = conn.read()
    assert answer == error(opcode, status), answer
    assert answer.opaque == HEADER.unpack(data[:24])[7], answer  # the request's opaque
    conn.assert_closed()


# ---- values beyond the item size limit ---------------------------------------------------


def test_a_set_too_large_is_refused_the_connection_goes_on_and_the_old_value_is_gone(conn, key):
    k = key("a")
    assert conn.ask(SET, k, store_extras(1), b"old") == ok(SET)
    assert conn.ask(SET, k, store_extras(1), b"x" * (2 * MB)) == error(SET, E2BIG)
    assert conn.ask(NOOP) == ok(NOOP, cas=0)
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)
    # Quietly too: the failure is answered, and the old value goes.
    assert conn.ask(SET, k, store_extras(1), b"old") == ok(SET)
    conn.send_request(SETQ, k, store_extras(1), b"x" * (2 * MB))
    assert conn.fence() == [error(SETQ, E2BIG)]
    assert conn.ask(GET, k) == error(GET, KEY_ENOENT)


@pytest.mark.parametrize("opcode", [ADD, REPLACE, APPEND, PREPEND], ids=["add", "replace", "append", "prepend"])
def test_other_stores_too_large_are_refused_and_keep_the_old_value(conn, key, opcode):
    k = key("a")
    assert conn.ask(SET, k, store_extras(1), b"old") == ok(SET)
    extras = store_extras(1) if opcode in (ADD, REPLACE) else b""
    assert conn.ask(opcode, k, extras, b"x" * (2 * MB)) == error(opcode, E2BIG)
    assert conn.ask(GET, k) == ok(GET, extras=flags_extras(1), value=b"old")


# ---- values and framing ---------------------------------------------------------------


VALUES = {
    "empty": b"",
    "all_byte_values": bytes(range(256)) * 3,
    "crlf_and_nul": b"\r\n\0END\r\n",
    "near_1_mib": bytes(range(256)) * 4092,  # 1 MiB - 1 KiB: within both limits
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_round_trip_byte_for_byte(conn, key, name):
    k, value = key("a"), VALUES[name]
    assert conn.ask(SET, k, store_extras(0xFFFFFFFF), value) == ok(SET)
    got = conn.ask(GET, k)
    assert got == ok(GET, extras=b"\xff\xff\xff\xff", value=value), got
    got = conn.ask(GETK, k)
    assert got == ok(GETK, extras=b"\xff\xff\xff\xff", key=k, value=value), got


@pytest.mark.parametrize("split", [1, 8, 23, 24, 30, 40], ids=lambda n: f"after_{n}")
def test_a_request_split_across_sends_is_answered_once_whole(conn, key, split):
    # 24 bytes of header, 8 of extras, then the key (a few dozen bytes), then the value.
    k = key("a")
    data = request(SET, k, store_extras(6), b"split value", opaque=0x5117)
    conn.send(data[:split])
    conn.assert_silent()
    conn.send(data[split:])
    answer = conn.read()
    assert answer == ok(SET) and answer.opaque == 0x5117, answer
    data = request(GETK, k, opaque=0x5118)
    conn.send(data[: min(split, len(data) - 1)])
    conn.assert_silent()
    conn.send(data[min(split, len(data) - 1) :])
    answer = conn.read()
    assert answer == ok(GETK, extras=flags_extras(6), key=k, value=b"split value"), answer
    assert answer.opaque == 0x5118


def test_a_pipelined_burst_of_quiet_sets_then_quiet_gets(conn, key):
    keys = [key(f"{i:03}") for i in range(100)]
    burst = b"".join(
        request(SETQ, k, store_extras(i), b"value %d" % i, opaque=i) for i, k in enumerate(keys)
    )
    conn.send(burst)
    assert conn.fence() == []
    # Ask for them all, and for ten missing keys in between: hits only, in order.
    asks = []
    for i, k in enumerate(keys):
        asks.append(request(GETKQ, k, opaque=1000 + i))
        if i % 10 == 0:
            asks.append(request(GETKQ, key(f"missing{i}"), opaque=5000 + i))
    conn.send(b"".join(asks))
    answered = conn.fence()
    assert answered == [
        ok(GETKQ, extras=flags_extras(i), key=k, value=b"value %d" % i) for i, k in enumerate(keys)
    ], answered[:5]
    assert [r.opaque for r in answered] == [1000 + i for i in range(100)]


def test_replies_past_several_mebibytes_come_whole_and_in_order(conn, key):
    # 3000 values of 2 KiB asked for in one pipeline: about 6 MiB of
    # replies, more than a server holds before it sends (Larder stops at 4
    # MiB, sends, then reads on), each request's reply in its place.
    keys = [key(f"{i:04}") for i in range(3000)]
    values = [(b"%04d" % i) * 512 for i in range(3000)]
    conn.send(b"".join(request(SETQ, k, store_extras(7), v, opaque=i) for i, (k, v) in enumerate(zip(keys, values))))
    assert conn.fence() == []
    asks = b"".join(request(GETKQ if i % 2 else GETK, k, opaque=10_000 + i) for i, k in enumerate(keys))
    sender = threading.Thread(target=conn.send, args=(asks,))
    sender.start()
    try:
        answered = conn.fence_after(len(keys))
    finally:
        sender.join()
    assert [r.opaque for r in answered] == [10_000 + i for i in range(len(keys))]
    assert answered == [
        ok(GETKQ if i % 2 else GETK, extras=flags_extras(7), key=k, value=v) for i, (k, v) in enumerate(zip(keys, values))
    ], answered[:2]


def test_requests_and_replies_interleave_in_order_on_one_connection(conn, key):
    k = key("a")
    data = (
        request(SET, k, store_extras(1), b"x", opaque=1)
        + request(GETQ, key("missing"), opaque=2)
        + request(GET, k, opaque=3)
        + request(APPENDQ, k, value=b"y", opaque=4)
        + request(GETK, k, opaque=5)
        + request(DELETE, k, opaque=6)
        + request(GET, k, opaque=7)
    )
    conn.send(data)
    answers = conn.fence()
    assert answers == [
        ok(SET),
        ok(GET, extras=flags_extras(1), value=b"x"),
        ok(GETK, extras=flags_extras(1), key=k, value=b"xy"),
        ok(DELETE, cas=0),
        error(GET, KEY_ENOENT),
    ], answers
    assert [a.opaque for a in answers] == [1, 3, 5, 6, 7]


# ---- a real client ---------------------------------------------------------------------


def test_the_bmemcached_client_works(server, key):
    import bmemcached

    def k(name: str) -> str:
        return key(name).decode()

    host, port = server.address
    client = bmemcached.Client([f"{host}:{port}"], socket_timeout=GUARD_TIMEOUT_S)
    try:
        assert client.set(k("str"), "text") is True
        assert client.get(k("str")) == "text"
        assert client.set(k("bytes"), b"\x00\xff\r\n") is True
        assert client.get(k("bytes")) == b"\x00\xff\r\n"
        assert client.set(k("int"), 42) is True
        assert client.get(k("int")) == 42
        assert client.set(k("obj"), {"a": [1, 2]}) is True
        assert client.get(k("obj")) == {"a": [1, 2]}
        assert client.get(k("missing")) is None
        assert client.get(k("missing"), default="dflt") == "dflt"

        assert client.get_multi([k("str"), k("bytes"), k("missing")]) == {k("str"): "text", k("bytes"): b"\x00\xff\r\n"}
        assert client.set_multi({k("m1"): "1", k("m2"): "2"}) == []
        assert client.get_multi([k("m1"), k("m2")]) == {k("m1"): "1", k("m2"): "2"}
        assert client.delete_multi([k("m1"), k("m2")]) is True
        assert client.get_multi([k("m1"), k("m2")]) == {}

        assert client.add(k("str"), "other") is False
        assert client.add(k("new"), "added") is True
        assert client.replace(k("missing"), "x") is False
        assert client.replace(k("new"), "replaced") is True
        assert client.get(k("new")) == "replaced"
        assert client.delete(k("new")) is True
        assert client.get(k("new")) is None

        assert client.incr(k("ctr"), 5) == 0  # created with the default, 0
        assert client.incr(k("ctr"), 5) == 5
        assert client.decr(k("ctr"), 2) == 3
        assert client.decr(k("ctr"), 100) == 0

        value, cas = client.gets(k("str"))
        assert value == "text" and cas
        assert client.cas(k("str"), "swapped", cas) is True
        assert client.cas(k("str"), "stale", cas) is False
        assert client.get(k("str")) == "swapped"
        stored, new_cas = client.set(k("str"), "again", get_cas=True)
        assert stored is True and client.get(k("str"), get_cas=True) == ("again", new_cas)
        assert client.cas(k("cas_new"), "fresh", None) is True  # None: only if missing
        assert client.get(k("cas_new")) == "fresh"

        stats = client.stats()
        assert list(stats) == [f"{host}:{port}"], stats
        assert stats[f"{host}:{port}"]["pid"] == str(server.pid).encode()
    finally:
        client.disconnect_all()
