#!/usr/bin/env python3
"""kill -9 loop: Larder must keep every write it acknowledged.

Starts `larder serve`, runs several writer threads that each overwrite their
own keys with increasing versions and remember the last version the server
acknowledged, kills the server with SIGKILL at a random moment, restarts it
on the same data directory and checks every key: it must hold the last
acknowledged version or the one write that was in flight after it, byte for
byte, never an older version and never anything else. Repeats for --cycles.

    scripts/crash_loop.py --cycles 1000 --durability always

Prints one line per cycle and a final summary; exits 1 on the first loss.
Only talks to 127.0.0.1; stops every server it starts by its PID.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, binary: str, data_dir: Path, durability: str):
        self.binary = binary
        self.data_dir = data_dir
        self.durability = durability
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "serve", "-p", str(self.port), "-l", HOST,
             "--data-dir", str(self.data_dir), "--durability", self.durability],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"larder exited: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection((HOST, self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("larder did not start listening within 30 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int:
        if not self.proc or self.proc.poll() is not None:
            return 0
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


def value_for(key: str, version: int, size: int) -> bytes:
    head = f"{key}:{version}:".encode()
    return head + b"x" * max(0, size - len(head))


class Writer(threading.Thread):
    """Overwrites keys `w<id>-<n>` with increasing versions until stopped."""

    def __init__(self, ident: int, port: int, keys: int, size: int, state: dict, stop: threading.Event):
        super().__init__(daemon=True)
        self.writer_id, self.port, self.keys, self.size = ident, port, keys, size
        self.state = state  # key -> [acked_version, in_flight_version]
        self.stop_event = stop
        self.acked = 0

    def run(self) -> None:
        try:
            sock = socket.create_connection((HOST, self.port), timeout=5)
        except OSError:
            return
        reader = sock.makefile("rb")
        rng = random.Random(self.writer_id)
        try:
            while not self.stop_event.is_set():
                key = f"w{self.writer_id}-{rng.randrange(self.keys)}"
                versions = self.state.setdefault(key, [0, 0])
                version = versions[0] + 1
                versions[1] = version
                value = value_for(key, version, self.size)
                sock.sendall(f"set {key} 0 0 {len(value)}\r\n".encode() + value + b"\r\n")
                line = reader.readline()
                if line != b"STORED\r\n":
                    return
                versions[0] = version
                self.acked += 1
        except OSError:
            return
        finally:
            sock.close()


def verify(port: int, state: dict, size: int) -> tuple[int, list[str]]:
    problems = []
    sock = socket.create_connection((HOST, port), timeout=10)
    reader = sock.makefile("rb")
    checked = 0
    for key, (acked, in_flight) in state.items():
        sock.sendall(f"get {key}\r\n".encode())
        line = reader.readline()
        value = None
        if line.startswith(b"VALUE "):
            length = int(line.split()[3])
            value = reader.read(length + 2)[:-2]
            assert reader.readline() == b"END\r\n"
        elif line != b"END\r\n":
            problems.append(f"{key}: unexpected reply {line!r}")
            continue
        allowed = {v: value_for(key, v, size) for v in {acked, in_flight} if v > 0}
        if value is None:
            if acked > 0:
                problems.append(f"{key}: acknowledged version {acked} is missing")
        elif value not in allowed.values():
            problems.append(f"{key}: holds {value[:40]!r}..., acknowledged version {acked}")
        else:
            found = next(v for v, expected in allowed.items() if expected == value)
            state[key] = [found, found]
        checked += 1 if acked > 0 else 0
    sock.close()
    return checked, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--durability", choices=["always", "everysec", "none"], default="always")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--keys", type=int, default=200, help="keys per writer")
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--max-run-ms", type=int, default=300, help="longest run before the kill")
    parser.add_argument("--binary", default=os.environ.get("LARDER_BIN", str(REPO / "target/release/larder")))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.cycles < 1 or args.cycles > 100_000:
        parser.error("--cycles must be 1..100000")
    rng = random.Random(args.seed)
    state: dict = {}
    total_acked = 0
    total_checked = 0
    with tempfile.TemporaryDirectory(prefix="larder-crash-") as tmp:
        server = Server(args.binary, Path(tmp) / "data", args.durability)
        try:
            for cycle in range(1, args.cycles + 1):
                server.start()
                stop = threading.Event()
                writers = [Writer(i, server.port, args.keys, args.value_size, state, stop)
                           for i in range(args.writers)]
                for writer in writers:
                    writer.start()
                time.sleep(rng.uniform(0.01, args.max_run_ms / 1000))
                server.kill()
                stop.set()
                for writer in writers:
                    writer.join(timeout=10)
                acked = sum(w.acked for w in writers)
                total_acked += acked
                server.start()
                checked, problems = verify(server.port, state, args.value_size)
                total_checked += checked
                server.kill()
                print(f"cycle {cycle}: {acked} writes acknowledged, {checked} keys checked, "
                      f"lost {len(problems)}", flush=True)
                if problems:
                    for problem in problems[:20]:
                        print("  LOST " + problem)
                    return 1
        finally:
            server.kill()
    print(f"crash loop ({args.durability}): {args.cycles} cycles, {total_acked} writes "
          f"acknowledged, {total_checked} key checks, lost: 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
