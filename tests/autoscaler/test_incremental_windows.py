"""The incremental WindowAggregator against the reference (the code that reduced every held sample
each round), on randomized fleets: restarts, pods appearing, leaving and coming back, NaN and Inf,
non-monotonic buckets, bounds that change, late and repeated times, windows asked at other times,
a time_window changed between rounds.

What must agree exactly: every bucket count, hence every quantile, each ``_count``, the pods, the span
and the gauges. ``_sum`` and counter increases agree exactly when they are integers (Prometheus's
bucket counts and token counters are), and within 1e-9 relative otherwise: a window without a
restart takes the last value minus the first where the reference added up the differences between
consecutive samples, and the two round differently in the last bits.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from autoscaler.aggregate import COUNTERS, Histogram, LatencyStats, PodSample, WindowAggregator, WindowStats
from benchmarks.reference_window import ReferenceWindowAggregator

INF = math.inf
LAYOUTS = [(0.01, 0.02, 0.05, 0.1, INF), (0.01, 0.05, 0.1, 0.5, INF), (0.02, 0.1, INF)]
HISTOGRAMS = ("request", "pertoken", "ttft", "itl")


@dataclass
class RandomPod:
    """A pod whose counts grow by random observations; ``sample`` sometimes corrupts what it reports."""

    rng: random.Random
    fractional: bool
    layout: tuple[float, ...] = LAYOUTS[0]
    counts: dict[str, list[float]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.restart()
        for _ in range(self.rng.randrange(3)):  # history from before anyone watched
            self.serve()

    def restart(self) -> None:
        self.layout = self.rng.choice(LAYOUTS) if self.rng.random() < 0.3 else self.layout
        self.counts = {name: [0.0] * len(self.layout) for name in HISTOGRAMS}
        self.sums = dict.fromkeys(HISTOGRAMS, 0.0)
        self.counters = dict.fromkeys(COUNTERS, 0.0)

    def serve(self) -> None:
        for name in self.rng.sample(HISTOGRAMS, self.rng.randrange(len(HISTOGRAMS) + 1)):
            for _ in range(self.rng.randrange(6)):
                seconds = self.rng.expovariate(20.0)
                index = next(i for i, le in enumerate(self.layout) if seconds <= le)
                self.counts[name][index] += 1
                self.sums[name] += seconds
        for name in COUNTERS:
            step = self.rng.uniform(0, 50) if self.fractional else self.rng.randrange(50)
            self.counters[name] += step

    def sample(self) -> PodSample:
        rng = self.rng
        histograms = {}
        for name in HISTOGRAMS:
            if rng.random() < 0.05:
                continue  # the family is missing from this scrape
            cumulative, acc = [], 0.0
            for c in self.counts[name]:
                acc += c
                cumulative.append(acc)
            if rng.random() < 0.05 and len(cumulative) > 1:
                cumulative[0] = cumulative[1] + 1  # a scrape racing an update: not monotonic
            total, count = self.sums[name], acc
            corrupt = rng.random()
            if corrupt < 0.03:
                cumulative[rng.randrange(len(cumulative))] = math.nan
            elif corrupt < 0.05:
                total = rng.choice([math.nan, INF])
            elif corrupt < 0.08:
                count = max(0.0, count - rng.randrange(1, 4))  # _count read before the buckets' update
            pairs = list(zip(self.layout, cumulative, strict=True))
            rng.shuffle(pairs) if rng.random() < 0.05 else None  # unsorted exposition
            histograms[name] = Histogram(tuple(pairs), total, count)
        counters = {n: v for n, v in self.counters.items() if rng.random() > 0.05}
        if counters and rng.random() < 0.03:
            counters[rng.choice(list(counters))] = math.nan
        gauges = {"running": float(rng.randrange(5)), "waiting": float(rng.randrange(3)), "kv_usage": rng.random()}
        if rng.random() < 0.05:
            gauges[rng.choice(list(gauges))] = rng.choice([math.nan, INF])
        return PodSample(histograms=histograms, gauges=gauges, counters=counters)


def same_float(got: float, want: float, exact: bool) -> bool:
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    return got == want if exact else got == pytest.approx(want, rel=1e-9, abs=0.0)


def assert_same(got: WindowStats, want: WindowStats, where: str, integer_counters: bool) -> None:
    assert (got.pods, got.span, dict(got.gauges)) == (want.pods, want.span, dict(want.gauges)), where
    assert set(got.latencies) == set(want.latencies), where
    for name, mine in got.latencies.items():
        ref: LatencyStats = want.latencies[name]
        for stat in ("count", "p50", "p90", "p99"):
            assert same_float(getattr(mine, stat), getattr(ref, stat), exact=True), f"{where} {name}.{stat}"
        assert same_float(mine.mean, ref.mean, exact=False), f"{where} {name}.mean"
    assert set(got.counters) == set(want.counters), where
    for name, value in got.counters.items():
        assert same_float(value, want.counters[name], exact=integer_counters), f"{where} counter {name}"


def run_fleet(seed: int, rounds: int, fractional: bool) -> Counter[str]:
    """Drives both aggregators through one random history, comparing every window; counts the odd
    events the history had, so a test can show they happened."""
    rng = random.Random(seed)
    events: Counter[str] = Counter()
    incremental = WindowAggregator(time_window=60, stale_after=12)
    reference = ReferenceWindowAggregator(time_window=60, stale_after=12)
    pods: dict[str, RandomPod] = {}
    away: dict[str, RandomPod] = {}
    next_id, now = 0, 0.0
    for round_no in range(rounds):
        if rng.random() < 0.15 or not pods:
            pods[f"pod-{next_id}"] = RandomPod(rng, fractional)
            next_id += 1
        if pods and rng.random() < 0.05:
            name = rng.choice(list(pods))
            away[name] = pods.pop(name)  # leaves (its samples stay until they age out)
        if away and rng.random() < 0.05:
            name = rng.choice(list(away))
            pods[name] = away.pop(name)  # comes back under the same name
            events["comes back"] += 1
        for pod in pods.values():
            if rng.random() < 0.03:
                pod.restart()
                events["restart"] += 1
            if rng.random() < 0.8:
                pod.serve()
        if rng.random() < 0.05:
            window = float(rng.choice([10, 20, 30, 60, 90]))
            incremental.time_window = reference.time_window = window
            events["time_window changed"] += 1
        late = rng.random() < 0.03
        now += -3.0 if late else rng.choice([0.0, 1.0, 2.5, 5.0, 5.0, 5.0, 7.0, 30.0])
        events["late round"] += late
        snapshot = {name: pod.sample() for name, pod in pods.items() if rng.random() < 0.9}
        histograms = [h for sample in snapshot.values() for h in sample.histograms.values()]
        events["NaN or Inf"] += sum(not h.is_finite() for h in histograms)
        events["bounds differ"] += len({tuple(sorted(le for le, _ in h.buckets)) for h in histograms}) > 1
        forgotten = set(reference.pods)
        incremental.record(now, snapshot)
        reference.record(now, snapshot)
        events["pod forgotten"] += len(forgotten - set(reference.pods))
        assert incremental.pods == reference.pods
        for at in (now, now + rng.choice([1.0, 2.5, 5.0]), now + rng.uniform(0, 40), now - rng.uniform(0, 15)):
            where = f"seed {seed} round {round_no} window({at:.2f}) of {incremental.time_window:g} s"
            want = reference.window(at)
            assert_same(incremental.window(at), want, where, integer_counters=not fractional)
            events["windows"] += 1
            events["window without latencies"] += not want.latencies
            events["stale pods"] += want.pods < len(pods)
    return events


ODD_EVENTS = (
    "comes back", "restart", "time_window changed", "late round", "NaN or Inf", "bounds differ",
    "pod forgotten", "window without latencies", "stale pods",
)  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_incremental_windows_equal_the_reference(seed):
    events = run_fleet(seed, rounds=150, fractional=False)
    assert events["windows"] == 600
    assert [e for e in ODD_EVENTS if not events[e]] == [], "the history lacks these cases"


@pytest.mark.parametrize("seed", range(2))
def test_fractional_counters_agree_within_rounding(seed):
    assert run_fleet(100 + seed, rounds=150, fractional=True)["windows"] == 600
