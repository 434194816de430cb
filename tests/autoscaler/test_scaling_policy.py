"""Policies as timelines on a fake clock, then each named step of the HPA algorithm alone."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from autoscaler_testkit import IDLE, NO_DATA, window

from autoscaler.aggregate import LatencyStats, WindowStats
from autoscaler.config import RateLimit, ScalerSpec, Signal
from autoscaler.decide import (
    Decision,
    PolicyState,
    allowed_change,
    bounds,
    combine,
    decide,
    proposal,
    rate_limit,
    ready_proposal,
    signal_value,
    stabilize,
)


class Scaler:
    """Keeps the policy state between rounds, as the control loop does."""

    def __init__(self, spec: ScalerSpec, replicas: int) -> None:
        self.spec = spec
        self.state = PolicyState.initial(replicas, 0.0)
        self.log: list[Decision] = []

    def at(self, now: float, win: WindowStats, starting: int = 0) -> Decision:
        """A round on ``win`` as every pod reports it but ``starting`` pods (not ready: no sample)."""
        if win.pods:
            win = replace(win, pods=max(self.state.replicas - starting, 1))
        decision, self.state = decide(win, self.spec, self.state, now)
        self.log.append(decision)
        return decision


def expect_scale(scaler: Scaler, now: float, win: WindowStats, want: int, starting: int = 0) -> Decision:
    decision = scaler.at(now, win, starting)
    assert decision.desired == want, f"t={now}: {decision.reason}"
    return decision


SPEC = ScalerSpec(max_deployment_count=8)


def test_scale_out_on_per_token_latency():
    scaler = Scaler(SPEC, replicas=1)
    decision = expect_scale(scaler, 0, window(pertoken_ms=50), want=2)
    assert decision.valid
    assert decision.values == {"pertoken_mean": pytest.approx(50)}
    assert "pertoken_mean 50 vs target 25" in decision.reason
    assert decision.reason.endswith("1 -> 2")
    expect_scale(scaler, 15, window(pertoken_ms=40), want=4)  # ceil(2 * 40 / 25)


def test_hold_inside_tolerance():
    scaler = Scaler(replace(SPEC, max_deployment_count=20), replicas=10)
    for t, ms in enumerate([27, 23, 27.4, 22.6, 25]):  # ratios within 1 +- 0.1
        decision = expect_scale(scaler, t * 5, window(pertoken_ms=ms), want=10)
        assert "within tolerance" in decision.reason
    expect_scale(scaler, 30, window(pertoken_ms=28), want=12)  # ratio 1.12: ceil(11.2)


def test_scale_down_waits_for_the_stabilization_window_then_removes_one_pod_a_minute():
    scaler = Scaler(SPEC, replicas=4)
    expect_scale(scaler, 0, window(pertoken_ms=25), want=4)
    for t in range(5, 300, 5):  # load fell: proposals of 1, held by the proposal of 4 at t=0
        decision = expect_scale(scaler, t, window(pertoken_ms=5), want=4)
    assert "stabilization window" in decision.reason
    # The defaults' scale_down {max_pods: 1, max_percent: 100, select: min}: one pod per 60 s.
    decision = expect_scale(scaler, 300, window(pertoken_ms=5), want=3)
    assert "rate limit allows 3" in decision.reason
    for t in range(305, 360, 5):
        expect_scale(scaler, t, window(pertoken_ms=5), want=3)
    expect_scale(scaler, 360, window(pertoken_ms=5), want=2)
    expect_scale(scaler, 420, window(pertoken_ms=5), want=1)


def test_select_max_removes_the_larger_of_pods_and_percent():
    """HPA's selectPolicy: Max, asked for explicitly: 100% of 4 is larger than 1 pod."""
    spec = replace(SPEC, stabilization_window=0, scale_down=RateLimit(1, 100, 60, select="max"))
    expect_scale(Scaler(spec, replicas=4), 0, window(pertoken_ms=5), want=1)


def test_scale_down_after_a_metrics_outage_waits_a_window_of_data():
    """Reported: 4 -> 1 in the round the metrics came back. Rounds without data count as holding."""
    scaler = Scaler(replace(SPEC, stabilization_window=60), replicas=4)
    expect_scale(scaler, 0, window(pertoken_ms=25), want=4)
    for t in range(5, 600, 5):  # a long outage: the proposal of 4 at t=0 is long out of the window
        expect_scale(scaler, t, NO_DATA, want=4)
    for t in range(600, 655, 5):  # data again, load low: held by the no-data rounds until t=655
        expect_scale(scaler, t, window(pertoken_ms=5), want=4)
    expect_scale(scaler, 655, window(pertoken_ms=5), want=3)


def test_stabilized_scale_down_is_rate_limited_one_pod_a_minute():
    spec = replace(SPEC, stabilization_window=30, scale_down=RateLimit(max_pods=1, max_percent=0, period=60))
    scaler = Scaler(spec, replicas=4)
    expect_scale(scaler, 0, window(pertoken_ms=25), want=4)
    expect_scale(scaler, 30, window(pertoken_ms=5), want=3)
    expect_scale(scaler, 60, window(pertoken_ms=5), want=3)  # one pod removed in the last 60 s
    expect_scale(scaler, 91, window(pertoken_ms=5), want=2)
    expect_scale(scaler, 152, window(pertoken_ms=5), want=1)
    expect_scale(scaler, 300, window(pertoken_ms=5), want=1)  # min_deployment_count


def test_no_data_holds():
    scaler = Scaler(SPEC, replicas=3)
    decision = expect_scale(scaler, 0, NO_DATA, want=3)
    assert not decision.valid
    assert "no data" in decision.reason and "holding 3" in decision.reason
    # Requests in flight but none finished: latency unknown, not zero.
    decision = expect_scale(scaler, 5, window(running=4), want=3)
    assert not decision.valid
    # The source comes back: scaling resumes.
    expect_scale(scaler, 10, window(pertoken_ms=50), want=6)


def test_idle_pods_scale_in_to_min_after_stabilization():
    scaler = Scaler(replace(SPEC, min_deployment_count=1, stabilization_window=60), replicas=3)
    expect_scale(scaler, 0, window(pertoken_ms=25), want=3)
    expect_scale(scaler, 30, IDLE, want=3)
    decision = expect_scale(scaler, 60, IDLE, want=2)
    assert decision.values == {"pertoken_mean": 0.0}
    expect_scale(scaler, 115, IDLE, want=2)
    expect_scale(scaler, 120, IDLE, want=1)


def test_bounds():
    scaler = Scaler(SPEC, replicas=2)
    decision = expect_scale(scaler, 0, window(pertoken_ms=500), want=6)  # rate limit: 2 + 4 pods
    assert "rate limit allows 6" in decision.reason
    expect_scale(scaler, 15, window(pertoken_ms=500), want=8)  # max_deployment_count
    scaler = Scaler(replace(SPEC, min_deployment_count=2, stabilization_window=0), replicas=3)
    expect_scale(scaler, 0, IDLE, want=2)


@pytest.mark.parametrize(
    ("replicas", "win", "want"),
    [(0, NO_DATA, 1), (9, NO_DATA, 8), (0, window(pertoken_ms=50), 2)],
    ids=["below-min-without-data", "above-max-without-data", "from-zero"],
)
def test_bounds_apply_even_without_data(replicas, win, want):
    decision = Scaler(SPEC, replicas=replicas).at(0, win)
    assert decision.desired == want, decision.reason


def test_scale_up_rate_limit_counts_pods_added_in_the_period():
    spec = replace(SPEC, scale_up=RateLimit(max_pods=1, max_percent=0, period=15))
    scaler = Scaler(spec, replicas=1)
    expect_scale(scaler, 0, window(pertoken_ms=100), want=2)
    expect_scale(scaler, 5, window(pertoken_ms=100), want=2)
    expect_scale(scaler, 10, window(pertoken_ms=100), want=2)
    expect_scale(scaler, 16, window(pertoken_ms=100), want=3)


def test_scale_up_rate_limit_by_percent():
    spec = replace(SPEC, max_deployment_count=20, scale_up=RateLimit(max_pods=0, max_percent=50, period=60))
    expect_scale(Scaler(spec, replicas=4), 0, window(pertoken_ms=100), want=6)


def test_both_limits_zero_disable_that_direction():
    spec = replace(SPEC, stabilization_window=0, scale_down=RateLimit(max_pods=0, max_percent=0, period=60))
    scaler = Scaler(spec, replicas=4)
    expect_scale(scaler, 0, IDLE, want=4)
    expect_scale(scaler, 100, window(pertoken_ms=50), want=8)


def test_request_policy_is_the_thesis_baseline():
    spec = ScalerSpec(type="request", threshold=2000, max_deployment_count=8)
    scaler = Scaler(spec, replicas=1)
    decision = expect_scale(scaler, 0, window(pertoken_ms=100, request_ms=5000), want=3)
    assert set(decision.values) == {"request_mean"}


def test_signals_combine_by_max():
    spec = replace(SPEC, signals=(Signal("ttft_p99", 2000), Signal("waiting_per_replica", 3)))
    decision = Scaler(spec, replicas=2).at(0, window(pertoken_ms=26, ttft_ms=3000, waiting=2))
    assert decision.desired == 3, decision.reason
    assert "ttft_p99 proposes 3" in decision.reason
    decision = Scaler(spec, replicas=2).at(0, window(pertoken_ms=26, ttft_ms=2000, waiting=12))
    assert decision.desired == 4, decision.reason  # 12 waiting / 2 replicas = 6 per replica, target 3


def test_scale_down_refused_while_a_signal_has_no_data():
    spec = replace(SPEC, stabilization_window=0, signals=(Signal("kv_usage", 0.8),))
    scaler = Scaler(spec, replicas=4)
    decision = expect_scale(scaler, 0, window(pertoken_ms=5), want=4)
    assert "no data for kv_usage" in decision.reason
    expect_scale(scaler, 5, window(pertoken_ms=50), want=8)  # scaling up on the others still works
    expect_scale(scaler, 10, window(pertoken_ms=5, kv_usage=0.1), want=7)  # one pod per period


def test_kv_usage_is_a_utilization():
    spec = replace(SPEC, signals=(Signal("kv_usage", 0.6),))
    decision = Scaler(spec, replicas=2).at(0, window(pertoken_ms=25, kv_usage=0.9))
    assert decision.desired == 3, decision.reason


def test_manual_change_is_taken_as_the_new_current():
    scaler = Scaler(SPEC, replicas=2)
    expect_scale(scaler, 0, window(pertoken_ms=25), want=2)
    scaler.state = scaler.state.with_replicas(5)  # a person scaled the Deployment
    decision = expect_scale(scaler, 5, window(pertoken_ms=25), want=5)
    assert decision.current == 5


def test_manual_scale_up_stands_for_the_stabilization_window():
    """Reported: a manual 1 -> 3 was undone in the next round. It now counts as a proposal."""
    scaler = Scaler(replace(SPEC, stabilization_window=120), replicas=1)
    for t in range(0, 200, 5):  # idle for long: every proposal in the window is 1
        expect_scale(scaler, t, IDLE, want=1)
    scaler.state = scaler.state.with_replicas(3)  # kubectl scale --replicas=3, seen at t=200
    decision = expect_scale(scaler, 200, IDLE, want=3)
    assert "3, set by someone else, counts as a proposal" in decision.reason
    for t in range(205, 320, 5):
        expect_scale(scaler, t, IDLE, want=3)
    expect_scale(scaler, 320, IDLE, want=2)  # the window has passed: one pod a minute from here
    expect_scale(scaler, 375, IDLE, want=2)
    expect_scale(scaler, 380, IDLE, want=1)


def test_observing_the_count_the_policy_chose_is_not_a_manual_change():
    scaler = Scaler(replace(SPEC, stabilization_window=0), replicas=1)
    expect_scale(scaler, 0, window(pertoken_ms=50), want=2)
    scaler.state = scaler.state.with_replicas(2)  # the actuator did what was decided
    assert scaler.state.changed_to is None
    decision = expect_scale(scaler, 5, IDLE, want=1)
    assert "someone else" not in decision.reason


@pytest.mark.parametrize(
    ("win", "metric", "want"),
    [
        (NO_DATA, "pertoken_mean", None),
        (window(pertoken_ms=30), "pertoken_mean", 30.0),
        (window(pertoken_ms=30), "pertoken_p99", 30.0),
        (window(pertoken_ms=30), "request_mean", None),
        (IDLE, "request_p90", 0.0),
        (window(running=2), "pertoken_mean", None),
        (WindowStats({"pertoken": LatencyStats(3, math.nan, 1, 1, 1)}, {}, 1, 60), "pertoken_mean", None),
        (WindowStats({"pertoken": LatencyStats(3, math.inf, 1, 1, 1)}, {}, 1, 60), "pertoken_mean", None),
        (window(waiting=9), "waiting_per_replica", 3.0),
        (WindowStats({}, {}, 1, 60), "waiting_per_replica", None),
        (window(kv_usage=0.5), "kv_usage", 0.5),
        (window(), "kv_usage", None),
    ],
    ids=[
        "no-pods", "mean-ms", "p99-ms", "other-family-missing", "idle-is-zero", "in-flight-is-unknown",
        "nan-mean", "inf-mean", "waiting-per-replica", "waiting-gauge-missing", "kv", "kv-missing",
    ],
)
def test_signal_value(win, metric, want):
    got = signal_value(win, metric, replicas=3)
    assert got == (None if want is None else pytest.approx(want))


@pytest.mark.parametrize(
    ("current", "value", "target", "want"),
    [(2, 50, 25, 4), (2, 27, 25, 2), (2, 27.6, 25, 3), (4, 5, 25, 1), (4, 0, 25, 0), (0, 50, 25, 2),
     (3, 25, 25, 3)],  # fmt: skip
    ids=["double", "in-tolerance", "just-out", "quarter", "zero", "from-zero", "on-target"],
)
def test_proposal(current, value, target, want):
    assert proposal(current, value, target, tolerance=0.1) == want


@pytest.mark.parametrize(
    ("proposals", "want"),
    [
        ({"a": 2, "b": 5}, 5),
        ({"a": None, "b": 5}, 5),
        ({"a": None, "b": 1}, 3),
        ({"a": None, "b": None}, None),
        ({}, None),
    ],
    ids=["max", "missing-but-up", "missing-refuses-down", "all-missing", "no-signals"],
)
def test_combine(proposals, want):
    assert combine(proposals, current=3)[0] == want


def test_stabilize_keeps_only_the_window():
    history = ((0.0, 5), (50.0, 3), (100.0, 2))
    desired, kept = stabilize(history, desired=1, current=4, now=120.0, window=100.0)
    assert desired == 3  # t=0 fell out; 3 at t=50 is the highest left
    assert kept == ((50.0, 3), (100.0, 2), (120.0, 1))
    assert stabilize(history, desired=6, current=4, now=120.0, window=100.0)[0] == 6  # scale-up is not held


@pytest.mark.parametrize(
    ("desired", "current", "events", "want"),
    [
        (10, 2, (), 6),
        (3, 2, (), 3),
        (10, 6, ((90.0, 4),), 6),
        (10, 6, ((80.0, 4),), 10),
        (1, 6, (), 1),
        (6, 6, (), 6),
    ],
    ids=["up-capped", "up-under-cap", "up-used-in-period", "up-period-over", "down-100-percent", "steady"],
)
def test_rate_limit(desired, current, events, want):
    up = RateLimit(max_pods=4, max_percent=100, period=15)
    down = RateLimit(max_pods=1, max_percent=100, period=60)
    assert rate_limit(desired, current, events, 100.0, up, down) == want


@pytest.mark.parametrize(
    ("start", "limit", "want"),
    [
        (4, RateLimit(1, 100, 60, select="max"), 4),
        (4, RateLimit(1, 100, 60, select="min"), 1),
        (10, RateLimit(4, 20, 60, select="min"), 2),
        (10, RateLimit(1, 50, 60, select="max"), 5),
        (3, RateLimit(0, 0, 60, select="max"), 0),
        (3, RateLimit(0, 100, 60, select="min"), 0),
        (0, RateLimit(4, 100, 15, select="min"), 1),
        (3, RateLimit(5, 10, 60, select="max"), 5),
    ],
    ids=["max-percent-wins", "min-pods-wins", "min-percent-wins", "max-percent-of-10", "max-both-zero",
         "min-one-zero", "percent-of-zero-is-of-one", "percent-rounds-up"],
)  # fmt: skip
def test_allowed_change(start, limit, want):
    assert allowed_change(start, limit) == want


def test_rate_limit_select_min_counts_from_the_period_start():
    down = RateLimit(max_pods=2, max_percent=50, period=60, select="min")
    up = RateLimit(max_pods=4, max_percent=100, period=15)
    assert rate_limit(1, 10, (), 100.0, up, down) == 8  # min(2 pods, 5) from 10
    assert rate_limit(1, 8, ((70.0, -2),), 100.0, up, down) == 8  # 2 of 2 used since t=40
    assert rate_limit(1, 8, ((30.0, -2),), 100.0, up, down) == 6  # that period is over


@pytest.mark.parametrize(("desired", "want"), [(0, 1), (1, 1), (4, 4), (9, 8)])
def test_bounds_step(desired, want):
    assert bounds(desired, SPEC) == want


def test_unknown_signal_names_are_a_programming_error():
    with pytest.raises(ValueError, match="unknown signal 'pertoken_p95'"):
        signal_value(window(pertoken_ms=30), "pertoken_p95", replicas=1)


def test_pods_still_starting_damp_the_next_step_as_hpa_counts_them():
    """The runaway before: each round multiplied the replicas, starting ones included, while the
    latency stayed high because the new pods were not serving yet (1 -> 2 -> 4 -> 8). After, HPA's
    rule: a pod without a sample counts as using none on a scale-up, so the step is taken from the
    pods that serve (1 -> 2, held while the second starts, then 2 -> 4 once it reports)."""
    scaler = Scaler(SPEC, replicas=1)
    expect_scale(scaler, 0, window(pertoken_ms=50), want=2)
    assert proposal(2, 50, 25, 0.1) == 4  # what the rule without readiness proposed here
    held = expect_scale(scaler, 15, window(pertoken_ms=50), want=2, starting=1)
    assert "1 of 2 pods without a sample (starting)" in held.reason
    assert proposal(2, 50, 25, 0.1) == 4 and ready_proposal(2, 1, 50, 25, 0.1) == 2
    expect_scale(scaler, 30, window(pertoken_ms=50), want=4)  # both serve: ceil(2 * 50 / 25)
    expect_scale(scaler, 45, window(pertoken_ms=60), want=5, starting=2)  # ceil(2 * 60 / 25)


@pytest.mark.parametrize(
    ("current", "ready", "value", "want"),
    [
        (4, 4, 50, 8),  # every pod reports: ceil(4 * 2)
        (4, 2, 50, 4),  # two starting count as 0: ratio 2 * 2/4 = 1.0, inside the tolerance: hold
        (4, 1, 50, 4),  # ratio 2 * 1/4 = 0.5 flips the direction: hold
        (4, 2, 100, 8),  # ceil(2 * 4)
        (4, 3, 10, 3),  # scale-down, the missing one at the target: (0.4 * 3 + 1) / 4 = 0.55, ceil(2.2)
        (4, 0, 50, 8),  # nothing reports a sample: the plain rule (decide gets no data here anyway)
    ],
    ids=["all-ready", "half-starting-hold", "flip-hold", "half-starting-up", "down-missing", "none"],
)
def test_ready_proposal_is_hpas_calc_plain_metric_replicas(current, ready, value, want):
    assert ready_proposal(current, ready, value, 25, 0.1) == want


def test_a_target_first_seen_is_not_scaled_in_before_a_stabilization_window():
    """A start, a restart or a new leader knows no earlier proposals: the replicas it finds count as one
    made then (HPA's recordInitialRecommendation), so a first window asking for fewer waits for the window."""
    scaler = Scaler(ScalerSpec(max_deployment_count=8, stabilization_window=60), replicas=4)
    held = expect_scale(scaler, 0, window(pertoken_ms=5), want=4)
    assert "stabilization window" in held.reason
    assert scaler.at(61, window(pertoken_ms=5)).desired < 4
