"""Windowed statistics: quantiles from buckets, timelines of pods, and a table of odd inputs."""

from __future__ import annotations

import math

import pytest
from autoscaler_testkit import FakePod

from autoscaler.aggregate import Histogram, PodSample, WindowAggregator, latency_stats, quantile

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "want"),
    [
        (0.5, [], math.nan),
        (0.5, [(1.0, 0.0), (INF, 0.0)], math.nan),
        (0.5, [(1.0, 10.0), (2.0, 10.0), (INF, 10.0)], 0.5),
        (0.5, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], 1.5),
        (0.9, [(0.02, 0.0), (0.025, 10.0), (INF, 10.0)], 0.0245),
        (0.99, [(1.0, 5.0), (INF, 10.0)], 1.0),
        (0.5, [(INF, 10.0), (1.0, 10.0)], 0.5),
        (1.0, [(1.0, 4.0), (2.0, 4.0), (INF, 4.0)], 1.0),
    ],
    ids=["empty", "zero-count", "first-bucket", "second-bucket", "thesis-edge", "in-inf", "unsorted", "q=1"],
)
def test_quantile_matches_histogram_quantile(q, buckets, want):
    got = quantile(q, buckets)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)


def test_latency_stats_repairs_non_monotonic_buckets():
    stats = latency_stats([(1.0, 6.0), (2.0, 5.0), (INF, 10.0)], total=12.0, count=10.0)
    assert stats.mean == pytest.approx(1.2)
    assert stats.p50 == pytest.approx(5 / 6)
    assert latency_stats([], 0.0, 0.0).count == 0


def sample_of(pod: FakePod) -> PodSample:
    return pod.sample()


def test_window_counts_only_what_finished_inside_it():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod()
    agg.record(0, {"a": pod.sample()})
    assert agg.window(0).latency("pertoken").count == 0  # a first sample is only a baseline
    pod.observe("pertoken", 0.030, n=10)
    agg.record(5, {"a": pod.sample()})
    stats = agg.window(5).latency("pertoken")
    assert stats.count == 10
    assert stats.mean == pytest.approx(0.030)
    assert 0.025 < stats.p50 <= 0.030  # interpolated inside the (25 ms, 30 ms] bucket
    for t in range(10, 70, 5):
        agg.record(t, {"a": pod.observe("pertoken", 0.010).sample()})
    late = agg.window(65).latency("pertoken")
    assert late.count == 12  # the burst at t=5 left the window
    assert late.mean == pytest.approx(0.010)


def test_the_last_round_alone_is_the_windows_recent_part():
    """A burst of 40 in the last of twelve 5 s rounds: the window averages it over a minute, its recent part
    holds it over the 5 s it came in, summed over the pods."""
    agg = WindowAggregator(time_window=60, stale_after=10)
    a, b = FakePod(), FakePod()
    agg.record(0, {"a": a.sample(), "b": b.sample()})
    assert agg.window(0).recent is None  # one round: nothing before it
    for t in range(5, 60, 5):
        agg.record(t, {"a": a.observe("ttft", 0.1).sample(), "b": b.sample()})
    agg.record(60, {"a": a.observe("ttft", 0.1, n=30).sample(), "b": b.observe("ttft", 0.1, n=10).sample()})
    win = agg.window(60)
    assert (win.latency("ttft").count, win.span) == (11 + 40, 60)
    assert win.recent is not None
    assert (win.recent.latency("ttft").count, win.recent.span, win.recent.pods) == (40, 5, 2)
    assert win.recent.recent is None
    assert agg.window(57).recent is None  # asked before the newest round: no round before it is the last


def test_pods_are_summed():
    agg = WindowAggregator(time_window=60, stale_after=10)
    a, b = FakePod(), FakePod()
    agg.record(0, {"a": a.sample(), "b": b.sample()})
    a.observe("pertoken", 0.010, 3)
    b.observe("pertoken", 0.050, 1)
    a.gauges.update(running=2, waiting=1, kv_usage=0.2)
    b.gauges.update(running=3, waiting=0, kv_usage=0.6)
    agg.record(5, {"a": a.sample(), "b": b.sample()})
    win = agg.window(5)
    assert win.pods == 2
    assert win.latency("pertoken").count == 4
    assert win.latency("pertoken").mean == pytest.approx(0.020)
    assert win.gauges == {"running": 5, "waiting": 1, "kv_usage": pytest.approx(0.4)}
    assert win.span == 5


def test_counter_reset_counts_the_new_value():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod().observe("request", 1.0, 50)
    agg.record(0, {"a": pod.sample()})
    pod.observe("request", 1.0, 10)
    agg.record(5, {"a": pod.sample()})
    pod.restart().observe("request", 0.3, 4)  # the pod restarted and has finished 4 since
    agg.record(10, {"a": pod.sample()})
    stats = agg.window(10).latency("request")
    assert stats.count == 14
    assert stats.mean == pytest.approx((10 * 1.0 + 4 * 0.3) / 14)


def test_a_pod_that_appears_starts_from_its_first_sample():
    agg = WindowAggregator(time_window=60, stale_after=10)
    old = FakePod()
    agg.record(0, {"a": old.sample()})
    new = FakePod().observe("pertoken", 0.5, 1000)  # history from before we watched: not ours
    agg.record(5, {"a": old.sample(), "b": new.sample()})
    new.observe("pertoken", 0.020, 2)
    agg.record(10, {"a": old.sample(), "b": new.sample()})
    stats = agg.window(10).latency("pertoken")
    assert stats.count == 2
    assert stats.mean == pytest.approx(0.020)


def test_a_pod_that_leaves_keeps_its_finished_requests_but_not_its_gauges():
    agg = WindowAggregator(time_window=60, stale_after=10)
    a, b = FakePod(), FakePod()
    agg.record(0, {"a": a.sample(), "b": b.sample()})
    b.observe("pertoken", 0.040, 5).gauges.update(running=4)
    agg.record(5, {"a": a.sample(), "b": b.sample()})
    for t in (10, 15, 20):
        agg.record(t, {"a": a.sample()})
    win = agg.window(20)
    assert win.latency("pertoken").count == 5
    assert win.pods == 1
    assert win.gauges["running"] == 0
    agg.record(70, {"a": a.sample()})
    assert agg.pods == ["a"]  # b's last sample is a whole window old: forgotten


def test_stale_data_is_no_data():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod()
    agg.record(0, {"a": pod.sample()})
    agg.record(5, {"a": pod.sample()})
    assert agg.window(5).pods == 1
    assert agg.window(30).pods == 0  # the source went down 25 s ago
    assert agg.window(30).gauges == {}


def test_time_window_can_change():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod()
    for t in range(0, 65, 5):
        agg.record(t, {"a": pod.observe("pertoken", 0.010).sample()})
    agg.time_window = 20
    assert agg.window(60).latency("pertoken").count == 4
    assert agg.window(60).span == 20


def test_late_sample_for_a_pod_is_dropped():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod()
    agg.record(10, {"a": pod.sample()})
    agg.record(5, {"a": pod.observe("pertoken", 1.0).sample()})
    assert agg.window(10).latency("pertoken").count == 0


def test_window_before_a_sample_ignores_it():
    agg = WindowAggregator(time_window=60, stale_after=10)
    pod = FakePod()
    agg.record(0, {"a": pod.sample()})
    agg.record(10, {"a": pod.observe("pertoken", 1.0).sample()})
    assert agg.window(5).latency("pertoken").count == 0


def hist(pairs, total, count):
    return Histogram(tuple(pairs), total, count)


@pytest.mark.parametrize(
    ("before", "after", "want_count", "want_mean"),
    [
        (hist([(1, 1), (INF, 2)], 2.0, 2), hist([(1, 3), (INF, 4)], 4.0, 4), 2, 1.0),
        (hist([(1, 1), (INF, 2)], 2.0, 2), hist([(1, math.nan), (INF, 4)], 4.0, 4), 0, None),
        (hist([(1, 1), (INF, 2)], 2.0, 2), hist([(1, 3), (INF, 4)], INF, 4), 0, None),
        (hist([(1, 5), (INF, 9)], 9.0, 9), hist([(1, 1), (INF, 1)], 0.5, 1), 1, 0.5),
        (hist([(1, 1), (INF, 2)], 2.0, 2), hist([(1, 1), (INF, 2)], 2.0, 2), 0, None),
        (hist([(0.5, 1), (INF, 2)], 2.0, 2), hist([(1, 3), (INF, 4)], 4.0, 4), 2, 1.0),
    ],
    ids=["plain", "nan-bucket", "inf-sum", "reset", "no-change", "bounds-changed"],
)
def test_odd_histograms(before, after, want_count, want_mean):
    agg = WindowAggregator(time_window=60, stale_after=10)
    agg.record(0, {"a": PodSample(histograms={"request": before})})
    agg.record(5, {"a": PodSample(histograms={"request": after})})
    stats = agg.window(5).latency("request")
    assert stats.count == want_count
    if want_mean is None:
        assert math.isnan(stats.mean)
    else:
        assert stats.mean == pytest.approx(want_mean)


@pytest.mark.parametrize(
    ("gauges", "want"),
    [
        ({"waiting": 3.0, "kv_usage": 0.5}, {"waiting": 3.0, "kv_usage": 0.5}),
        ({"waiting": math.nan, "kv_usage": 0.5}, {"kv_usage": 0.5}),
        ({"waiting": INF}, {}),
        ({}, {}),
    ],
    ids=["plain", "nan-gauge", "inf-gauge", "no-gauges"],
)
def test_odd_gauges(gauges, want):
    agg = WindowAggregator(time_window=60, stale_after=10)
    agg.record(0, {"a": PodSample(gauges=gauges)})
    assert dict(agg.window(0).gauges) == want


def test_merging_pods_with_different_bounds():
    agg = WindowAggregator(time_window=60, stale_after=10)
    a0 = hist([(1, 0), (INF, 0)], 0.0, 0)
    b0 = hist([(0.5, 0), (2, 0), (INF, 0)], 0.0, 0)
    agg.record(0, {"a": PodSample({"request": a0}), "b": PodSample({"request": b0})})
    a1 = hist([(1, 2), (INF, 2)], 1.0, 2)
    b1 = hist([(0.5, 1), (2, 2), (INF, 2)], 2.0, 2)
    agg.record(5, {"a": PodSample({"request": a1}), "b": PodSample({"request": b1})})
    stats = agg.window(5).latency("request")
    assert stats.count == 4
    # Merged cumulative: 1 at <= 0.5 s, 3 at <= 1 s (a has no 0.5 s bound); rank 2 interpolates.
    assert stats.p50 == pytest.approx(0.75)


def test_an_empty_snapshot_is_a_round_without_pods():
    agg = WindowAggregator(time_window=60, stale_after=10)
    agg.record(0, {})
    win = agg.window(0)
    assert (win.pods, win.span, dict(win.latencies)) == (0, 0, {})


def test_rejects_bad_construction():
    with pytest.raises(ValueError, match="must be > 0"):
        WindowAggregator(time_window=0, stale_after=10)


@pytest.mark.parametrize(
    ("bounds", "counts", "sorted_pairs", "kept"),
    [((0.1, 1.0, INF), (1.0, 2.0, 3.0), ((0.1, 1.0), (1.0, 2.0), (INF, 3.0)), True),
     ((1.0, 0.1, INF), (2.0, 1.0, 3.0), ((0.1, 1.0), (1.0, 2.0), (INF, 3.0)), False)],
    ids=["in-order", "out-of-order"],
)  # fmt: skip
def test_a_histogram_of_columns_is_the_same_value_and_windows_alike(bounds, counts, sorted_pairs, kept):
    made = Histogram.of_columns(bounds, counts, 1.5, 3.0)
    assert made == Histogram(sorted_pairs, 1.5, 3.0)
    assert (made.columns is not None) == kept
    windows = []
    for first, second in (
        (made, Histogram.of_columns(bounds, tuple(2 * c for c in counts), 3.0, 6.0)),
        (Histogram(sorted_pairs, 1.5, 3.0), Histogram(tuple((le, 2 * c) for le, c in sorted_pairs), 3.0, 6.0)),
    ):
        agg = WindowAggregator(time_window=60, stale_after=10)
        agg.record(0, {"a": PodSample({"request": first})})
        agg.record(5, {"a": PodSample({"request": second})})
        windows.append(agg.window(5).latency("request"))
    assert windows[0] == windows[1]
    assert windows[0].count == 3.0
