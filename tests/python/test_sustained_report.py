"""The trend line of benchmarks/sustained_report.py on rates made up here,
so that the expected figures are known exactly."""

from __future__ import annotations

import math
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from sustained_report import throughput_trend, trend_markdown  # noqa: E402


def intervals(rates: list[float], seconds: float = 10.0) -> list[dict]:
    return [
        {"start_seconds": k * seconds, "end_seconds": (k + 1) * seconds, "ops_per_second": rate}
        for k, rate in enumerate(rates)
    ]


def test_a_steady_decline_is_read_back_exactly_with_no_error():
    # 60 intervals of 10 s losing 100 ops/s each: rate(t) = 100050 - 10 t
    # at an interval's middle t.
    trend = throughput_trend(intervals([100_000 - 100 * k for k in range(60)]), 60.0, 600.0)
    assert trend["intervals"] == 60
    assert trend["first_ops_per_second"] == pytest.approx(100_050 - 10 * 30)
    assert trend["last_ops_per_second"] == pytest.approx(100_050 - 10 * 570)
    assert trend["ratio"] == pytest.approx(94_350 / 99_750)
    # The mean rate is the line's value at the mean middle, 300 s.
    assert trend["slope_share_per_10_minutes"] == pytest.approx(-10 * 600 / 97_050)
    assert trend["slope_share_per_10_minutes_2se"] == pytest.approx(0.0, abs=1e-12)


def test_scattered_rates_give_the_slope_and_its_standard_error_by_hand():
    # Middles 5, 15, 25 s; rates 10, 12, 11. Mean 11 at 15 s, Sxx = 200,
    # slope 10 / 200 = 0.05 per s; residuals -0.5, 1, -0.5, so the slope's
    # standard error is sqrt(1.5 / (3 - 2) / 200).
    trend = throughput_trend(intervals([10.0, 12.0, 11.0]), 10.0, 30.0)
    assert trend["first_ops_per_second"] == pytest.approx(10.5)
    assert trend["last_ops_per_second"] == pytest.approx(11.5)
    assert trend["ratio"] == pytest.approx(11.5 / 10.5)
    assert trend["slope_share_per_10_minutes"] == pytest.approx(0.05 * 600 / 11)
    assert trend["slope_share_per_10_minutes_2se"] == pytest.approx(2 * math.sqrt(1.5 / 200) * 600 / 11)
    text = "\n".join(trend_markdown(trend, 10.0))
    assert "fitted to the 3 intervals' rates" in text and "the first 10 s" in text, text
    assert "(1.095x), a slope of +272.7% of the mean rate per 10 minutes, ± 944.8% (two standard errors" in text, text


def test_no_trend_from_fewer_than_three_intervals_no_requests_or_a_line_below_zero_at_the_start():
    assert throughput_trend(intervals([5.0, 6.0]), 10.0, 20.0) is None
    assert throughput_trend(intervals([0.0, 0.0, 0.0]), 10.0, 30.0) is None
    # Rates 0, 0, 100: the line is -16.7 at 5 s, so there is no ratio.
    assert throughput_trend(intervals([0.0, 0.0, 100.0]), 10.0, 30.0) is None
    assert trend_markdown(None, 60.0) == []
