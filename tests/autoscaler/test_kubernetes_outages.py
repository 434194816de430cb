"""The Kubernetes API failing under the autoscaler, over real HTTP: unreachable, silent, 500, 409, a partition.

Every failure reaches the caller as the autoscaler's own error (one line, no traceback), replicas
are held, and at most one replica claims to lead.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import kmock
import pytest
import yaml
from autoscaler_testkit import FakeClock, KubeEmulator, Partition, PodMetrics, SilentServer, free_port
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from autoscaler.actuate import ActuationError
from autoscaler.actuate.kubernetes import DeploymentScaler
from autoscaler.app import App
from autoscaler.collect import SourceError
from autoscaler.collect.direct import DirectSource, EndpointSliceTargets, StaticTargets
from autoscaler.config import ScalerSpec, parse_config
from autoscaler.kube import USER_AGENT, new_client
from autoscaler.leader import LeaseElector
from autoscaler.loop import Controller
from autoscaler.telemetry import Telemetry

pytestmark = pytest.mark.integration

LEASES = "coordination.k8s.io/v1/leases"
DEPLOYMENTS = "apps/v1/deployments"
SERVER_ERROR = {"kind": "Status", "apiVersion": "v1", "code": 500, "reason": "InternalError",
                "message": "etcd is unavailable"}  # fmt: skip


@pytest.fixture
def cluster():
    with KubeEmulator() as emulator:
        emulator.add_deployment("triton", replicas=2)
        yield emulator


def client_for(url: str) -> k8s.ApiClient:
    return new_client(k8s.Configuration(host=url))


def elector(api_client, identity="a", duration=15.0, timeout=0.5, retry_period=0.0) -> LeaseElector:
    api = k8s.CoordinationV1Api(api_client)
    return LeaseElector(api, "nlg-autoscaler", "default", identity, duration,
                        timeout=timeout, retry_period=retry_period)  # fmt: skip


@pytest.mark.parametrize("part", ["elector", "deployment", "endpointslices"])
def test_an_unreachable_api_server_is_one_line_errors(part):
    api = client_for(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    if part == "elector":
        candidate = elector(api)
        assert candidate.tick(0.0) is False
        assert candidate.error == (
            "cannot read lease default/nlg-autoscaler: Kubernetes API unreachable (Connection refused)"
        )
        return
    if part == "deployment":
        with pytest.raises(ActuationError) as error:
            DeploymentScaler(k8s.AppsV1Api(api), "default", timeout=0.5).observe("triton")
        want = "cannot read deployment default/triton: Kubernetes API unreachable (Connection refused)"
    else:
        with pytest.raises(SourceError) as error:
            EndpointSliceTargets(k8s.DiscoveryV1Api(api), "triton", "default", "metrics", timeout=0.5).targets()
        want = "cannot list EndpointSlices of service default/triton: Kubernetes API unreachable (Connection refused)"
    assert str(error.value) == want


def test_a_silent_api_server_costs_one_timeout_per_call():
    with SilentServer() as silent:
        api = client_for(silent.url)
        scaler = DeploymentScaler(k8s.AppsV1Api(api), "default", timeout=0.3)
        started = time.monotonic()
        with pytest.raises(ActuationError, match="did not answer within 0.3 s"):
            scaler.observe("triton")
        candidate = elector(api, timeout=0.3)
        assert candidate.tick(0.0) is False
        took = time.monotonic() - started
    assert "did not answer within 0.3 s" in candidate.error
    assert took < 2.0  # two calls of 0.3 s, no retries


def test_api_server_answering_500_holds_the_replicas_and_is_counted(cluster):
    cluster.emulator["get", kmock.resource(DEPLOYMENTS)] << 500 << SERVER_ERROR
    cluster.emulator["get", kmock.resource(LEASES)] << 500 << SERVER_ERROR
    pod = PodMetrics()
    try:
        registry = CollectorRegistry()
        api = cluster.autoscaler_client()
        source = DirectSource(StaticTargets([pod.target]), timeout=1.0, stale_after=3.0)
        ctl = Controller(
            source, DeploymentScaler(k8s.AppsV1Api(api), "default", timeout=0.5), Telemetry(registry),
            source_kind="direct", clock=FakeClock(), elector=elector(api),
        )  # fmt: skip
        ctl.targets.set_config_target("gpt2", ScalerSpec(), "triton")
        errors = ctl.run_once()
        assert errors == [
            "leader election: cannot read lease default/nlg-autoscaler: HTTP 500 Internal Server Error "
            "(etcd is unavailable)"
        ]
        assert registry.get_sample_value("nlg_autoscaler_lease_errors_total") == 1
        assert registry.get_sample_value("nlg_autoscaler_is_leader") == 0
        assert ctl.targets.view("gpt2")["decisions"] == []  # a replica that cannot see does not act
        source.close()
    finally:
        pod.stop()
    assert cluster.replicas("triton") == 2
    assert not list(cluster.emulator["patch"])


def test_a_500_on_the_deployment_is_an_actuation_error(cluster):
    cluster.emulator["patch", kmock.resource(DEPLOYMENTS)] << 500 << SERVER_ERROR
    scaler = DeploymentScaler(k8s.AppsV1Api(cluster.autoscaler_client()), "default", timeout=0.5)
    with pytest.raises(ActuationError, match=r"cannot scale deployment default/triton to 3: HTTP 500"):
        scaler.scale("triton", 3, expected=2)


def test_a_leader_that_cannot_renew_steps_down_at_the_renew_deadline(cluster):
    a = elector(cluster.autoscaler_client(), duration=15.0, retry_period=2.0)
    assert a.renew_deadline == 10.0  # two thirds of the lease, as client-go's 10 s of 15 s
    assert a.tick(0.0) is True
    cluster.emulator["get", kmock.resource(LEASES)] << 500 << SERVER_ERROR
    assert a.tick(5.0) is True  # the next round (7 s) still falls before the deadline
    assert "HTTP 500" in a.error
    assert a.tick(8.5) is False  # the round after it (10.5 s) would not: it steps down now


def test_a_leader_past_its_deadline_stops_before_acting(cluster):
    a = elector(cluster.autoscaler_client(), duration=15.0)
    assert a.tick(0.0) is True
    assert a.check(9.9) is True
    assert a.check(10.0) is False
    assert a.leading is False


def test_a_conflict_on_renewal_means_another_replica_wrote_the_lease(cluster):
    a = elector(cluster.autoscaler_client())
    assert a.tick(0.0) is True
    cluster.emulator["patch", kmock.resource(LEASES)] << 409 << {"kind": "Status", "code": 409}
    assert a.tick(1.0) is False
    assert a.error == ""  # a lost race is not an API failure


def test_a_released_lease_taken_over_counts_a_transition_and_names_the_autoscaler(cluster):
    a, b = elector(cluster.autoscaler_client(), "a"), elector(cluster.autoscaler_client(), "b")
    assert a.tick(0.0) is True
    a.release()
    assert b.tick(1.0) is True
    lease = cluster.objects[LEASES, "default", "nlg-autoscaler"]
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)
    assert a.tick(2.0) is False
    agents = {request.headers["User-Agent"] for request in cluster.emulator["get"]}
    assert agents == {USER_AGENT}
    assert USER_AGENT.startswith("nlg-autoscaler/0.")


def config_for(pod, interval=0.3, lease=3.0, **extra):
    return parse_config({
        "model_id": "gpt2",
        "source": {"kind": "direct", "static_targets": [pod.target], "timeout": 1.0},
        "actuator": {"kind": "none"},
        "leader_election": {"enabled": True, "lease_duration": lease},
        "loop": {"interval": interval}, "api": {"port": 0}, "metrics": {"port": 0}, **extra,
    })  # fmt: skip


@pytest.mark.e2e
def test_a_partition_never_makes_two_leaders(cluster):
    pod = PodMetrics()
    upstream = cluster.url.removeprefix("http://")
    links = {name: Partition(upstream) for name in ("a", "b")}
    apps = {
        name: App(config_for(pod), kube=k8s.ApiClient(k8s.Configuration(host=link.url)), identity=name)
        for name, link in links.items()
    }
    claims: list[tuple[float, bool, bool]] = []
    stop = threading.Event()

    def watch() -> None:  # what /healthz and nlg_autoscaler_is_leader say, every 5 ms
        while not stop.is_set():
            a, b = (apps[n].controller.elector.leading for n in ("a", "b"))
            gauges = [apps[n].registry.get_sample_value("nlg_autoscaler_is_leader") == 1 for n in ("a", "b")]
            claims.append((time.monotonic(), a or gauges[0], b or gauges[1]))
            time.sleep(0.005)

    def leader() -> str | None:
        held = [n for n in ("a", "b") if apps[n].controller.elector.leading]
        return held[0] if len(held) == 1 else None

    def wait_for(name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while leader() != name and time.monotonic() < deadline:
            time.sleep(0.02)
        assert leader() == name, claims[-3:]

    watcher = threading.Thread(target=watch)
    try:
        apps["a"].start()
        wait_for("a", 5)
        apps["b"].start()
        watcher.start()
        time.sleep(1.0)
        assert leader() == "a"
        links["a"].cut.set()  # a can no longer reach the API server
        wait_for("b", 10)
        links["a"].cut.clear()
        time.sleep(1.5)
        assert leader() == "b"  # a, back, finds b's fresh Lease
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        for app in apps.values():
            app.stop()
        for link in links.values():
            link.close()
        pod.stop()
    both = [t for t, a, b in claims if a and b]
    assert not both, f"two leaders for {both[-1] - both[0]:.2f} s"
    assert any(a for _, a, _ in claims) and any(b for _, _, b in claims)


def write_config(path, pod, kube_port):
    path.write_text(yaml.safe_dump({
        "source": {"kind": "direct", "static_targets": [pod.target]},
        "actuator": {"kind": "none"},
        "leader_election": {"enabled": True},
        "api": {"port": 0}, "metrics": {"port": 0},
    }))  # fmt: skip
    kubeconfig = path.with_name("kubeconfig")
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{kube_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return kubeconfig


def test_once_against_an_unreachable_api_server_prints_one_line_and_fails(tmp_path):
    pod = PodMetrics()
    try:
        path = tmp_path / "autoscaler.yaml"
        kubeconfig = write_config(path, pod, free_port())
        process = subprocess.run(
            [sys.executable, "-m", "autoscaler.cli", "--config", str(path), "--once",
             "--kubeconfig", str(kubeconfig), "--log-level", "error"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        pod.stop()
    assert process.returncode == 1, process.stderr
    assert "Traceback" not in process.stderr
    assert process.stderr.strip().splitlines() == [
        "nlg-autoscaler: the round failed: leader election: cannot read lease default/nlg-autoscaler: "
        "Kubernetes API unreachable (Connection refused)"
    ]
