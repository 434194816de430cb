"""The anchors at their documented defaults, as timelines: Knative's KPA and KEDA on waiting requests."""

from __future__ import annotations

import pytest

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from nlgsim import anchors
from nlgsim.anchors import KedaState, KpaState, keda_waiting_decide, kpa_decide
from nlgsim.experiment import build_policy
from nlgsim.profile import load_profile
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import COMPLEX, thesis_requests

SPEC = ScalerSpec(max_deployment_count=64)


def win(pods: int, running: float, waiting: float = 0.0) -> WindowStats:
    return WindowStats(latencies={}, gauges={"running": running, "waiting": waiting}, pods=pods, span=30.0)


def test_the_defaults_are_the_documented_ones():
    assert anchors.KPA_TARGET_CONCURRENCY * anchors.KPA_TARGET_UTILIZATION == pytest.approx(70)
    assert (anchors.KPA_STABLE_WINDOW_S, anchors.KPA_PANIC_WINDOW_FRACTION, anchors.KPA_PANIC_THRESHOLD) == (60, 0.1, 2)
    assert (anchors.KPA_MAX_SCALE_UP_RATE, anchors.KPA_MAX_SCALE_DOWN_RATE) == (1000, 2)
    assert (anchors.KEDA_WAITING_PER_REPLICA, anchors.KEDA_POLLING_S) == (5, 15)
    assert anchors.HPA_DEFAULTS.stabilization_window == 300


def test_kpa_panics_on_a_burst_never_scales_down_while_panicking_then_halves_at_most():
    state = KpaState.initial(1, 0.0)
    d, state = kpa_decide(win(1, 64, 236), SPEC, state, 0.0)  # 300 in flight: 5 pods, 5x the ready one
    assert (d.desired, "panic" in d.reason) == (5, True)
    d, state = kpa_decide(win(1, 64, 236), SPEC, state.with_replicas(5), 5.0)  # still over: extends it
    d, state = kpa_decide(win(1, 10), SPEC, state, 10.0)  # the load gone, the pods still starting
    assert d.desired == 5  # panic mode: no scale-down
    for t in range(15, 75, 5):  # until a stable window after the last tick over it (10 s: 155 in flight in 6 s)
        d, state = kpa_decide(win(5, 10), SPEC, state, float(t))
        assert d.desired == 5, (t, d.reason)
    d, state = kpa_decide(win(5, 10), SPEC, state, 75.0)
    assert "stable" in d.reason and d.desired == 2  # ceil(mean in flight / 70) = 3, but at most halve: floor(5/2)
    assert kpa_decide(win(2, 10), SPEC, state.with_replicas(2), 80.0)[0].desired == 1


def test_keda_scales_on_waiting_per_replica_polls_every_15_s_and_waits_300_s_to_scale_down():
    state = KedaState.initial(1, 0.0)
    d, state = keda_waiting_decide(win(1, 64, 30), SPEC, state, 0.0)
    assert d.desired == 5  # ceil(30 / 5) = 6, but one period adds at most max(4 pods, 100%) = 4
    d, state = keda_waiting_decide(win(1, 64, 30), SPEC, state.with_replicas(5), 5.0)
    assert d.desired == 5 and "next poll at 15" in d.reason
    d, state = keda_waiting_decide(win(5, 10, 0), SPEC, state, 15.0)
    assert d.desired == 5 and "stabilized 5" in d.reason  # the scale-down waits for the 300 s window
    t = 15.0
    while d.desired == 5:
        t += 15.0
        d, state = keda_waiting_decide(win(5, 10, 0), SPEC, state, t)
    assert t == 300 and d.desired == 1  # the t=0 proposal has left the window


@pytest.mark.parametrize("name", ["kpa", "keda-waiting"])
def test_the_simulator_runs_each_anchor_through_the_live_controller(name):
    profile = load_profile("benchmarks/profiles/h100-gpt2-xl-fp16.json")
    policy, initial = build_policy(name, ScalerSpec(max_deployment_count=8))
    assert policy is not None and policy.name == name
    log = simulate(Scenario(profile, thesis_requests(COMPLEX, 60.0, 3000, seed=1), policy, initial, startup_s=10))
    assert all(s.finish > 0 for s in log.states)
    assert max(c[1] for c in log.pod_changes) > 1 and all(r.reason for r in log.loops)
