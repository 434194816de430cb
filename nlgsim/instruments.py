"""The metrics a simulated Triton pod exposes: the series of docs/metrics.md, as plain data.

A real pod's model updates Prometheus instruments; a simulated pod updates these, and a scrape
copies them into the snapshot the live autoscaler's collector would have read from ``/metrics``.
Histograms keep cumulative bucket counts (Prometheus ``le`` semantics) and take a weight, so a decode
step can record the same inter-token latency for every sequence of the batch in O(1).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from triton_backend.buckets import LATENCY_BUCKETS, TOKEN_BUCKETS

__all__ = ["LATENCY_BUCKETS", "TOKEN_BUCKETS", "Histogram", "PodInstruments"]



@dataclass
class Histogram:
    """Counts per bucket (non-cumulative internally; ``cumulative()`` gives Prometheus buckets)."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)  # the last is +Inf

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, value)] += weight
        self.total += value * weight
        self.count += weight

    def cumulative(self) -> list[tuple[float, float]]:
        """``[(le, cumulative count), ...]`` ending with ``(inf, count)``."""
        out: list[tuple[float, float]] = []
        acc = 0.0
        for le, c in zip((*self.bounds, float("inf")), self.counts, strict=False):
            acc += c
            out.append((le, acc))
        return out


@dataclass
class PodInstruments:
    """The nlg_* series of one pod (docs/metrics.md), with the pod's lifetime totals."""

    request_latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    time_to_first_token: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    time_per_output_token: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    inter_token_latency: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    requests_finished: float = 0.0
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    kv_cache_usage: float = 0.0
