"""The control loop on a fake clock with real HTTP parts: pod metrics servers and kmock's Kubernetes."""

from __future__ import annotations

import logging

import pytest
from autoscaler_testkit import FakeClock, KubeEmulator, PodMetrics
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.actuate import Deferred, RecordingActuator
from autoscaler.actuate.kubernetes import DeploymentScaler
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.config import RateLimit, Registration, ScalerSpec
from autoscaler.leader import LeaseElector
from autoscaler.loop import Controller
from autoscaler.targets import TargetConflict
from autoscaler.telemetry import Telemetry

pytestmark = pytest.mark.integration

SPEC = ScalerSpec(
    time_window=10, stabilization_window=20, max_deployment_count=4,
    scale_down=RateLimit(max_pods=1, max_percent=0, period=5),
)  # fmt: skip


@pytest.fixture
def pod():
    metrics = PodMetrics()
    yield metrics
    metrics.stop()


@pytest.fixture
def cluster():
    with KubeEmulator() as emulator:
        emulator.add_deployment("triton", replicas=1)
        yield emulator


def controller_for(pod, actuator, clock, elector=None):
    registry = CollectorRegistry()
    source = DirectSource(StaticTargets([pod.target]), timeout=2.0, stale_after=3.0)
    telemetry = Telemetry(registry)
    ctl = Controller(source, actuator, telemetry, source_kind="direct", clock=clock, elector=elector)
    ctl.targets.set_config_target("gpt2", SPEC, "triton")
    return ctl, registry


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels)


def run_until(ctl, clock, pod, seconds, pertoken_s=None, step=1.0):
    """Advances the fake clock round by round, the pod finishing 5 requests per round if given."""
    for _ in range(int(seconds / step)):
        if pertoken_s is not None:
            pod.serve(pertoken_s, n=5)
        clock.advance(step)
        ctl.run_once()


def test_scales_the_deployment_out_on_per_token_latency_and_back_in(pod, cluster):
    clock = FakeClock()
    ctl, registry = controller_for(pod, DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default"), clock)
    ctl.run_once()
    pod.running.set(2)
    run_until(ctl, clock, pod, 1, pertoken_s=0.050)  # twice the 25 ms target
    assert cluster.replicas("triton") == 2
    assert value(registry, "nlg_autoscaler_desired_replicas", model="gpt2") == 2
    # The gauge of current replicas agrees with the API's view the moment a round has scaled.
    assert value(registry, "nlg_autoscaler_current_replicas", model="gpt2") == 2
    assert ctl.targets.view("gpt2")["replicas"]["current"] == 2
    assert value(registry, "nlg_autoscaler_signal_value", model="gpt2", signal="pertoken_mean") > 25
    assert value(registry, "nlg_autoscaler_decisions_total", model="gpt2", direction="up") >= 1
    run_until(ctl, clock, pod, 3, pertoken_s=0.050)
    # The second pod never reports (this cluster runs one): HPA counts it as using none of the
    # latency, so the one serving pod's 2x proposes 2 again and the count holds instead of doubling.
    assert cluster.replicas("triton") == 2
    assert "1 of 2 pods without a sample" in ctl.targets.view("gpt2")["decisions"][0]["reason"]
    pod.running.set(0)  # the load stops: idle pods, no requests finishing
    run_until(ctl, clock, pod, 15)
    assert cluster.replicas("triton") == 2  # inside the 20 s stabilization window
    run_until(ctl, clock, pod, 40)
    assert cluster.replicas("triton") == 1
    view = ctl.targets.view("gpt2")
    assert view["replicas"] == {"current": 1, "desired": 1}
    assert any("stabilization window" in d["reason"] for d in view["decisions"])


def test_metric_source_down_holds_counts_and_resumes(pod, cluster):
    clock = FakeClock()
    ctl, registry = controller_for(pod, DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default"), clock)
    cluster.set_replicas("triton", 2)
    ctl.run_once()
    pod.stop()
    run_until(ctl, clock, pod, 5)
    assert cluster.replicas("triton") == 2
    assert value(registry, "nlg_autoscaler_scrape_errors_total", model="gpt2", source="direct") == 5
    last = ctl.targets.view("gpt2")["decisions"][0]
    assert last["valid"] is False
    assert last["reason"].startswith("metric source failed; no data")
    assert "metric source" in ctl.targets.view("gpt2")["last_error"]
    pod.start()
    pod.running.set(1)
    run_until(ctl, clock, pod, 3, pertoken_s=0.100)
    assert cluster.replicas("triton") == 4
    assert ctl.targets.view("gpt2")["last_error"] is None


def test_a_manual_change_is_counted_and_becomes_current(pod, cluster, caplog):
    clock = FakeClock()
    ctl, registry = controller_for(pod, DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default"), clock)
    pod.running.set(1)
    run_until(ctl, clock, pod, 3, pertoken_s=0.025)
    cluster.set_replicas("triton", 3)
    with caplog.at_level(logging.WARNING):
        run_until(ctl, clock, pod, 1, pertoken_s=0.025)
    assert "changed outside the autoscaler" in caplog.text
    assert value(registry, "nlg_autoscaler_external_changes_total", model="gpt2") == 1
    assert cluster.replicas("triton") == 3  # on target at 3: nothing to undo
    assert ctl.targets.view("gpt2")["replicas"]["current"] == 3


def test_actuation_errors_are_counted(pod, cluster):
    clock = FakeClock()
    ctl, registry = controller_for(pod, DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default"), clock)
    ctl.targets.set_config_target("gpt2", SPEC, "missing")
    ctl.run_once()
    assert value(registry, "nlg_autoscaler_actuation_errors_total", model="gpt2") == 1
    assert "HTTP 404" in ctl.targets.view("gpt2")["last_error"]


class BusyModel(RecordingActuator):
    """Triton's in-place actuator in miniature: scale-in is put off while requests are in flight."""

    def __init__(self, initial: int) -> None:
        super().__init__(initial)
        self.in_flight = 0

    def scale(self, target: str, replicas: int, expected: int) -> int:
        if replicas < expected and self.in_flight:
            raise Deferred(f"{self.in_flight} requests in flight")
        return super().scale(target, replicas, expected)


def test_a_deferred_scale_in_keeps_the_replicas_and_is_asked_again(pod):
    clock = FakeClock()
    actuator = BusyModel(initial=3)
    ctl, registry = controller_for(pod, actuator, clock)
    actuator.in_flight = 2
    run_until(ctl, clock, pod, 30)  # idle past the stabilization window, but streams are open
    assert actuator.observe("triton").replicas == 3
    assert value(registry, "nlg_autoscaler_deferred_total", model="gpt2") >= 1
    assert value(registry, "nlg_autoscaler_actuation_errors_total", model="gpt2") == 0
    last = ctl.targets.view("gpt2")["decisions"][0]
    assert "deferred: 2 requests in flight" in last["reason"]
    assert ctl.targets.view("gpt2")["last_error"] is None
    actuator.in_flight = 0  # the streams finish
    run_until(ctl, clock, pod, 5)
    assert actuator.observe("triton").replicas == 2  # one pod per 5 s, as the scale-down limit says


def test_only_the_leader_acts(pod, cluster):
    clock = FakeClock()
    api = k8s.AppsV1Api(cluster.client())
    leases = k8s.CoordinationV1Api(cluster.client())

    def candidate(identity):
        elector = LeaseElector(leases, "lease", "default", identity, 5)
        return controller_for(pod, DeploymentScaler(api, "default"), clock, elector)

    (ctl_one, reg_one), (ctl_two, reg_two) = candidate("one"), candidate("two")
    pod.running.set(1)
    for _ in range(3):
        pod.serve(0.050, n=5)
        clock.advance(1)
        ctl_one.run_once()
        ctl_two.run_once()
    assert value(reg_one, "nlg_autoscaler_is_leader") == 1
    assert value(reg_two, "nlg_autoscaler_is_leader") == 0
    assert ctl_two.targets.view("gpt2")["decisions"] == []
    assert ctl_one.targets.view("gpt2")["decisions"]
    ctl_one.close()  # releases the Lease: the standby leads from its next round
    clock.advance(1)
    ctl_two.run_once()
    assert value(reg_two, "nlg_autoscaler_is_leader") == 1


def test_targets_registered_through_the_api_are_scaled_too(pod):
    clock = FakeClock()
    actuator = RecordingActuator(initial=1)
    ctl, registry = controller_for(pod, actuator, clock)
    bert = Registration(model_id="bert", scaler=ScalerSpec(type="request", threshold=2000))
    view, created = ctl.targets.register(bert)
    assert view["scale_target"] == "bert" and created
    assert {v["model_id"] for v in ctl.targets.views()} == {"gpt2", "bert"}
    with pytest.raises(TargetConflict, match="config file"):
        ctl.targets.register(Registration(model_id="gpt2"))
    with pytest.raises(TargetConflict, match="config file"):
        ctl.targets.unregister("gpt2")
    ctl.run_once()
    assert ctl.targets.view("bert")["decisions"][0]["valid"] is False  # no series for bert: no data, hold
    exposition = generate_latest(registry).decode()
    assert 'nlg_autoscaler_decisions_total{direction="no_data",model="bert"} 1.0' in exposition
    assert ctl.targets.unregister("bert") is True
    assert ctl.targets.unregister("bert") is False
    assert ctl.targets.view("bert") is None
    exposition = generate_latest(registry).decode()
    assert 'model="bert"' not in exposition  # every series of the deleted target is gone
    assert 'model="gpt2"' in exposition


def test_reloading_the_config_target_keeps_state_when_unchanged(pod):
    clock = FakeClock()
    ctl, _ = controller_for(pod, RecordingActuator(initial=2), clock)
    ctl.run_once()
    before = ctl.targets.view("gpt2")["decisions"]
    ctl.targets.set_config_target("gpt2", SPEC, "triton")
    assert ctl.targets.view("gpt2")["decisions"] == before
    ctl.targets.set_config_target("gpt2-large", SPEC, "triton")
    assert [v["model_id"] for v in ctl.targets.views()] == ["gpt2-large"]
