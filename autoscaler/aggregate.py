"""Windowed statistics from cumulative histogram, counter and gauge snapshots of Triton pods.

This module owns the time-window arithmetic and nothing else: it never reads the clock and does no
I/O; the caller passes ``now`` (the control loop, the simulator's fake clock, tests).

Public API (imported by the simulator; keep stable):

- :class:`Histogram`, :class:`PodSample`, ``Snapshot = Mapping[str, PodSample]`` (pod id -> sample):
  what one scrape round saw.
- :class:`WindowAggregator` ``(time_window, stale_after)``: ``record(now, snapshot)``, ``window(now)``;
  :func:`stale_after` gives the one ``stale_after`` the service and the simulator use.
- :class:`LatencyStats`, :class:`WindowStats`: the result; :func:`latency_stats` builds a
  :class:`LatencyStats` from bucket deltas (the Prometheus source uses it too);
  :func:`quantile` is Prometheus's ``histogram_quantile``.

Rules for odd input (each has a table test):

- A counter that goes backwards (the pod restarted) counts the new value as the increase since the
  restart, as Prometheus's ``increase()`` does.
- A pod's first sample is its baseline: what it counted before we saw it is not attributed to the window.
- A pod that stops reporting keeps contributing what it finished inside the window (those requests
  happened); its gauges are dropped once its newest sample is older than ``stale_after``.
- A sample with NaN or Inf in a histogram is ignored for that histogram; a NaN or Inf gauge is ignored.
- Buckets that are not monotonic (a scrape racing an update) are made monotonic with a running max.
- Pods whose bucket bounds differ are merged on the union of bounds, each pod's cumulative count
  read at the largest bound it has that is <= the union bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

#: Histogram families (short names) the Triton model emits, see docs/metrics.md.
LATENCY_HISTOGRAMS: Final[tuple[str, ...]] = ("request", "pertoken", "ttft", "itl")
#: Counters whose increase over the window is summed over pods (the planner's mix of lengths).
COUNTERS: Final[tuple[str, ...]] = ("prompt_tokens", "generation_tokens", "finished")


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are ``(upper bound, cumulative count)``, ``+Inf`` last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def is_finite(self) -> bool:
        values = [self.sum, self.count, *(c for _, c in self.buckets)]
        return all(math.isfinite(v) for v in values) and not any(math.isnan(le) for le, _ in self.buckets)


@dataclass(frozen=True)
class PodSample:
    """One pod's cumulative histograms (keys from :data:`LATENCY_HISTOGRAMS`), gauges and counters."""

    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)


Snapshot = Mapping[str, PodSample]


@dataclass(frozen=True)
class LatencyStats:
    """Observations finished inside the window; seconds; ``mean`` and quantiles NaN when ``count == 0``."""

    count: float
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def empty(cls) -> LatencyStats:
        return cls(0.0, math.nan, math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class WindowStats:
    """What the policies see. ``pods`` counts pods with a fresh sample; ``span`` the seconds covered;
    ``counters`` the increase of each of :data:`COUNTERS` inside the window (absent: not reported)."""

    latencies: Mapping[str, LatencyStats]
    gauges: Mapping[str, float]
    pods: int
    span: float
    counters: Mapping[str, float] = field(default_factory=dict)

    def latency(self, name: str) -> LatencyStats:
        return self.latencies.get(name) or LatencyStats.empty()

    @classmethod
    def empty(cls) -> WindowStats:
        return cls(latencies={}, gauges={}, pods=0, span=0.0)


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus's ``histogram_quantile`` on cumulative ``(le, count)`` pairs; NaN when empty.

    Linear interpolation inside the bucket holding the rank; the first bucket starts at 0; a rank in
    the ``+Inf`` bucket returns the highest finite bound (there is nothing to interpolate towards).
    """
    pairs = sorted(buckets)
    if not pairs or pairs[-1][1] <= 0:
        return math.nan
    total = pairs[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cumulative in pairs:
        if cumulative >= rank and cumulative > below:
            if math.isinf(le):
                return lower
            if lower >= le:
                return le
            return lower + (le - lower) * (rank - below) / (cumulative - below)
        lower, below = le, cumulative
    return lower


def latency_stats(buckets: Iterable[tuple[float, float]], total: float, count: float) -> LatencyStats:
    """Stats from cumulative bucket counts, ``_sum`` and ``_count`` of the observations in a window."""
    pairs = _monotonic(sorted(buckets))
    if count <= 0 or not pairs:
        return LatencyStats.empty()
    return LatencyStats(
        count=count,
        mean=total / count,
        p50=quantile(0.5, pairs),
        p90=quantile(0.9, pairs),
        p99=quantile(0.99, pairs),
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


def stale_after(interval: float, timeout: float) -> float:
    """When a pod's gauges stop counting: two and a half scrape intervals plus a scrape's timeout, so
    that one slow or missed scrape does not drop a pod that is still there."""
    return 2.5 * interval + timeout


class WindowAggregator:
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
