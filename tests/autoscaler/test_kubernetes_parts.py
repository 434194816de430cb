"""The official kubernetes client over real HTTP against kmock's emulator and the tests' own API server:
scale, discovery, Lease."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from autoscaler_testkit import FakeClock, KubeEmulator, PodMetrics
from fake_apiserver import FakeApiServer
from kubernetes import client as k8s

from autoscaler import __version__
from autoscaler.actuate import ActuationError, Observed
from autoscaler.actuate.kubernetes import REPLICAS_ANNOTATION, DeploymentScaler
from autoscaler.app import App
from autoscaler.collect import SourceError
from autoscaler.collect.direct import EndpointSliceTargets
from autoscaler.config import parse_config
from autoscaler.kube import KubeConfigError, api_client, new_client
from autoscaler.leader import LeaseElector

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs"

CONFLICT = {"apiVersion": "v1", "kind": "Status", "code": 409, "reason": "Conflict",
            "message": "the object has been modified"}  # fmt: skip


@pytest.fixture
def cluster():
    with KubeEmulator() as emulator:
        yield emulator


def test_the_deployment_is_patched_with_the_count_and_the_annotation_recording_it(cluster):
    cluster.add_deployment("triton", replicas=2)
    scaler = DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default")
    assert scaler.observe("triton").replicas == 2
    assert scaler.scale("triton", 3, expected=2) == 3
    assert cluster.replicas("triton") == 3
    patch = list(cluster.emulator["patch"])[-1]
    assert patch.subresource is None
    assert patch.data == {
        "metadata": {"annotations": {REPLICAS_ANNOTATION: "3"}, "resourceVersion": "1"},
        "spec": {"replicas": 3},
    }
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    for doc in ("autoscaler.md", "helm.md"):  # where operators read what the annotation means
        assert f"`{REPLICAS_ANNOTATION}`" in (DOCS / doc).read_text(encoding="utf-8"), doc


@pytest.fixture
def api_server():
    """The tests' own API server: it refuses a write carrying an old resourceVersion with 409."""
    with FakeApiServer() as server:
        server.add_deployment("triton", replicas=1)
        yield server


def scaler_on(server: FakeApiServer, waits: list[float], budget: float = 1.0) -> DeploymentScaler:
    """A scaler whose waits between conflict retries move a fake clock (kept in ``waits``)."""
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    api = k8s.AppsV1Api(new_client(k8s.Configuration(host=server.url)))
    return DeploymentScaler(api, "default", timeout=1.0, budget=budget, clock=clock, sleep=sleep, draw=lambda: 0.5)


def test_a_409_conflict_is_read_again_and_retried_after_a_wait(api_server):
    waits: list[float] = []
    api_server.storm("deployments", "triton", writes=2)  # a rollout's status updates, say
    assert scaler_on(api_server, waits).scale("triton", 2, expected=1) == 2
    assert api_server.replicas("triton") == 2
    assert api_server.annotations("deployments", "triton") == {REPLICAS_ANNOTATION: "2"}
    assert [m for m, _ in api_server.requests].count("PATCH") == 3
    assert waits == pytest.approx([0.015, 0.03])


def test_conflicts_that_outlast_the_budget_are_an_error(api_server):
    waits: list[float] = []
    api_server.storm("deployments", "triton")
    with pytest.raises(ActuationError) as error:
        scaler_on(api_server, waits, budget=0.5).scale("triton", 2, expected=1)
    assert str(error.value) == (
        "cannot scale deployment default/triton to 2: another writer changed it before each of 6 writes "
        "in 0.4 s (409 Conflict)"
    )
    assert sum(waits) <= 0.5 and len(waits) == 5
    assert api_server.replicas("triton") == 1


def test_a_new_leader_tells_its_predecessors_count_from_a_persons(api_server, caplog):
    """Two replicas' scalers on one Deployment: "b" led first and saw 1; "a" led and scaled to 4; "b",
    leading again, finds 4 recorded on the Deployment: not a change made outside the autoscaler."""
    apps = k8s.AppsV1Api(new_client(k8s.Configuration(host=api_server.url)))
    a, b = DeploymentScaler(apps, "default"), DeploymentScaler(apps, "default")
    assert b.observe("triton") == Observed(1)
    assert a.observe("triton") == Observed(1)
    assert a.scale("triton", 4, expected=1) == 4
    with caplog.at_level(logging.WARNING):
        assert b.observe("triton") == Observed(4)
        assert caplog.text == ""
        api_server.objects["deployments", "default", "triton"]["spec"]["replicas"] = 2  # kubectl scale
        assert b.observe("triton") == Observed(2, external=True, previous=4)
        assert b.observe("triton") == Observed(2)  # said once
    assert caplog.text.count("changed outside the autoscaler: 2 replicas, the autoscaler last set 4") == 1
    assert f"annotation {REPLICAS_ANNOTATION}" in caplog.text
    assert b.scale("triton", 3, expected=2) == 3
    assert api_server.annotations("deployments", "triton") == {REPLICAS_ANNOTATION: "3"}
    assert a.observe("triton") == Observed(3)  # b's change, not a person's


@pytest.mark.parametrize("value", ["", "four", "-1", "²", "9" * 30])
def test_an_annotation_that_is_not_a_count_is_no_reference(api_server, value):
    api_server.objects["deployments", "default", "triton"]["metadata"]["annotations"] = {REPLICAS_ANNOTATION: value}
    apps = k8s.AppsV1Api(new_client(k8s.Configuration(host=api_server.url)))
    assert DeploymentScaler(apps, "default").observe("triton") == Observed(1)


def test_a_manual_change_is_logged_and_not_overwritten(cluster, caplog):
    cluster.add_deployment("triton", replicas=2)
    scaler = DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default")
    scaler.observe("triton")
    scaler.scale("triton", 3, expected=2)
    cluster.set_replicas("triton", 6)  # kubectl scale --replicas=6
    with caplog.at_level(logging.WARNING):
        observed = scaler.observe("triton")
    assert (observed.replicas, observed.external, observed.previous) == (6, True, 3)
    assert "changed outside the autoscaler: 6 replicas, the autoscaler last set 3" in caplog.text
    # A decision made from 3 is not written over the person's 6.
    assert scaler.scale("triton", 4, expected=3) == 6
    assert cluster.replicas("triton") == 6
    assert not scaler.observe("triton").external  # reported once


def test_missing_deployment_names_the_key_to_fix(cluster):
    cluster.add_deployment("other", replicas=1)
    scaler = DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default")
    with pytest.raises(ActuationError, match=r"deployment default/triton: HTTP 404 .*actuator.deployment"):
        scaler.observe("triton")


def endpoint_slice(name, service, endpoints, port_name="metrics", port=8002):
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}, {"name": "http", "port": 8000}],
    }


def endpoint(ip, pod, ready=True, serving=None):
    conditions = {"ready": ready} if serving is None else {"ready": ready, "serving": serving}
    return {"addresses": [ip], "conditions": conditions, "targetRef": {"kind": "Pod", "name": pod}}


def test_endpoint_slices_list_the_pods_of_the_service(cluster):
    slices = "discovery.k8s.io/v1/endpointslices"
    cluster.objects[slices, "default", "triton-a"] = endpoint_slice(
        "triton-a", "triton",
        [endpoint("10.0.0.1", "triton-0"), endpoint("10.0.0.2", "triton-1", ready=False),
         endpoint("10.0.0.3", "triton-2", ready=False, serving=True)],
    )  # fmt: skip
    ipv6 = [endpoint("fd00::4", "triton-3")]
    cluster.objects[slices, "default", "triton-b"] = endpoint_slice("triton-b", "triton", ipv6)
    elsewhere = [endpoint("10.0.0.9", "p")]
    cluster.objects[slices, "default", "other"] = endpoint_slice("other", "prometheus", elsewhere)
    cluster.objects[slices, "default", "no-port"] = endpoint_slice(
        "no-port", "triton", [endpoint("10.0.0.8", "x")], port_name="grpc"
    )
    lister = EndpointSliceTargets(k8s.DiscoveryV1Api(cluster.client()), "triton", "default", "metrics")
    assert lister.targets() == {
        "triton-0": "http://10.0.0.1:8002/metrics",
        "triton-2": "http://10.0.0.3:8002/metrics",  # terminating, still serving its streams
        "triton-3": "http://[fd00::4]:8002/metrics",
    }
    request = list(cluster.emulator["get"])[-1]
    assert request.params["labelSelector"] == "kubernetes.io/service-name=triton"


def test_discovery_failure_is_a_source_error(cluster):
    cluster.emulator["get", kmock_slices()] << 403 << {"kind": "Status", "code": 403, "reason": "Forbidden"}
    lister = EndpointSliceTargets(k8s.DiscoveryV1Api(cluster.client()), "triton", "default", "metrics")
    with pytest.raises(SourceError, match="EndpointSlices of service default/triton: HTTP 403"):
        lister.targets()


def elector(cluster, identity, duration=15.0):
    api = k8s.CoordinationV1Api(cluster.client())
    return LeaseElector(api, "nlg-autoscaler", "default", identity, duration)


def lease(cluster):
    return cluster.objects["coordination.k8s.io/v1/leases", "default", "nlg-autoscaler"]


def test_only_one_replica_leads_and_a_standby_takes_over_after_the_lease_expires(cluster):
    a, b = elector(cluster, "a"), elector(cluster, "b")
    t = 1000.0
    assert a.tick(t) is True
    assert b.tick(t + 1) is False
    for step in range(1, 4):  # a renews every 5 s; b never sees the lease go stale
        assert a.tick(t + 5 * step) is True
        assert b.tick(t + 5 * step + 1) is False
    assert lease(cluster)["spec"]["holderIdentity"] == "a"
    # a stops renewing (crashed). b counts 15 s from the last change it saw, on its own clock.
    assert b.tick(t + 25) is False
    assert b.tick(t + 31) is True
    assert lease(cluster)["spec"]["holderIdentity"] == "b"
    assert lease(cluster)["spec"]["leaseTransitions"] == 1
    assert a.tick(t + 32) is False  # a comes back: b holds a fresh lease


def test_release_hands_over_at_once(cluster):
    a, b = elector(cluster, "a"), elector(cluster, "b")
    assert a.tick(0.0) is True
    assert b.tick(1.0) is False
    a.release()
    assert a.leading is False
    assert b.tick(2.0) is True


def test_losing_a_race_for_the_lease_means_not_leading(cluster):
    a, b = elector(cluster, "a"), elector(cluster, "b")
    assert a.tick(0.0) is True
    cluster.emulator["patch", kmock_leases()] << 409 << CONFLICT
    assert b.tick(1.0) is False
    assert b.tick(20.0) is False  # takeover refused with 409: another replica got there first
    assert a.tick(21.0) is False  # its renewal is refused too: it must stop acting


def test_api_errors_mean_not_leading_once_the_renew_deadline_passes(cluster):
    a = elector(cluster, "a")
    assert a.tick(0.0) is True
    cluster.emulator["get", kmock_leases()] << 500 << {"kind": "Status", "code": 500}
    assert a.tick(5.0) is True  # 5 s into a 10 s renew deadline: still leading
    assert a.tick(10.0) is False
    b = elector(cluster, "b")
    assert b.tick(11.0) is False  # a candidate that cannot read the Lease does not lead
    assert "HTTP 500" in b.error


def kmock_slices():
    import kmock

    return kmock.resource("discovery.k8s.io/v1/endpointslices")


def kmock_leases():
    import kmock

    return kmock.resource("coordination.k8s.io/v1/leases")


def write_kubeconfig(path, server):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "autoscaler", "user": {"token": "t"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "autoscaler"}}],
    }))  # fmt: skip
    return path


def test_missing_credentials_say_what_to_do(tmp_path):
    with pytest.raises(KubeConfigError, match="no Kubernetes credentials.*--kubeconfig"):
        api_client(str(tmp_path / "absent"))


def test_the_service_discovers_pods_and_scales_the_deployment_through_a_kubeconfig(cluster, tmp_path):
    pod = PodMetrics()
    try:
        host, port = pod.target.split(":")
        slices = "discovery.k8s.io/v1/endpointslices"
        cluster.objects[slices, "default", "triton-a"] = endpoint_slice(
            "triton-a", "triton", [endpoint(host, "triton-0")], port=int(port)
        )
        cluster.add_deployment("triton", replicas=1)
        config = parse_config({
            "scaler": {"time_window": 10},
            "source": {"kind": "direct", "service": "triton"},
            "actuator": {"kind": "kubernetes", "deployment": "triton"},
            "leader_election": {"enabled": True, "lease_duration": 10},
            "loop": {"interval": 1}, "api": {"port": 0}, "metrics": {"port": 0},
        })  # fmt: skip
        clock = FakeClock()
        app = App(config, kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", cluster.url)), clock=clock)
        try:
            app.controller.run_once()
            pod.running.set(1)
            pod.serve(0.100, n=5)
            clock.advance(1)
            app.controller.run_once()
        finally:
            app.stop()
        assert cluster.replicas("triton") == 4  # 100 ms per token against 25 ms: 1 -> 4
        agents = {request.headers["User-Agent"] for request in cluster.emulator["patch"]}
        assert agents == {f"nlg-autoscaler/{__version__}"}
        lease = cluster.objects["coordination.k8s.io/v1/leases", "default", "nlg-autoscaler"]
        assert "holderIdentity" not in lease["spec"]  # released on stop (merge patch with null)
    finally:
        pod.stop()
