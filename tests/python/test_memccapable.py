"""libmemcached's protocol conformance suite (memccapable), in both protocols.

memccapable flushes the server and runs its own checks of every command,
once in the ASCII protocol (set/add/replace/append/prepend/cas/get/gets/
delete/incr/decr/flush_all/stat/version/quit, with and without noreply) and
once in the binary protocol (each command and its quiet form). It prints one
line per test ending in [pass], [skip] or [FAIL] and exits non-zero when any
test fails.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

MEMCCAPABLE = shutil.which("memccapable") or "/usr/bin/memccapable"
TIMEOUT_S = 120


def run_memccapable(server, protocol_flag: str) -> subprocess.CompletedProcess:
    if not shutil.which(MEMCCAPABLE):
        pytest.fail("memccapable not found: install libmemcached-tools", pytrace=False)
    return subprocess.run(
        # -a: the ASCII protocol only, -b: the binary one only; -t: I/O timeout in seconds.
        [MEMCCAPABLE, "-h", "127.0.0.1", "-p", str(server.port), protocol_flag, "-t", "10"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize(
    "protocol_flag, name, tests_min",
    [("-a", "ASCII", 20), ("-b", "binary", 25)],
    ids=["ascii", "binary"],
)
def test_memccapable(larder, protocol_flag, name, tests_min):
    result = run_memccapable(larder, protocol_flag)
    output = result.stdout.decode("utf-8", "replace")
    print(output)
    assert result.returncode == 0, f"memccapable exited {result.returncode}:\n{output}\nserver stderr:\n{larder.stderr()}"
    assert "FAIL" not in output, output
    passed = [line for line in output.splitlines() if line.rstrip().endswith("[pass]")]
    assert len(passed) >= tests_min, f"expected the {name} suite to run, got:\n{output}"
    if protocol_flag == "-b":
        assert all(line.startswith("binary ") for line in passed), output
    assert larder.running(), f"larder died during memccapable:\n{larder.stderr()}"
