"""The histogram buckets of the serving latencies (seconds): the model's Prometheus instruments, the
simulator's pods and the tests all read them here. docs/metrics.md lists them ("Histogram buckets")."""

from __future__ import annotations

LATENCY_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
# Edges at the thesis's thresholds (20/25/30/35 ms), so percentiles there come out exact.
TOKEN_BUCKETS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
    0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
