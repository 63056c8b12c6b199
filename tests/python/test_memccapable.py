"""libmemcached's protocol conformance suite (memccapable), ASCII protocol only.

memccapable flushes the server and runs its own checks of every ASCII command
(set/add/replace/append/prepend/cas/get/gets/delete/incr/decr/flush_all/
stat/version/quit, with and without noreply). It prints one line per test
ending in [pass], [skip] or [FAIL] and exits non-zero when any test fails.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

MEMCCAPABLE = shutil.which("memccapable") or "/usr/bin/memccapable"
TIMEOUT_S = 120


def run_memccapable(server) -> subprocess.CompletedProcess:
    if not shutil.which(MEMCCAPABLE):
        pytest.fail("memccapable not found: install libmemcached-tools", pytrace=False)
    return subprocess.run(
        # -a: ASCII protocol only (larder speaks no binary protocol); -t: I/O timeout in seconds.
        [MEMCCAPABLE, "-h", "127.0.0.1", "-p", str(server.port), "-a", "-t", "10"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT_S,
    )


def test_memccapable_ascii(larder):
    result = run_memccapable(larder)
    output = result.stdout.decode("utf-8", "replace")
    print(output)
    assert result.returncode == 0, f"memccapable exited {result.returncode}:\n{output}\nserver stderr:\n{larder.stderr()}"
    assert "FAIL" not in output, output
    passed = [line for line in output.splitlines() if line.rstrip().endswith("[pass]")]
    assert len(passed) >= 20, f"expected the ASCII suite to run (~27 tests), got:\n{output}"
    assert larder.running(), f"larder died during memccapable:\n{larder.stderr()}"
