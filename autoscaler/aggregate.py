"""Windowed statistics from cumulative histogram, counter and gauge snapshots of Triton pods.

This module owns the time-window arithmetic and nothing else: it never reads the clock and does no
I/O; the caller passes ``now`` (the control loop, the simulator's fake clock, tests).

Public API (imported by the simulator; keep stable):

- :class:`Histogram`, :class:`PodSample`, ``Snapshot = Mapping[str, PodSample]`` (pod id -> sample):
  what one scrape round saw.
- :class:`WindowAggregator` ``(time_window, stale_after)``: ``record(now, snapshot)``, ``window(now)``;
  :func:`stale_after` gives the one ``stale_after`` the service and the simulator use.
- :class:`LatencyStats`, :class:`WindowStats` (with each pod's :class:`PodWindow`): the result;
  :func:`latency_stats` builds a :class:`LatencyStats` from bucket deltas (the Prometheus source uses
  it too); :func:`quantile` is Prometheus's ``histogram_quantile``.

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

Cost: a round is O(pods). A window's increase for one pod is the sum of the steps between the
pod's finite values it holds; a counter or histogram that neither restarts nor goes down in the
window (almost always) telescopes, so that sum is its last value minus its first, one subtraction
per series (:mod:`autoscaler.bucket_deltas`). ``record`` notes which steps break the telescoping;
only windows holding such a step add their steps one by one. Bucket counts and ``_count`` come
out exactly as the sum of the steps would give them (they are integers); ``_sum`` and fractional
counters may differ from it in the last bits, subtracted rather than added up.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import add
from typing import Any, Final, Generic, TypeVar

from autoscaler.bucket_deltas import Delta, Point, combine, merge_pods, point, regular, step, telescoped

#: Latency histograms (short names): the Triton model's (docs/metrics.md), and Triton's queue time
#: (``autoscaler.collect.backends``).
LATENCY_HISTOGRAMS: Final[tuple[str, ...]] = ("request", "pertoken", "ttft", "itl", "queue")
#: Counters whose increase over the window is summed over pods (the planner's mix of lengths;
#: ``finished_tokens``, the tokens of the requests that finished, where a backend derives per-token
#: latency from them).
COUNTERS: Final[tuple[str, ...]] = ("prompt_tokens", "generation_tokens", "finished", "finished_tokens")


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are ``(upper bound, cumulative count)``, ``+Inf`` last.

    ``columns``: the same buckets as ``(bounds, counts)``, when whoever made the histogram had them
    so (:meth:`of_columns`; the exposition parser does), sparing the aggregator splitting the pairs
    again every round. Not part of the value: equality and ``repr`` ignore it.
    """

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float
    columns: tuple[tuple[float, ...], tuple[float, ...]] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_columns(cls, bounds: tuple[float, ...], counts: tuple[float, ...], total: float, count: float) -> Histogram:
        """From bounds and their cumulative counts, in the same order; sorted by bound if they are not."""
        if all(map(operator.lt, bounds, bounds[1:])):
            return cls(tuple(zip(bounds, counts, strict=True)), total, count, (bounds, counts))
        return cls(tuple(sorted(zip(bounds, counts, strict=True))), total, count)

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
    """Observations finished inside the window; seconds; ``mean`` and quantiles NaN when ``count == 0``.

    ``buckets``: the window's cumulative ``(le, count)`` pairs they come from, for :meth:`share_over` (empty
    where only a mean is known). Not part of the value: equality and ``repr`` ignore it.
    """

    count: float
    mean: float
    p50: float
    p90: float
    p99: float
    buckets: tuple[tuple[float, float], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def empty(cls) -> LatencyStats:
        return cls(0.0, math.nan, math.nan, math.nan, math.nan)

    def share_over(self, limit: float) -> float:
        """The share of the window's observations above ``limit`` s; NaN without buckets or observations.

        Exact where ``limit`` is a bucket bound (the model puts bounds at the SLO's usual limits); inside a
        bucket, interpolated linearly as ``histogram_quantile`` does, the first bucket starting at 0; above
        the highest finite bound, what the ``+Inf`` bucket holds counts as over it.
        """
        pairs = self.buckets
        if len(pairs) < 2 or pairs[-1][1] <= 0:
            return math.nan
        total = pairs[-1][1]
        lower, below = 0.0, 0.0
        for le, cumulative in pairs:
            if limit <= le:
                if math.isinf(le):
                    within = below
                elif le <= lower:
                    within = cumulative
                else:
                    within = below + (cumulative - below) * (limit - lower) / (le - lower)
                return max(total - within, 0.0) / total
            lower, below = le, cumulative
        return max(total - below, 0.0) / total


@dataclass(frozen=True)
class PodWindow:
    """One pod's part of a window: the requests it finished in it (the most any of its latency
    histograms or its ``finished`` counter counted), what it runs and queues now, and whether it
    reported through the whole window (a pod that appeared inside it has not had a window to serve)."""

    finished: float
    running: float
    waiting: float
    whole_window: bool


@dataclass(frozen=True)
class WindowStats:
    """What the policies see. ``pods`` counts pods with a fresh sample; ``span`` the seconds covered;
    ``counters`` the increase of each of :data:`COUNTERS` inside the window (absent: not reported);
    ``per_pod`` each fresh pod's own part, by pod (absent where a source sees only the fleet's sums)."""

    latencies: Mapping[str, LatencyStats]
    gauges: Mapping[str, float]
    pods: int
    span: float
    counters: Mapping[str, float] = field(default_factory=dict)
    per_pod: Mapping[str, PodWindow] = field(default_factory=dict)
    recent: WindowStats | None = field(default=None, compare=False, repr=False)
    """The same over the last round alone (since the samples recorded before the newest), where the source
    keeps every round's samples (the direct scrape, the simulator): a burst shorter than the window at its
    own rate. None where it cannot be had (a Prometheus range shorter than its scrapes)."""

    def latency(self, name: str) -> LatencyStats:
        return self.latencies.get(name) or LatencyStats.empty()

    @classmethod
    def empty(cls) -> WindowStats:
        return cls(latencies={}, gauges={}, pods=0, span=0.0)


def nearest_rank(q: float, ordered: Sequence[float]) -> float:
    """The ``q`` quantile of sorted, non-empty ``ordered`` by nearest rank: a value it holds."""
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus's ``histogram_quantile`` on cumulative ``(le, count)`` pairs; NaN when empty.

    Linear interpolation inside the bucket holding the rank; the first bucket starts at 0; a rank in
    the ``+Inf`` bucket returns the highest finite bound (there is nothing to interpolate towards).
    Fewer than two buckets (a mean-only latency is its ``+Inf`` bucket alone) is NaN, as in Prometheus.
    """
    pairs = sorted(buckets)
    if len(pairs) < 2 or pairs[-1][1] <= 0:
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
        buckets=tuple(pairs),
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


P = TypeVar("P")


class _Kind(Generic[P]):
    """The arithmetic of one kind of series: whether a step telescopes, the telescoped increase (last
    value minus first), one step's increase, and the sum of two increases."""

    def __init__(
        self,
        regular: Callable[[P, P], bool],
        telescoped: Callable[[P, P], Any],
        step: Callable[[P, P], Any],
        add: Callable[[Any, Any], Any],
    ) -> None:
        self.regular, self.telescoped, self.step, self.add = regular, telescoped, step, add


def _counter_step(before: float, after: float) -> float:
    return after - before if after >= before else after  # a smaller value: restarted, counted from 0


_HISTOGRAM: Final = _Kind[Point](regular, telescoped, step, combine)
_COUNTER: Final = _Kind[float](operator.le, lambda first, last: last - first, _counter_step, add)


class _Series(Generic[P]):
    """One pod's held finite values of one series (histogram points, or counter values), oldest
    first, each with its sample's sequence number and whether the step into it from the one before
    breaks the telescoping (a restart, a bucket or counter that went down, other bounds). Without a
    break in a window, the sum of its steps is its last value minus its first."""

    __slots__ = ("breaks", "points")

    def __init__(self) -> None:
        self.points: deque[tuple[int, P, bool]] = deque()
        self.breaks = 0

    def add(self, seq: int, value: P, kind: _Kind[P]) -> None:
        broken = bool(self.points) and not kind.regular(self.points[-1][1], value)
        self.points.append((seq, value, broken))
        self.breaks += broken

    def drop_before(self, seq: int) -> None:
        points = self.points
        while points and points[0][0] < seq:
            self.breaks -= points.popleft()[2]

    def increase(self, first: int, last: int, whole: bool, kind: _Kind[P]) -> Any:
        """The sum of the steps between the values of samples ``first`` to ``last`` (None without two
        values there); ``whole``: that range holds every value held, as in the usual round."""
        points = self.points if whole else deque(p for p in self.points if first <= p[0] <= last)
        if len(points) < 2:
            return None
        breaks = self.breaks if whole else sum(broken for _, _, broken in points)
        if breaks == points[0][2]:  # the step into the first value is outside the range
            return kind.telescoped(points[0][1], points[-1][1])
        values = [value for _, value, _ in points]
        total = kind.step(values[0], values[1])
        for before, after in zip(values[1:], values[2:], strict=False):
            total = kind.add(total, kind.step(before, after))
        return total


class _PodHistory:
    """One pod's held samples (time, sequence number, finite gauges) and its series' held values.

    The first held sample is the window's baseline (the newest at or before the window start); each
    series' values are held from it on.
    """

    __slots__ = ("counters", "histograms", "next_seq", "samples")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int, dict[str, float]]] = deque()
        self.next_seq = 0
        self.histograms: dict[str, _Series[Point]] = {}
        self.counters: dict[str, _Series[float]] = {}

    def add(self, now: float, sample: PodSample) -> None:
        seq = self.next_seq
        self.next_seq += 1
        gauges = {name: v for name, v in sample.gauges.items() if math.isfinite(v)}
        self.samples.append((now, seq, gauges))
        for name in LATENCY_HISTOGRAMS:
            histogram = sample.histograms.get(name)
            if histogram is None:
                continue
            p = point(histogram.buckets, histogram.sum, histogram.count, histogram.columns)
            if p is not None:
                series = self.histograms.get(name)
                if series is None:
                    series = self.histograms[name] = _Series()
                series.add(seq, p, _HISTOGRAM)
        for name in COUNTERS:
            value = sample.counters.get(name, math.nan)
            if math.isfinite(value):
                counter = self.counters.get(name)
                if counter is None:
                    counter = self.counters[name] = _Series()
                counter.add(seq, value, _COUNTER)

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
                histogram.drop_before(held_from)
            for counter in self.counters.values():
                counter.drop_before(held_from)
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


class WindowAggregator:
    """Keeps each pod's samples for ``time_window`` seconds and reduces them to :class:`WindowStats`.

    ``stale_after`` (seconds) decides when a pod's gauges stop counting; give it about two scrape
    intervals. ``time_window`` may be changed between calls (a config reload).

    Incremental: ``record`` adds each pod's new values and drops what left the window; ``window``
    takes each pod's increase, last value minus first unless a step in the window breaks that, and
    adds up the pods. A round costs O(pods), not O(pods x samples held). A ``window`` whose range is
    not the one the last ``record`` kept (an earlier ``now``, a shorter ``time_window``) picks that
    range's values first, O(samples held) for the pods concerned.
    """

    def __init__(self, time_window: float, stale_after: float) -> None:
        if time_window <= 0 or stale_after <= 0:
            raise ValueError(f"time_window ({time_window}) and stale_after ({stale_after}) must be > 0")
        self.time_window = time_window
        self.stale_after = stale_after
        self._pods: dict[str, _PodHistory] = {}
        self._rounds: deque[float] = deque(maxlen=2)

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
        if not self._rounds or now > self._rounds[-1]:
            self._rounds.append(now)
        start = now - self.time_window
        for pod in [p for p, history in self._pods.items() if not history.prune(start)]:
            del self._pods[pod]  # gone for a whole window: nothing of it is left to count

    def window(self, now: float) -> WindowStats:
        """Statistics of what finished in ``(now - time_window, now]``, and current gauges; ``recent``, the
        same since the round recorded before the newest (at or before ``now``)."""
        main = self._stats(now, now - self.time_window)
        rounds = [t for t in self._rounds if t <= now]
        if len(rounds) == 2 and rounds[0] > now - self.time_window:
            return replace(main, recent=self._stats(now, rounds[0]))
        return main

    def _stats(self, now: float, start: float) -> WindowStats:
        deltas: dict[str, list[Delta]] = {}
        counters: dict[str, float] = {}
        gauge_values: dict[str, list[float]] = {}
        per_pod: dict[str, PodWindow] = {}
        earliest = now
        for pod, history in self._pods.items():
            first, last = history.usable(now, start)
            if last < 0:
                continue
            samples = history.samples
            if last > first:
                earliest = min(earliest, max(samples[first][0], start))
            whole = first == 0 and last == len(samples) - 1
            from_seq, to_seq = samples[first][1], samples[last][1]
            finished = 0.0
            for name, series in history.histograms.items():
                delta = series.increase(from_seq, to_seq, whole, _HISTOGRAM)
                if delta is not None:
                    deltas.setdefault(name, []).append(delta)
                    finished = max(finished, delta.n)
            for name, counter in history.counters.items():
                increase = counter.increase(from_seq, to_seq, whole, _COUNTER)
                if increase is not None:
                    counters[name] = counters.get(name, 0.0) + increase
                    if name == "finished":
                        finished = max(finished, increase)
            latest_t, _, gauges = samples[last]
            if now - latest_t <= self.stale_after:
                for name, value in gauges.items():
                    gauge_values.setdefault(name, []).append(value)
                per_pod[pod] = PodWindow(
                    finished, gauges.get("running", 0.0), gauges.get("waiting", 0.0), samples[first][0] <= start
                )
        latencies = {name: latency_stats(*merge_pods(pods)) for name, pods in deltas.items()}
        gauges_now = {
            name: (sum(values) / len(values) if name == "kv_usage" else sum(values))
            for name, values in gauge_values.items()
        }
        return WindowStats(
            latencies=latencies, gauges=gauges_now, pods=len(per_pod), span=now - earliest, counters=counters,
            per_pod=per_pod,
        )  # fmt: skip
