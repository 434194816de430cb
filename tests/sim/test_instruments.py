"""A simulated pod's instruments: Prometheus bucket semantics, and the same buckets as the real model."""

from __future__ import annotations

import pytest

from nlgsim.instruments import Histogram


def test_histogram_is_cumulative_with_le_bounds_and_weights():
    h = Histogram((0.01, 0.02))
    h.observe(0.01)  # on the bound: counted in le=0.01, as Prometheus does
    h.observe(0.015, weight=3)
    h.observe(5.0)
    assert h.cumulative() == [(0.01, 1), (0.02, 4), (float("inf"), 5)]
    assert (h.count, h.total) == (5, pytest.approx(0.01 + 0.045 + 5.0))
