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

Cost: a round is O(pods). Each sample becomes, at ``record``, one step per series (its increase over
the pod's previous finite sample, :mod:`autoscaler.bucket_deltas`); the steps a window holds are
summed per pod without subtraction (:mod:`autoscaler.sliding_sum`), and ``window`` adds up the pods.
Bucket counts and ``_count`` come out exactly as a sum from scratch would give them (they are integers);
``_sum`` and fractional counters may differ from it in the last bits, being added in another order.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import add
from typing import Final, TypeVar

from autoscaler.bucket_deltas import Delta, Point, combine, merge_pods, point, step
from autoscaler.sliding_sum import SlidingSum

T = TypeVar("T")

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


def stale_after(interval: float, timeout: float) -> float:
    """When a pod's gauges stop counting: two and a half scrape intervals plus a scrape's timeout, so
    that one slow or missed scrape does not drop a pod that is still there."""
    return 2.5 * interval + timeout


class _PodHistory:
    """One pod's held samples (time, sequence number, finite gauges) and the steps between them.

    The first held sample is the window's baseline (the newest at or before the window start); a
    step is held while the sample it starts from is. ``points`` and ``counts`` are each series' last
    finite value, the start of its next step.
    """

    __slots__ = ("counters", "counts", "histograms", "next_seq", "points", "samples")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int, dict[str, float]]] = deque()
        self.next_seq = 0
        self.points: dict[str, tuple[int, Point]] = {}
        self.histograms: dict[str, SlidingSum[Delta]] = {}
        self.counts: dict[str, tuple[int, float]] = {}
        self.counters: dict[str, SlidingSum[float]] = {}

    def add(self, now: float, sample: PodSample) -> None:
        seq = self.next_seq
        self.next_seq += 1
        held_from = self.samples[0][1] if self.samples else seq
        gauges = {name: v for name, v in sample.gauges.items() if math.isfinite(v)}
        self.samples.append((now, seq, gauges))
        for name in LATENCY_HISTOGRAMS:
            histogram = sample.histograms.get(name)
            p = None if histogram is None else point(histogram.buckets, histogram.sum, histogram.count)
            if p is None:
                continue
            before = self.points.get(name)
            if before is not None and before[0] >= held_from:
                self.histograms.setdefault(name, SlidingSum(combine)).push(before[0], seq, step(before[1], p))
            self.points[name] = (seq, p)
        for name in COUNTERS:
            value = sample.counters.get(name, math.nan)
            if not math.isfinite(value):
                continue
            last = self.counts.get(name)
            if last is not None and last[0] >= held_from:
                # A smaller value is a restart: the new value is what was counted since.
                increase = value - last[1] if value >= last[1] else value
                self.counters.setdefault(name, SlidingSum(add)).push(last[0], seq, increase)
            self.counts[name] = (seq, value)

    def prune(self, start: float) -> bool:
        """Drops what the window starting at ``start`` no longer needs; False when nothing is left."""
        samples = self.samples
        dropped = False
        while len(samples) > 1 and samples[1][0] <= start:
            samples.popleft()
            dropped = True
        if samples[-1][0] < start:
            return False
        if dropped:
            held_from = samples[0][1]
            for histogram in self.histograms.values():
                histogram.drop_starting_before(held_from)
            for counter in self.counters.values():
                counter.drop_starting_before(held_from)
        return True

    def usable(self, now: float, start: float) -> tuple[int, int]:
        """Indices of the baseline and the newest sample of the window ``(start, now]``; ``last < 0``
        when no sample is at or before ``now``."""
        samples = self.samples
        last = len(samples) - 1
        while last >= 0 and samples[last][0] > now:
            last -= 1
        first = 0
        while first < last and samples[first + 1][0] <= start:
            first += 1
        return first, last


def _range_sum(sliding: SlidingSum[T], plus: Callable[[T, T], T], first: int, last: int) -> T | None:
    """The steps from sample ``first`` on that end by sample ``last``, oldest first."""
    total: T | None = None
    for start, end, value in sliding.steps():
        if start >= first and end <= last:
            total = value if total is None else plus(total, value)
    return total


class WindowAggregator:
    """Keeps each pod's samples for ``time_window`` seconds and reduces them to :class:`WindowStats`.

    ``stale_after`` (seconds) decides when a pod's gauges stop counting; give it about two scrape
    intervals. ``time_window`` may be changed between calls (a config reload).

    Incremental: ``record`` turns each new sample into one step per series and drops the steps that
    leave the window; ``window`` adds up each pod's held steps (:class:`~autoscaler.sliding_sum.SlidingSum`,
    O(1) per pod) and then the pods. A round costs O(pods), not O(pods x samples held). A ``window``
    whose range is not the one the last ``record`` kept (an earlier ``now``, a shorter ``time_window``)
    sums the steps of that range instead, O(samples held) for the pods concerned.
    """

    def __init__(self, time_window: float, stale_after: float) -> None:
        if time_window <= 0 or stale_after <= 0:
            raise ValueError(f"time_window ({time_window}) and stale_after ({stale_after}) must be > 0")
        self.time_window = time_window
        self.stale_after = stale_after
        self._pods: dict[str, _PodHistory] = {}

    @property
    def pods(self) -> list[str]:
        """Pods with samples still held."""
        return sorted(self._pods)

    def record(self, now: float, snapshot: Snapshot) -> None:
        """Adds one round's samples; what leaves the window is dropped here."""
        for pod, sample in snapshot.items():
            history = self._pods.get(pod)
            if history is None:
                history = self._pods[pod] = _PodHistory()
            elif history.samples and history.samples[-1][0] > now:
                continue  # time never runs backwards for one pod; a late duplicate is dropped
            history.add(now, sample)
        start = now - self.time_window
        for pod in [p for p, history in self._pods.items() if not history.prune(start)]:
            del self._pods[pod]  # gone for a whole window: nothing of it is left to count

    def window(self, now: float) -> WindowStats:
        """Statistics of what finished in ``(now - time_window, now]``, and current gauges."""
        start = now - self.time_window
        deltas: dict[str, list[Delta]] = {}
        counters: dict[str, float] = {}
        gauge_values: dict[str, list[float]] = {}
        fresh = 0
        earliest = now
        for history in self._pods.values():
            first, last = history.usable(now, start)
            if last < 0:
                continue
            samples = history.samples
            if last > first:
                earliest = min(earliest, max(samples[first][0], start))
            whole = first == 0 and last == len(samples) - 1
            from_seq, to_seq = samples[first][1], samples[last][1]
            for name, sliding in history.histograms.items():
                delta = sliding.total() if whole else _range_sum(sliding, combine, from_seq, to_seq)
                if delta is not None:
                    deltas.setdefault(name, []).append(delta)
            for name, counter in history.counters.items():
                increase = counter.total() if whole else _range_sum(counter, add, from_seq, to_seq)
                if increase is not None:
                    counters[name] = counters.get(name, 0.0) + increase
            latest_t, _, gauges = samples[last]
            if now - latest_t <= self.stale_after:
                fresh += 1
                for name, value in gauges.items():
                    gauge_values.setdefault(name, []).append(value)
        latencies = {name: latency_stats(*merge_pods(pods)) for name, pods in deltas.items()}
        gauges_now = {
            name: (sum(values) / len(values) if name == "kv_usage" else sum(values))
            for name, values in gauge_values.items()
        }
        return WindowStats(latencies=latencies, gauges=gauges_now, pods=fresh, span=now - earliest, counters=counters)
