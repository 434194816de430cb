"""The chart's NetworkPolicies: who reaches the Triton and autoscaler pods' ports, worked out on the
rendered policies and the rendered pods' own labels and ports."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from helm_testkit import NAMESPACE, HelmError, Rendered, pod_spec, validate_manifest
from network_policy import Pod, admits, selects

CLIENT = {"nlg-serving/client": "true"}
API_CLIENT = {"nlg-serving/autoscaler-client": "true"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


def workload_pod(rendered: Rendered, kind: str, suffix: str) -> Pod:
    """The pod a rendered Deployment (or a Pod) makes: its labels and named container ports."""
    doc = rendered.one(kind, suffix)
    labels = (doc["spec"]["template"] if kind == "Deployment" else doc)["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for c in pod_spec(doc)["containers"] for p in c.get("ports", [])}
    return Pod(labels, NAMESPACE, ports=ports)


def reach(rendered: Rendered) -> dict[str, set[tuple[str, int]]]:
    """For each source pod, the (destination, port) pairs it may connect to among every port of the
    Triton, balancer and autoscaler pods."""
    targets = {"triton": workload_pod(rendered, "Deployment", "-triton")}
    for name in ("balancer", "autoscaler"):
        if rendered.maybe("Deployment", f"-{name}"):
            targets[name] = workload_pod(rendered, "Deployment", f"-{name}")
    sources = {
        "client": Pod(CLIENT, NAMESPACE),
        "other pod": Pod({"app": "other"}, NAMESPACE),
        "client elsewhere": Pod(CLIENT, "other"),
        "prometheus": Pod(PROMETHEUS, "monitoring"),
        "prometheus-like here": Pod(PROMETHEUS, NAMESPACE),
        "api client": Pod(API_CLIENT, NAMESPACE),
        "helm test": workload_pod(rendered, "Pod", "-test-stream"),
        **{name: pod for name, pod in targets.items()},
    }
    policies = rendered.all("NetworkPolicy")
    return {
        name: {(t, port) for t, target in targets.items() for port in target.ports.values()
               if t != name and admits(policies, source, target, port)}
        for name, source in sources.items()
    }  # fmt: skip


def test_at_the_defaults_each_port_admits_only_its_peers(render):
    """The clients reach the balancer, the balancer reaches Triton: no client reaches a Triton pod."""
    assert reach(render()) == {
        "client": {("balancer", 8000), ("balancer", 8001)},
        "other pod": set(),
        "client elsewhere": set(),  # a podSelector alone selects this namespace's pods
        "prometheus": {("triton", 8002), ("autoscaler", 9100), ("balancer", 8404)},
        "prometheus-like here": set(),
        "api client": {("autoscaler", 8080)},
        "helm test": {("triton", 8000), ("balancer", 8000), ("balancer", 8001)},
        "triton": set(),
        "balancer": {("triton", 8000), ("triton", 8001)},
        "autoscaler": {("triton", 8002)},  # the direct source scrapes the pods
    }


def test_without_the_balancer_the_clients_reach_triton(render):
    got = reach(render(values={"balancer": {"kind": "none"}}))
    assert got["client"] == {("triton", 8000), ("triton", 8001)}
    assert "balancer" not in got


def test_the_triton_actuator_reaches_the_model_control_api(render):
    got = reach(render(values={"autoscaler": {"actuator": {"kind": "triton"}}}))
    assert got["autoscaler"] == {("triton", 8000), ("triton", 8002), ("balancer", 8000), ("balancer", 8001)}


@pytest.mark.parametrize("mode", ["keda", "hpa"])
def test_without_the_autoscaler_prometheus_alone_reads_the_metrics(render, mode):
    rendered = render(values={"scaling": {"mode": mode}})
    names = [p["metadata"]["name"] for p in rendered.all("NetworkPolicy")]
    assert names == ["demo-nlg-serving-triton", "demo-nlg-serving-balancer"]
    got = reach(rendered)
    assert got["prometheus"] == {("triton", 8002), ("balancer", 8404)}
    assert got["client"] == {("balancer", 8000), ("balancer", 8001)}


def test_the_peers_are_the_values_lists(render):
    values = {"networkPolicy": {
        "tritonClients": [{"namespaceSelector": {"matchLabels": {"team": "apps"}},
                           "podSelector": {"matchLabels": {"app": "frontend"}}}],
        "prometheus": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}],
        "autoscalerClients": [],
    }}  # fmt: skip
    rendered = render(values=values)
    policies = rendered.all("NetworkPolicy")
    triton = workload_pod(rendered, "Deployment", "-balancer")  # what the clients connect to
    autoscaler = workload_pod(rendered, "Deployment", "-autoscaler")
    frontend = Pod({"app": "frontend"}, "shop", {"team": "apps"})
    assert admits(policies, frontend, triton, 8001)
    assert not admits(policies, Pod({"app": "frontend"}, "shop"), triton, 8001)  # not the team's namespace
    assert not admits(policies, Pod(CLIENT, NAMESPACE), triton, 8001)  # the default label no longer
    assert admits(policies, Pod({}, "observability"), workload_pod(rendered, "Deployment", "-triton"), 8002)
    # An empty list admits none (an empty `from` would admit everyone): the API's rule is left out.
    assert not admits(policies, Pod(API_CLIENT, NAMESPACE), autoscaler, 8080)
    assert not admits(policies, Pod({}, "anywhere"), autoscaler, 8080)
    rules = rendered.one("NetworkPolicy", "-autoscaler")["spec"]["ingress"]
    assert all(rule["from"] for rule in rules)


def test_an_empty_client_list_leaves_grpc_to_no_one_but_the_balancer_and_the_charts_test(render):
    rendered = render(values={"networkPolicy": {"tritonClients": []}})
    got = reach(rendered)
    reached = {name: {p for p in ports if p[1] == 8001} for name, ports in got.items()}
    assert {name for name, ports in reached.items() if ports} == {"balancer", "helm test"}
    assert got["helm test"] == {("triton", 8000), ("balancer", 8000), ("balancer", 8001)}


def test_ports_closed_by_the_values_have_no_rule(render):
    rendered = render(values={"autoscaler": {"api": {"port": 0}, "metrics": {"port": 0}}})
    assert rendered.one("NetworkPolicy", "-autoscaler")["spec"]["ingress"] == []


def test_the_switch_turns_the_policies_off(render):
    assert render(values={"networkPolicy": {"enabled": False}}).all("NetworkPolicy") == []


def test_the_policies_validate_and_select_the_pods_they_guard(render):
    rendered = render()
    for policy in rendered.all("NetworkPolicy"):
        validate_manifest(policy)
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: the API server, Prometheus
    for suffix in ("-triton", "-balancer", "-autoscaler"):
        pod = workload_pod(rendered, "Deployment", suffix)
        others = [p for p in rendered.all("NetworkPolicy") if not p["metadata"]["name"].endswith(suffix)]
        assert selects(rendered.one("NetworkPolicy", suffix)["spec"]["podSelector"], pod.labels)
        assert not any(selects(p["spec"]["podSelector"], pod.labels) for p in others)


def test_the_default_prometheus_peer_is_in_the_namespace_of_prometheus_url(chart_values):
    """The Prometheus that KEDA and the prometheus source query is the one allowed to scrape."""
    host = urlsplit(chart_values["prometheus"]["url"]).hostname or ""
    service, namespace = host.split(".")[:2]
    (peer,) = chart_values["networkPolicy"]["prometheus"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
    assert service == "prometheus-operated"  # the Prometheus Operator's Service; its pods carry:
    assert peer["podSelector"]["matchLabels"] == PROMETHEUS


@pytest.mark.parametrize(
    "peer",
    [{}, {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}, {"podSelector": {"matchLabels": {"a": 1}}}],
    ids=["empty", "ipblock-with-selector", "label-not-a-string"],
)
def test_a_bad_peer_is_refused_by_the_schema(helm, peer):
    with pytest.raises(HelmError, match="networkPolicy/tritonClients/0"):
        helm.template(values={"networkPolicy": {"tritonClients": [peer]}})


# --- the evaluator itself ---------------------------------------------------------------------------

POLICY: dict[str, Any] = {
    "spec": {
        "podSelector": {"matchLabels": {"app": "db"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"ports": [{"port": "sql"}], "from": [{"podSelector": {"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["api"]},
            {"key": "banned", "operator": "DoesNotExist"},
        ]}}]}],
    }
}  # fmt: skip
DB = Pod({"app": "db"}, "ns", ports={"sql": 5432})


@pytest.mark.parametrize(
    ("source", "port", "want"),
    [
        (Pod({"tier": "api"}, "ns"), 5432, True),
        (Pod({"tier": "api"}, "ns"), 5433, False),
        (Pod({"tier": "web"}, "ns"), 5432, False),
        (Pod({"tier": "api", "banned": "1"}, "ns"), 5432, False),
        (Pod({"tier": "api"}, "other"), 5432, False),
    ],
    ids=["allowed", "other-port", "other-tier", "banned", "other-namespace"],
)
def test_the_evaluator_follows_the_rules(source, port, want):
    assert admits([POLICY], source, DB, port) is want


def test_an_unselected_pod_is_not_isolated_and_an_empty_from_admits_all():
    assert admits([POLICY], Pod({}, "ns"), Pod({"app": "web"}, "ns"), 80)
    open_rule = {"spec": {"podSelector": {}, "ingress": [{"from": []}]}}
    assert admits([open_rule], Pod({}, "elsewhere"), DB, 1)
    assert not admits([{"spec": {"podSelector": {}, "ingress": []}}], Pod({}, "ns"), DB, 1)
