"""`larder serve --metrics-listen ADDR:PORT`: the `stats` figures over HTTP.

The real binary serves `GET /metrics`; Prometheus' own Python client
(`prometheus_client.parser`) parses the answer, and the figures match
what `stats` says over the memcached protocol and move with the traffic
of a real memcached client (pymemcache). A malformed address stops the
start with exit code 2 and one line.
"""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymemcache.client.base import Client

from conftest import HOST, LARDER_BIN, free_port

HTTP_TIMEOUT_S = 10


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=HTTP_TIMEOUT_S) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.name.startswith("larder_") and not sample.name.startswith("larder_larder_")
            assert sample.name not in samples, f"{sample.name} twice"
            samples[sample.name] = sample.value
    assert len(samples) == len(text.splitlines()), text
    return samples


def test_the_metrics_endpoint_serves_the_stats_figures(servers):
    port = free_port()
    server = servers.larder(extra=["--metrics-listen", f"{HOST}:{port}"])
    client = Client(server.address, connect_timeout=5, timeout=10, default_noreply=False)
    assert client.set("k", b"value")
    before = scrape(port)
    stats = client.stats()
    assert before["larder_curr_items"] == stats[b"curr_items"] == 1
    assert before["larder_live_bytes"] == int(stats[b"larder_live_bytes"]) > 0
    for _ in range(5):
        assert client.get("k") == b"value"
    after = scrape(port)
    assert after["larder_cmd_get"] - before["larder_cmd_get"] == 5
    assert after["larder_get_hits"] - before["larder_get_hits"] == 5
    assert client.stats("settings")[b"larder_metrics_listen"] == f"{HOST}:{port}".encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{HOST}:{port}/", timeout=HTTP_TIMEOUT_S)
    assert refused.value.code == 404
    client.close()


@pytest.mark.parametrize("address", ["9150", "localhost:9150", "127.0.0.1:99999", "127.0.0.1"])
def test_a_malformed_metrics_address_is_refused_with_one_line(tmp_path, address):
    result = subprocess.run(
        [LARDER_BIN, "serve", "-p", "0", "--data-dir", str(tmp_path / "data"), "--metrics-listen", address],
        capture_output=True,
        text=True,
        timeout=HTTP_TIMEOUT_S,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines == [f'larder: metrics listen address "{address}" is not an address:port such as 127.0.0.1:9150'], lines


def test_a_metrics_port_in_use_stops_the_start_with_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [LARDER_BIN, "serve", "-p", "0", "--data-dir", str(tmp_path / "data"),
             "--metrics-listen", f"{HOST}:{port}"],
            capture_output=True,
            text=True,
            timeout=HTTP_TIMEOUT_S,
        )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"larder: cannot listen on {HOST}:{port}: "), lines
