"""The window arithmetic as it was before windows became incremental: every held sample of every pod
is reduced again at each ``window(now)``, O(pods x samples held) per round.

Kept as the reference the incremental :class:`autoscaler.aggregate.WindowAggregator` must agree with
(tests/autoscaler/test_incremental_windows.py) and is measured against (:mod:`benchmarks.fleet_round`);
it is the code the issue measured, unchanged except for its name. The result types and
:func:`~autoscaler.aggregate.latency_stats` are the module's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autoscaler.aggregate import (
    COUNTERS,
    LATENCY_HISTOGRAMS,
    Histogram,
    PodSample,
    Snapshot,
    WindowStats,
    latency_stats,
)


def _monotonic(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    running = 0.0
    for le, c in pairs:
        running = max(running, c)
        out.append((le, running))
    return out


def _cumulative_at(pairs: list[tuple[float, float]], bound: float) -> float:
    """A pod's cumulative count at ``bound``: read at its largest bucket bound <= ``bound``."""
    value = 0.0
    for le, c in pairs:
        if le > bound:
            break
        value = c
    return value


@dataclass
class _Delta:
    """Increase of one histogram over a window, summed over the samples' reset-aware steps."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def add_step(self, before: Histogram | None, after: Histogram) -> None:
        after_pairs = _monotonic(sorted(after.buckets))
        # A smaller count means the pod restarted: everything it counted since is new.
        reset = before is None or after.count < before.count
        before_pairs = [] if reset or before is None else _monotonic(sorted(before.buckets))
        self.sum += after.sum - (0.0 if reset or before is None else before.sum)
        self.count += after.count - (0.0 if reset or before is None else before.count)
        for le, c in after_pairs:
            previous = _cumulative_at(before_pairs, le)
            self.buckets[le] = self.buckets.get(le, 0.0) + max(0.0, c - previous)

    def merge(self, other: _Delta) -> None:
        bounds = sorted(set(self.buckets) | set(other.buckets))
        mine, theirs = sorted(self.buckets.items()), sorted(other.buckets.items())
        self.buckets = {b: _cumulative_at(mine, b) + _cumulative_at(theirs, b) for b in bounds}
        self.sum += other.sum
        self.count += other.count


class ReferenceWindowAggregator:
    """Keeps each pod's samples for ``time_window`` seconds and reduces them to :class:`WindowStats`.

    ``stale_after`` (seconds) decides when a pod's gauges stop counting; give it about two scrape
    intervals. ``time_window`` may be changed between calls (a config reload).
    """

    def __init__(self, time_window: float, stale_after: float) -> None:
        if time_window <= 0 or stale_after <= 0:
            raise ValueError(f"time_window ({time_window}) and stale_after ({stale_after}) must be > 0")
        self.time_window = time_window
        self.stale_after = stale_after
        self._samples: dict[str, list[tuple[float, PodSample]]] = {}

    @property
    def pods(self) -> list[str]:
        """Pods with samples still held."""
        return sorted(self._samples)

    def record(self, now: float, snapshot: Snapshot) -> None:
        """Adds one round's samples; older rounds outside the window are dropped here."""
        for pod, sample in snapshot.items():
            history = self._samples.setdefault(pod, [])
            if history and history[-1][0] > now:
                continue  # time never runs backwards for one pod; a late duplicate is dropped
            history.append((now, sample))
        self._prune(now)

    def _prune(self, now: float) -> None:
        start = now - self.time_window
        for pod in list(self._samples):
            history = self._samples[pod]
            # Keep the newest sample at or before the window start: it is the baseline of the window.
            first = max((i for i, (t, _) in enumerate(history) if t <= start), default=0)
            del history[:first]
            if history[-1][0] < start:
                del self._samples[pod]  # gone for a whole window: nothing of it is left to count

    def window(self, now: float) -> WindowStats:
        """Statistics of what finished in ``(now - time_window, now]``, and current gauges."""
        start = now - self.time_window
        deltas: dict[str, _Delta] = {}
        gauge_values: dict[str, list[float]] = {}
        counters: dict[str, float] = {}
        fresh = 0
        earliest = now
        for history in self._samples.values():
            usable = [(t, s) for t, s in history if t <= now]
            if not usable:
                continue
            first = max((i for i, (t, _) in enumerate(usable) if t <= start), default=0)
            usable = usable[first:]
            if len(usable) > 1:
                earliest = min(earliest, max(usable[0][0], start))
            for name in LATENCY_HISTOGRAMS:
                delta = self._pod_delta(usable, name)
                if delta is not None:
                    deltas.setdefault(name, _Delta()).merge(delta)
            for name in COUNTERS:
                increase = _counter_increase(usable, name)
                if increase is not None:
                    counters[name] = counters.get(name, 0.0) + increase
            latest_t, latest = usable[-1]
            if now - latest_t <= self.stale_after:
                fresh += 1
                for name, value in latest.gauges.items():
                    if math.isfinite(value):
                        gauge_values.setdefault(name, []).append(value)
        latencies = {name: latency_stats(d.buckets.items(), d.sum, d.count) for name, d in deltas.items()}
        gauges = {
            name: (sum(values) / len(values) if name == "kv_usage" else sum(values))
            for name, values in gauge_values.items()
        }
        return WindowStats(latencies=latencies, gauges=gauges, pods=fresh, span=now - earliest, counters=counters)

    @staticmethod
    def _pod_delta(history: list[tuple[float, PodSample]], name: str) -> _Delta | None:
        points = [s.histograms[name] for _, s in history if name in s.histograms]
        points = [h for h in points if h.is_finite()]
        if len(points) < 2:
            return None  # a single sample is only a baseline
        delta = _Delta()
        for before, after in zip(points, points[1:], strict=False):
            delta.add_step(before, after)
        return delta


def _counter_increase(history: list[tuple[float, PodSample]], name: str) -> float | None:
    """A counter's increase over one pod's samples; a smaller value is a restart (counted from 0)."""
    points = [v for _, sample in history if math.isfinite(v := sample.counters.get(name, math.nan))]
    if len(points) < 2:
        return None
    return sum(b - a if b >= a else b for a, b in zip(points, points[1:], strict=False))
