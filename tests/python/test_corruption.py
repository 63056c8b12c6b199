"""Damage in sealed data is found, reported and refused, never served.

A server writes enough keys to seal several small segments and stops; a bit
is flipped inside a record of a sealed segment. `larder check` must name the
file, the offset and the key and exit 1; `larder serve` must refuse to start
with one clear line naming the file, rather than serve a directory that lost
data silently, and start only when told to salvage: then every intact record
is served, the damaged one is gone, and the original file is kept.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from pymemcache.client.base import Client

from conftest import HOST, LARDER_BIN

SEGMENT_HEADER_BYTES = 40
RECORD_HEADER_BYTES = 28


def write_small_segments(servers, tmp_path: Path) -> Path:
    config = tmp_path / "larder.toml"
    config.write_text("segment_bytes_max = 4096\n")
    server = servers.larder(
        durability="always", extra=["--config", str(config), "-I", "1k"]
    )
    client = Client((HOST, server.port), timeout=5, default_noreply=False)
    for i in range(300):
        assert client.set(f"key-{i:04d}", b"v" * 50)
    client.close()
    assert server.stop() == 0
    return server.data_dir


def sealed_segment(data_dir: Path) -> Path:
    segments = sorted(data_dir.glob("*.seg"))
    assert len(segments) >= 3, segments
    return segments[1]


def flip_value_byte_of_third_record(segment: Path) -> tuple:
    data = bytearray(segment.read_bytes())
    offset = SEGMENT_HEADER_BYTES
    for _ in range(2):
        key_len, value_len = struct.unpack_from("<HI", data, offset + 6)
        offset += RECORD_HEADER_BYTES + key_len + value_len
    key_len = struct.unpack_from("<H", data, offset + 6)[0]
    key = bytes(data[offset + RECORD_HEADER_BYTES : offset + RECORD_HEADER_BYTES + key_len])
    data[offset + RECORD_HEADER_BYTES + key_len + 3] ^= 0x20
    segment.write_bytes(bytes(data))
    return offset, key


def test_check_passes_on_an_intact_directory(servers, tmp_path):
    data_dir = write_small_segments(servers, tmp_path)
    result = subprocess.run(
        [LARDER_BIN, "check", "--data-dir", str(data_dir)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 damaged" in result.stdout


def test_check_reports_a_flipped_bit_with_file_offset_and_key(servers, tmp_path):
    data_dir = write_small_segments(servers, tmp_path)
    segment = sealed_segment(data_dir)
    offset, key = flip_value_byte_of_third_record(segment)
    result = subprocess.run(
        [LARDER_BIN, "check", "--data-dir", str(data_dir)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(l for l in result.stdout.splitlines() if l.startswith("damaged:"))
    assert str(segment) in line
    assert f"offset {offset}" in line
    assert key.decode() in line
    assert ", 1 damaged" in result.stdout


def test_serve_refuses_damaged_sealed_data_with_one_clear_line(servers, tmp_path):
    data_dir = write_small_segments(servers, tmp_path)
    segment = sealed_segment(data_dir)
    # Without the hint file the segment is scanned at start, so the damage is
    # found before any client could read around it.
    segment.with_suffix(".hint").unlink(missing_ok=True)
    flip_value_byte_of_third_record(segment)
    result = subprocess.run(
        [LARDER_BIN, "serve", "-p", "0", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = [l for l in result.stderr.splitlines() if l.startswith("larder:")]
    assert len(lines) == 1, result.stderr
    assert str(segment) in lines[0] and "corrupt" in lines[0]
    assert "--salvage" in lines[0], lines[0]


def test_serve_with_salvage_serves_every_intact_record_and_keeps_the_original(servers, tmp_path):
    data_dir = write_small_segments(servers, tmp_path)
    segment = sealed_segment(data_dir)
    _, damaged_key = flip_value_byte_of_third_record(segment)
    damaged_bytes = segment.read_bytes()

    server = servers.larder(data_dir=data_dir, extra=["--salvage"])
    client = Client((HOST, server.port), timeout=5)
    for i in range(300):
        key = f"key-{i:04d}"
        got = client.get(key)
        if key.encode() == damaged_key:
            assert got is None, f"{key} was served from a damaged record"
        else:
            assert got == b"v" * 50, f"{key}: {got!r}"
    stats = {k.decode(): v for k, v in client.stats().items()}
    assert int(stats["larder_recovery_salvaged_segments"]) == 1, stats
    assert int(stats["larder_recovery_salvaged_records_skipped"]) == 1, stats
    client.close()
    assert server.stop() == 0
    kept = data_dir / "damaged" / segment.name
    assert kept.read_bytes() == damaged_bytes

    # The directory is whole now: a plain start and `larder check` agree.
    result = subprocess.run(
        [LARDER_BIN, "check", "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    server = servers.larder(data_dir=data_dir)
    client = Client((HOST, server.port), timeout=5)
    assert client.get("key-0299") == b"v" * 50
    assert client.get(damaged_key.decode()) is None
    client.close()
