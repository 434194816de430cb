"""Pods the load does not reach: the per-pod windows, the finding, the step every policy's decision
takes, and what the control loop shows of it (its reason, /metrics) against real pod endpoints."""

from __future__ import annotations

import pytest
from autoscaler_testkit import FakeClock, FakePod, KubeEmulator, PodMetrics, write_profile
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.actuate.kubernetes import DeploymentScaler
from autoscaler.aggregate import PodWindow, WindowAggregator, WindowStats
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.config import PlannerSpec, RateLimit, ScalerSpec
from autoscaler.decide import Decision, PolicyState
from autoscaler.imbalance import find_idle_pods, review
from autoscaler.loop import Controller
from autoscaler.policy import build_policy
from autoscaler.telemetry import Telemetry

SERVED = PodWindow(finished=12, running=1, waiting=0, whole_window=True)
IDLE = PodWindow(finished=0, running=0, waiting=0, whole_window=True)


def with_pods(**pods: PodWindow) -> WindowStats:
    return WindowStats(latencies={}, gauges={}, pods=len(pods), span=60.0, per_pod=pods)


@pytest.mark.parametrize(
    ("pods", "idle"),
    [
        ({"a": SERVED, "b": IDLE, "c": IDLE}, ("b", "c")),
        ({"a": SERVED, "b": PodWindow(0, 0, 0, whole_window=False)}, ()),  # appeared inside the window
        ({"a": SERVED, "b": PodWindow(0, 1, 0, True)}, ()),  # a long stream, nothing finished yet
        ({"a": SERVED, "b": PodWindow(0, 0, 2, True)}, ()),  # requests queued for it
        ({"a": IDLE, "b": IDLE}, ()),  # nothing served anywhere: idle, not unbalanced
        ({"a": PodWindow(0, 3, 0, True), "b": IDLE}, ("b",)),  # the other one runs long streams
        ({}, ()),  # a source without per-pod parts (Prometheus)
    ],
    ids=["two-idle", "new-pod", "running", "waiting", "all-idle", "others-running", "no-per-pod"],
)
def test_idle_pods_are_those_through_a_whole_window_without_work_while_others_serve(pods, idle):
    assert find_idle_pods(with_pods(**pods)) == idle


TARGETS = {"pertoken_mean": 25.0}
UNBALANCED = with_pods(a=SERVED, b=SERVED, c=IDLE)


def decision(desired: int, pertoken: float) -> Decision:
    return Decision(
        desired, 3, True, f"pertoken_mean {pertoken} vs target 25: 3 -> {desired}", {"pertoken_mean": pertoken}
    )


def test_a_scale_up_while_pods_go_without_load_is_held_and_says_why():
    before = PolicyState(3, events=((100.0, 1),))
    after = PolicyState(6, events=((100.0, 1), (160.0, 3)))
    held, kept = review(decision(6, 50.0), after, before, UNBALANCED, TARGETS)
    assert (held.desired, held.current, held.idle_pods) == (3, 3, ("c",))
    assert held.reason.startswith("pertoken_mean 50.0 vs target 25: 3 -> 6; scale-up to 6 withheld: ")
    assert (
        "1 of 3 pods served no request for a whole window while pertoken_mean missed its target on the other 2"
        in held.reason
    )
    # The rate limit does not count a scale-up that was not made.
    assert (kept.replicas, kept.events) == (3, before.events)


def test_without_a_missed_target_there_is_no_finding():
    same, state = review(decision(2, 10.0), PolicyState(2), PolicyState(3), UNBALANCED, TARGETS)
    assert same == decision(2, 10.0) and state == PolicyState(2)


def test_a_decision_that_adds_nothing_keeps_its_count_and_carries_the_finding():
    noted, state = review(decision(3, 26.0), PolicyState(3), PolicyState(3), UNBALANCED, TARGETS)
    assert (noted.desired, noted.idle_pods) == (3, ("c",))
    assert "missed its target on the other 2" in noted.reason and "withheld" not in noted.reason


def test_the_aggregator_keeps_each_pods_part_of_the_window():
    agg = WindowAggregator(time_window=30, stale_after=10)
    busy, idle, late = FakePod(), FakePod(), FakePod()
    busy.gauges["running"] = 2.0
    for t in range(0, 45, 5):
        snapshot = {"busy": busy.observe("pertoken", 0.050, n=3).sample(), "idle": idle.sample()}
        if t >= 30:
            snapshot["late"] = late.sample()
        agg.record(t, snapshot)
    pods = agg.window(40).per_pod
    assert pods["busy"] == PodWindow(finished=18, running=2, waiting=0, whole_window=True)  # 6 rounds in (10, 40]
    assert pods["idle"] == PodWindow(finished=0, running=0, waiting=0, whole_window=True)
    assert pods["late"].whole_window is False  # first seen at 30: not a window yet
    assert agg.window(40).pods == 3


def window_of(per_pod_latency_ms: float, pods: dict[str, PodWindow]) -> WindowStats:
    from autoscaler_testkit import stats

    return WindowStats(
        latencies={"pertoken": stats(per_pod_latency_ms), "request": stats(per_pod_latency_ms * 100),
                   "ttft": stats(per_pod_latency_ms * 10)},
        gauges={"running": 1.0, "waiting": 0.0}, pods=len(pods), span=60.0, per_pod=pods,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["pertoken", "request", "planner"])
def test_every_policy_takes_the_step(kind, tmp_path):
    spec = ScalerSpec(type=kind, threshold=25 if kind != "request" else 2000, max_deployment_count=10)
    if kind == "planner":
        spec = ScalerSpec(type="planner", max_deployment_count=10,
                          planner=PlannerSpec(profile=str(write_profile(tmp_path / "profile.json"))))  # fmt: skip
    policy = build_policy(spec)
    state = policy.initial(3, 0.0)
    decided, _ = policy.decide(window_of(200.0, dict(UNBALANCED.per_pod)), spec, state, 60.0)
    assert decided.idle_pods == ("c",), decided.reason
    assert decided.desired <= 3


SPEC = ScalerSpec(
    time_window=10, stabilization_window=20, max_deployment_count=8,
    scale_down=RateLimit(max_pods=1, max_percent=0, period=5),
)  # fmt: skip


def run_fleet(busy: int, idle: int) -> tuple[int, str, list[dict]]:
    """Real pod endpoints behind the loop: a quiet window, then ``busy`` pods get every client's requests
    at over twice the target while ``idle`` get none. The replicas after, /metrics, the decisions."""
    pods = [PodMetrics() for _ in range(busy + idle)]
    try:
        with KubeEmulator() as cluster:
            cluster.add_deployment("triton", replicas=len(pods))
            clock = FakeClock()
            registry = CollectorRegistry()
            source = DirectSource(StaticTargets([p.target for p in pods]), timeout=2.0, stale_after=3.0)
            scaler = DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default")
            ctl = Controller(source, scaler, Telemetry(registry), source_kind="direct", clock=clock)
            ctl.targets.set_config_target("gpt2", SPEC, "triton")
            for _ in range(11):  # a whole window in which every pod reports (and nothing is asked of them)
                ctl.run_once()
                clock.advance(1.0)
            for p in pods[:busy]:
                p.running.set(4)
            for _ in range(6):
                for p in pods[:busy]:
                    p.serve(0.060, n=5)
                clock.advance(1.0)
                ctl.run_once()
            return cluster.replicas("triton"), generate_latest(registry).decode(), ctl.targets.view("gpt2")["decisions"]
    finally:
        for p in pods:
            p.stop()


@pytest.mark.integration
def test_the_loop_shows_pods_the_load_misses_on_metrics_and_in_its_decisions_and_adds_no_more():
    """Two pods keep every client's requests (kept channels to a Service); two, added before, get none."""
    replicas, exposed, decisions = run_fleet(busy=2, idle=2)
    assert 'nlg_autoscaler_idle_pods{model="gpt2"} 2.0' in exposed
    newest = decisions[0]
    assert newest["desired"] == newest["current"] == 4
    assert "scale-up to 8 withheld: 2 of 4 pods served no request for a whole window" in newest["reason"], newest
    assert replicas == 4, "a scale-up that reaches no users is not repeated"


@pytest.mark.integration
def test_the_same_latency_on_every_pod_scales_up():
    replicas, exposed, decisions = run_fleet(busy=4, idle=0)
    assert 'nlg_autoscaler_idle_pods{model="gpt2"} 0.0' in exposed
    assert replicas == 8 and "withheld" not in decisions[0]["reason"]
