"""The arithmetic of benchmarks/pairs_report.py on pairs made up here, so
that the expected figures are known exactly."""

from __future__ import annotations

import math
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from pairs_report import ratio_at_equal_steal  # noqa: E402


def pair(ratio: float, stolen_a: float, stolen_b: float) -> dict:
    return {
        "A": {"host_steal_percent": stolen_a},
        "B": {"host_steal_percent": stolen_b},
        "ratio_b_to_a": ratio,
    }


def test_the_fit_recovers_the_ratio_hidden_under_stolen_cpu():
    # B is 1.08x A at equal steal and loses 2.5% per point of steal more
    # than A: pairs whose median alone would say otherwise.
    true_ratio, per_point = 1.08, -0.025
    pairs = [
        pair(true_ratio * math.exp(per_point * (b - a)), a, b)
        for a, b in [(1.0, 30.0), (2.0, 25.0), (20.0, 3.0), (4.0, 18.0), (5.0, 5.5)]
    ]
    median = sorted(p["ratio_b_to_a"] for p in pairs)[2]
    assert median < 1.0  # the median is misled by the steal
    fit = ratio_at_equal_steal(pairs)
    assert fit is not None
    assert fit["ratio_b_to_a"] == pytest.approx(true_ratio, rel=1e-9)
    assert fit["log_ratio_per_stolen_percent"] == pytest.approx(per_point, rel=1e-9)
    assert fit["correlation"] == pytest.approx(-1.0)


def test_no_fit_without_the_figures_or_with_too_few_pairs():
    three = [pair(1.1, 1.0, 2.0), pair(0.9, 5.0, 1.0), pair(1.0, 3.0, 3.5)]
    assert ratio_at_equal_steal(three) is not None
    assert ratio_at_equal_steal(three[:2]) is None
    missing = three + [pair(1.0, None, 2.0)]
    assert ratio_at_equal_steal(missing) is None
    # The same difference in every pair cannot separate steal from servers.
    same_difference = [pair(r, 1.0, 3.0) for r in (1.1, 0.9, 1.0)]
    assert ratio_at_equal_steal(same_difference) is None
