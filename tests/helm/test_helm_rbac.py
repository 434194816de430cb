"""The autoscaler's Role is exactly what the autoscaler uses.

The autoscaler, configured by the file the chart renders, runs a round and one scale-up against kmock's
Kubernetes API emulator (over real HTTP, with the official client); every request it makes must be
allowed by the rendered Role, and every rule of the Role must be used by some request. So a new API
call in the autoscaler fails here until the chart grants it, and a grant it no longer needs fails too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from helm_testkit import NAMESPACE, RELEASE, ROOT, Rendered, pod_spec

from autoscaler.app import App
from autoscaler.config import AutoscalerConfig, Registration, parse_config

pytestmark = pytest.mark.integration

AUTOSCALER = f"{RELEASE}-nlg-serving-autoscaler"
TRITON = f"{RELEASE}-nlg-serving-triton"


def kube_emulator() -> Any:
    """The autoscaler tests' KubeEmulator (kmock on a loopback port), imported under the same module
    name those tests use, so one copy serves both suites."""
    testkit_dir = str(ROOT / "tests" / "autoscaler")
    if testkit_dir not in sys.path:
        sys.path.append(testkit_dir)
    return importlib.import_module("autoscaler_testkit").KubeEmulator()


@dataclass(frozen=True)
class Access:
    """One API request as RBAC sees it."""

    verb: str
    group: str
    resource: str  # with its subresource: deployments/scale
    name: str | None

    @classmethod
    def of(cls, method: str, path: str, params: Mapping[str, str]) -> Access:
        parts = path.strip("/").split("/")
        # /api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]] or /apis/<group>/<version>/namespaces/...
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        assert rest[0] == "namespaces" and rest[1] == NAMESPACE, (
            f"a call outside the release namespace: {path}"
        )
        plural, name, sub = (rest[2:] + [None, None])[:3]
        resource = f"{plural}/{sub}" if sub else plural
        if method == "GET":
            verb = "get" if name else ("watch" if params.get("watch") in ("true", "1") else "list")
        else:
            verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
        return cls(verb, group, resource, name)

    def allowed_by(self, rule: Mapping[str, Any]) -> bool:
        names = rule.get("resourceNames")
        return (
            self.group in rule["apiGroups"]
            and self.resource in rule["resources"]
            and self.verb in rule["verbs"]
            and (not names or self.name in names)
        )


def rendered_config(rendered: Rendered) -> AutoscalerConfig:
    return parse_config(yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml")))


def autoscaler_accesses(config: AutoscalerConfig) -> set[Access]:
    """Every API request of one round and one scale-up (1 -> 2), leader election included."""
    with kube_emulator() as cluster:
        cluster.add_deployment(TRITON, replicas=1, namespace=NAMESPACE)
        others = [name for name in config.api.deployments if name != TRITON]
        for name in others:
            cluster.add_deployment(name, replicas=1, namespace=NAMESPACE)
        cluster.objects["discovery.k8s.io/v1/endpointslices", NAMESPACE, f"{TRITON}-abcde"] = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": f"{TRITON}-abcde", "labels": {"kubernetes.io/service-name": TRITON}},
            "addressType": "IPv4",
            "endpoints": [],
            "ports": [{"name": "metrics", "port": 8002}],
        }
        store = config.target_store
        if store.kind == "configmap":  # the chart creates it
            cluster.objects["v1/configmaps", store.namespace, store.configmap] = {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": store.configmap}, "data": {},
            }  # fmt: skip
        app = App(config, kube=cluster.client(), identity=f"{AUTOSCALER}-0")
        try:
            controller = app.controller
            controller.run_once()  # acquire the Lease, read the scale, list the pods
            controller.run_once()  # renew the Lease
            if config.actuator.kind == "kubernetes":
                controller.actuator.scale(config.actuator.deployment, 2, expected=1)
            if config.api.port:  # a target registered through the REST API, then removed
                controller.targets.register(Registration(model_id="bert", deployment="bert"))
                controller.targets.unregister("bert")
            if config.actuator.kind == "kubernetes":  # the Deployments API targets may name, scaled
                for name in others:
                    controller.actuator.scale(name, 2, expected=1)
        finally:
            app.stop()  # releases the Lease
        return {Access.of(r.method.value, r.url.path, dict(r.params)) for r in list(cluster.emulator)}


def check_least_privilege(rules: Iterable[Mapping[str, Any]], accesses: set[Access]) -> None:
    rules = list(rules)
    denied = [a for a in accesses if not any(a.allowed_by(rule) for rule in rules)]
    assert not denied, f"the Role does not allow these calls of the autoscaler: {denied}"
    for rule in rules:
        for verb in rule["verbs"]:
            one_verb = {**rule, "verbs": [verb]}
            assert any(a.allowed_by(one_verb) for a in accesses), f"granted but never used: {verb} in {rule}"


CASES = [
    ("defaults", []),
    ("static-targets", ["autoscaler.source.static_targets[0]=127.0.0.1:9"]),
    ("no-leader-election", ["autoscaler.leader_election.enabled=false"]),
    ("dry-run", ["autoscaler.actuator.kind=none"]),
    ("no-api", ["autoscaler.api.port=0"]),
    ("api-deployments", ["autoscaler.api.deployments={bert,gptj}"]),
]


@pytest.mark.parametrize("assignments", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_role_allows_exactly_the_autoscalers_calls(render, assignments):
    rendered = render(*[a for s in assignments for a in ("--set", s)])
    accesses = autoscaler_accesses(rendered_config(rendered))
    check_least_privilege(rendered.one("Role", "-autoscaler")["rules"], accesses)


def test_default_role(render):
    """What the defaults grant, spelled out for review."""
    assert render().one("Role", "-autoscaler")["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": [TRITON],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [AUTOSCALER],
            "verbs": ["get", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [f"{RELEASE}-nlg-serving-targets"],
            "verbs": ["get", "patch"],
        },
    ]


def test_prometheus_source_and_triton_actuator_need_no_api_access(render):
    rendered = render(
        "--set", "autoscaler.source.kind=prometheus",
        "--set", "autoscaler.actuator.kind=triton",
        "--set", "autoscaler.leader_election.enabled=false",
        "--set", "autoscaler.api.port=0",
    )  # fmt: skip
    assert rendered.one("Role", "-autoscaler")["rules"] == []


def test_role_is_bound_to_the_autoscalers_service_account_only(render):
    rendered = render()
    binding = rendered.one("RoleBinding", "-autoscaler")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUTOSCALER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AUTOSCALER, "namespace": NAMESPACE}]
    assert pod_spec(rendered.one("Deployment", "-autoscaler"))["serviceAccountName"] == AUTOSCALER
    # Triton talks to no API server: no token in its pods, no ClusterRole anywhere.
    assert pod_spec(rendered.one("Deployment", "-triton"))["automountServiceAccountToken"] is False
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(rendered.kinds())
    for rule in rendered.one("Role")["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]


@pytest.mark.parametrize(
    ("assignments", "store"),
    [([], "configmap"), (["autoscaler.replicas=2"], "configmap"), (["autoscaler.api.port=0"], "memory")],
    ids=["defaults", "two-replicas", "no-api"],
)
def test_the_targets_configmap_is_the_one_the_config_names_and_the_role_allows(render, assignments, store):
    rendered = render(*[a for s in assignments for a in ("--set", s)])
    config = rendered_config(rendered)  # parses: two replicas with the API on get the shared store
    assert config.target_store.kind == store
    made = [d for d in rendered.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-targets")]
    if store == "memory":
        assert made == []
        return
    assert [d["metadata"]["name"] for d in made] == [config.target_store.configmap]
    assert config.target_store.namespace == NAMESPACE
    assert "data" not in made[0]  # the autoscaler's keys: an upgrade's three-way merge leaves them
    rules = [r for r in rendered.one("Role", "-autoscaler")["rules"] if r["resources"] == ["configmaps"]]
    assert [r["resourceNames"] for r in rules] == [[config.target_store.configmap]]


@pytest.mark.parametrize(
    ("assignments", "names"),
    [([], [TRITON]), (["autoscaler.api.deployments={bert}"], [TRITON, "bert"])],
    ids=["defaults", "one-more"],
)
def test_api_targets_may_name_exactly_the_deployments_the_role_lets_it_scale(render, assignments, names):
    rendered = render(*[a for s in assignments for a in ("--set", s)])
    rules = [r for r in rendered.one("Role", "-autoscaler")["rules"] if r["resources"] == ["deployments"]]
    assert [r["resourceNames"] for r in rules] == [names]
    assert list(rendered_config(rendered).api.deployments) == names
