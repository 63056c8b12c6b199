#!/usr/bin/env python3
"""Data for benchmarks/sql_experiments.sh: generate the tables as CSV, the
id and key files, and load a CSV into a memcached-protocol server.

Usage:
  sql_data.py gen-a --rows N --keys COUNT --seed S --out DIR
      DIR/users.csv, DIR/orders.csv: N rows each, ids 1..N, comma-delimited,
      about 100 bytes a line; no field contains a comma, so nothing is
      quoted. DIR/keys_a.txt: COUNT
      keys "users:ID" or "orders:ID", table and id drawn uniformly.
  sql_data.py gen-b --rows N --ids COUNT --threads T --seed S --out DIR
      DIR/kv_b.csv: "id,value1,value2" for ids 1..N (int, double).
      DIR/ids_b.txt: COUNT ids drawn uniformly from 1..N, one a line.
      DIR/ids_b.txt.<t> for t in 0..T-1: line i of ids_b.txt goes to file
      i mod T, so T sysbench threads together read exactly ids_b.txt.
  sql_data.py load --port P|--socket PATH --csv FILE --key-prefix PREFIX --value row|rest
      Sets one key per CSV line over one connection on 127.0.0.1, pipelined
      in batches: key = PREFIX + the line's first field; value = the whole
      line (row) or the line after its first comma (rest). Every reply must
      be STORED. Then reads back a sample of keys and compares values.
      Prints one JSON line: rows, seconds, value bytes (mean).

Standard library only. Generation is deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import time
from pathlib import Path

FIRST_NAMES = [
    "Ada", "Bo", "Chen", "Dara", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jun",
    "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
]
LAST_NAMES = [
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Haddad", "Silva", "Kowalski",
    "Nguyen", "Fischer", "Osei", "Ivanova", "Costa", "Schmidt", "Yilmaz", "Sato",
]
CITIES = [
    "Springfield", "Lagos", "Porto", "Osaka", "Krakow", "Monterrey", "Leeds", "Pune",
    "Accra", "Gothenburg", "Tbilisi", "Cordoba",
]
COUNTRIES = ["US", "NG", "PT", "JP", "PL", "MX", "GB", "IN", "GH", "SE", "GE", "AR"]
STATUSES = ["pending", "paid", "shipped", "delivered", "returned"]
NOTES = [
    "gift wrap please", "leave at the door", "call before delivery", "fragile item",
    "no substitutions", "deliver after 6pm", "second floor office", "ring twice",
]

# Rows are written this many at a time, to keep memory flat for any N.
WRITE_CHUNK_ROWS = 50_000
# Sets in flight on the loading connection before their replies are read.
LOAD_BATCH_ROWS = 1_000
# Keys read back after loading to check that the server holds the CSV.
VERIFY_SAMPLE_ROWS = 200
REPLY_WAIT_SECONDS = 30.0


def timestamps(rng: random.Random, count: int) -> list[str]:
    return [
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        for _ in range(count)
    ]


# Drawing every field with its own call to the generator made 2M rows take
# over a minute; each chunk instead draws whole columns with choices(),
# from pools built once.
TIMESTAMP_POOL_SIZE = 10_000
PHONE_POOL_SIZE = 10_000


def user_rows(rng: random.Random, ids: range, pools: dict) -> list[str]:
    n = len(ids)
    firsts = rng.choices(FIRST_NAMES, k=n)
    lasts = rng.choices(LAST_NAMES, k=n)
    cities = rng.choices(range(len(CITIES)), k=n)
    scores = rng.choices(range(100_000), k=n)
    phones = rng.choices(pools["phones"], k=n)
    times = rng.choices(pools["timestamps"], k=n)
    return [
        f"{i},{f} {l},{f.lower()}.{l.lower()}{i}@example.com,{p},{s},"
        f"{CITIES[c]},{COUNTRIES[c]},{t}"
        for i, f, l, p, s, c, t in zip(ids, firsts, lasts, phones, scores, cities, times)
    ]


def order_rows(rng: random.Random, ids: range, rows: int, pools: dict) -> list[str]:
    n = len(ids)
    users = [rng.randint(1, rows) for _ in range(n)]
    skus = rng.choices(range(10_000, 100_000), k=n)
    sizes = rng.choices(["S", "M", "L", "XL"], k=n)
    quantities = rng.choices(range(1, 10), k=n)
    cents = rng.choices(range(100, 100_000), k=n)
    statuses = rng.choices(STATUSES, k=n)
    warehouses = rng.choices(CITIES, k=n)
    times = rng.choices(pools["timestamps"], k=n)
    currencies = rng.choices(["EUR", "USD", "GBP"], k=n)
    channels = rng.choices(["web", "app", "store"], k=n)
    notes = rng.choices(NOTES, k=n)
    return [
        f"{i},{u},SKU-{k}-{z},{q},{c // 100}.{c % 100:02d},{cur},{st},{ch},WH-{w},{t},{nt}"
        for i, u, k, z, q, c, cur, st, ch, w, t, nt in zip(
            ids, users, skus, sizes, quantities, cents, currencies, statuses, channels,
            warehouses, times, notes,
        )
    ]


def make_pools(rng: random.Random) -> dict:
    return {
        "timestamps": timestamps(rng, TIMESTAMP_POOL_SIZE),
        "phones": [f"+44 7700 {rng.randint(100000, 999999)}" for _ in range(PHONE_POOL_SIZE)],
    }


def write_rows(path: Path, rows: int, make_rows) -> None:
    """Writes ids 1..rows; make_rows(range of ids) returns their lines."""
    with path.open("w") as f:
        for start in range(1, rows + 1, WRITE_CHUNK_ROWS):
            end = min(start + WRITE_CHUNK_ROWS, rows + 1)
            f.write("\n".join(make_rows(range(start, end))))
            f.write("\n")


def write_lines(path: Path, lines) -> None:
    with path.open("w") as f:
        for start in range(0, len(lines), WRITE_CHUNK_ROWS):
            f.write("\n".join(lines[start:start + WRITE_CHUNK_ROWS]))
            f.write("\n")


def gen_a(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    pools = make_pools(rng)
    write_rows(out / "users.csv", args.rows, lambda ids: user_rows(rng, ids, pools))
    write_rows(out / "orders.csv", args.rows, lambda ids: order_rows(rng, ids, args.rows, pools))
    tables = rng.choices(("users:", "orders:"), k=args.keys)
    keys = [f"{table}{rng.randint(1, args.rows)}" for table in tables]
    write_lines(out / "keys_a.txt", keys)
    return 0


def gen_b(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    # repr() of a float reads back as the same double, in MariaDB and here.
    write_rows(
        out / "kv_b.csv", args.rows,
        lambda ids: [f"{i},{rng.randint(-2**31, 2**31 - 1)},{rng.random()!r}" for i in ids],
    )
    ids = [str(rng.randint(1, args.rows)) for _ in range(args.ids)]
    write_lines(out / "ids_b.txt", ids)
    for thread in range(args.threads):
        write_lines(out / f"ids_b.txt.{thread}", ids[thread::args.threads])
    return 0


class Loader:
    """One memcached text-protocol connection that sets pipelined batches."""

    def __init__(self, port: int | None, path: str | None) -> None:
        if path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(REPLY_WAIT_SECONDS)
            self.sock.connect(path)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT_SECONDS)
        self.buffer = b""

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("server closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def read_exact(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("server closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def set_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        parts = []
        for key, value in items:
            parts.append(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        self.sock.sendall(b"".join(parts))
        for key, _ in items:
            reply = self.read_line()
            if reply != b"STORED":
                raise RuntimeError(f"set {key!r}: server replied {reply!r}")

    def get(self, key: bytes) -> bytes | None:
        self.sock.sendall(b"get %s\r\n" % key)
        line = self.read_line()
        if line == b"END":
            return None
        words = line.split()
        if len(words) < 4 or words[0] != b"VALUE":
            raise RuntimeError(f"get {key!r}: unexpected reply {line!r}")
        value = self.read_exact(int(words[3]) + 2)[:-2]
        end = self.read_line()
        if end != b"END":
            raise RuntimeError(f"get {key!r}: expected END, got {end!r}")
        return value


def load(args: argparse.Namespace) -> int:
    prefix = args.key_prefix.encode()
    loader = Loader(args.port, args.socket)
    started = time.monotonic()
    rows = 0
    value_bytes = 0
    sample: list[tuple[bytes, bytes]] = []
    rng = random.Random(1)
    batch: list[tuple[bytes, bytes]] = []
    with open(args.csv, "rb") as f:
        for line in f:
            line = line.rstrip(b"\n")
            if not line:
                continue
            row_id, _, rest = line.partition(b",")
            item = (prefix + row_id, line if args.value == "row" else rest)
            batch.append(item)
            rows += 1
            value_bytes += len(item[1])
            # Reservoir sample of rows to read back.
            if len(sample) < VERIFY_SAMPLE_ROWS:
                sample.append(item)
            elif rng.randrange(rows) < VERIFY_SAMPLE_ROWS:
                sample[rng.randrange(VERIFY_SAMPLE_ROWS)] = item
            if len(batch) == LOAD_BATCH_ROWS:
                loader.set_batch(batch)
                batch = []
    if batch:
        loader.set_batch(batch)
    seconds = time.monotonic() - started
    for key, value in sample:
        got = loader.get(key)
        if got != value:
            print(f"load check failed: {key!r} holds {got!r}, expected {value!r}", file=sys.stderr)
            return 1
    print(json.dumps({
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_second": round(rows / seconds) if seconds > 0 else None,
        "value_bytes_mean": round(value_bytes / rows, 1) if rows else 0,
        "checked_rows": len(sample),
    }))
    return 0


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("gen-a")
    a.add_argument("--rows", type=positive, required=True)
    a.add_argument("--keys", type=positive, required=True)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--out", required=True)
    b = sub.add_parser("gen-b")
    b.add_argument("--rows", type=positive, required=True)
    b.add_argument("--ids", type=positive, required=True)
    b.add_argument("--threads", type=positive, required=True)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--out", required=True)
    ld = sub.add_parser("load")
    where = ld.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=positive)
    where.add_argument("--socket", help="a Unix domain socket's path")
    ld.add_argument("--csv", required=True)
    ld.add_argument("--key-prefix", default="")
    ld.add_argument("--value", choices=("row", "rest"), required=True)
    args = parser.parse_args()
    return {"gen-a": gen_a, "gen-b": gen_b, "load": load}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
