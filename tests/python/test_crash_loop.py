"""A short kill -9 loop in each durability mode that promises to survive it.

The long run (1000 cycles) is `scripts/crash_loop.py --cycles 1000`; this
runs the same script for a few cycles so every test run checks that no
acknowledged write is lost when the server process is killed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LARDER_BIN

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crash_loop.py"


@pytest.mark.parametrize("durability", ["always", "everysec"])
def test_no_acknowledged_write_is_lost_across_kill_9_cycles(durability):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--cycles", "15", "--durability", durability,
         "--binary", LARDER_BIN],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.endswith("lost: 0"), summary
    acknowledged = int(summary.split(" writes acknowledged")[0].split()[-1])
    assert acknowledged > 0, summary
