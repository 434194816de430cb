"""Helpers for the Helm chart's tests: run helm, parse what it renders, check manifests.

helm is found as tests/external_tools.py says (`.tools/bin/helm`, else PATH). Manifests of built-in
kinds are checked with kubernetes-validate against the Kubernetes OpenAPI schema; the custom
resources it has no schema for (KEDA's ScaledObject, the Prometheus Operator's ServiceMonitor,
PodMonitor and PrometheusRule, the Gateway API's HTTPRoute and its Inference Extension's InferencePool)
are checked field by field here.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "nlg-serving"
RELEASE = "demo"
NAMESPACE = "serving"
#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema
#: kubernetes-validate ships: every manifest must validate against both.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
CUSTOM_KINDS = ("ScaledObject", "ServiceMonitor", "PodMonitor", "PrometheusRule", "InferencePool", "HTTPRoute")

class HelmError(Exception):
    """helm exited non-zero; the message is its output (lint reports on stdout, errors on stderr)."""


@dataclass(frozen=True)
class Helm:
    binary: str

    def run(self, *args: str, values: Mapping[str, Any] | None = None) -> str:
        """Runs helm with `args` (plus `-f <values file>` when given); stdout, or HelmError."""
        with tempfile.TemporaryDirectory() as tmp:
            extra: list[str] = []
            if values is not None:
                path = Path(tmp) / "values.yaml"
                path.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
                extra = ["-f", str(path)]
            proc = subprocess.run(
                [self.binary, *args, *extra], capture_output=True, text=True, timeout=60, check=False
            )
        if proc.returncode != 0:
            raise HelmError("\n".join(s for s in (proc.stdout.strip(), proc.stderr.strip()) if s))
        return proc.stdout

    def template(self, *args: str, values: Mapping[str, Any] | None = None) -> str:
        return self.run(
            "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSIONS[0],
            *args, values=values,
        )  # fmt: skip


@dataclass(frozen=True)
class Rendered:
    """The manifests of one `helm template`, in order, with lookups by kind and name suffix."""

    docs: tuple[dict[str, Any], ...]

    @classmethod
    def parse(cls, text: str) -> Rendered:
        return cls(tuple(d for d in yaml.safe_load_all(text) if d))

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.docs]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def maybe(self, kind: str, suffix: str = "") -> dict[str, Any] | None:
        found = [d for d in self.all(kind) if d["metadata"]["name"].endswith(suffix)]
        assert len(found) <= 1, f"several {kind} named *{suffix}: {[d['metadata']['name'] for d in found]}"
        return found[0] if found else None

    def one(self, kind: str, suffix: str = "") -> dict[str, Any]:
        """The single manifest of `kind` whose name ends with `suffix` (e.g. "-triton")."""
        found = self.maybe(kind, suffix)
        assert found is not None, f"no {kind} named *{suffix}; rendered: {self.kinds()}"
        return found

    def config_map_file(self, suffix: str, key: str) -> str:
        data: str = self.one("ConfigMap", suffix)["data"][key]
        return data


def pod_spec(workload: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec of a Deployment, or of a Pod."""
    spec = workload["spec"]
    return dict(spec["template"]["spec"] if "template" in spec else spec)


def container(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The container or init container `name` of a pod spec."""
    every = [*spec.get("initContainers", []), *spec["containers"]]
    for c in every:
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name!r}; the pod has {[c['name'] for c in every]}")


def env_of(c: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


def validate_builtin(doc: Mapping[str, Any]) -> None:
    """kubernetes-validate, strict (unknown fields are errors), against every version in KUBE_VERSIONS."""
    error = _schema_error(json.dumps(doc, sort_keys=True))
    if error:
        raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']} {error}")


@functools.cache
def _schema_error(doc_json: str) -> str:
    """Memoized on the manifest's text: most variants render many identical objects."""
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(json.loads(doc_json), version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path)
            return f"invalid for Kubernetes {version} at {where}: {e.message}"
    return ""


# --- custom resources: the fields their CRDs define (KEDA 2.x, Prometheus Operator v1) ---------------

_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")
_SCALED_OBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}  # fmt: skip
_ADVANCED = {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
_TRIGGER = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
_PROMETHEUS_METADATA = {
    "serverAddress", "query", "threshold", "activationThreshold", "namespace", "customHeaders",
    "ignoreNullValues", "queryParameters", "unsafeSsl", "timeout",
}  # fmt: skip


def _keys(where: str, obj: Mapping[str, Any], allowed: set[str], required: set[str] | None = None) -> None:
    unknown = set(obj) - allowed
    assert not unknown, f"{where}: unknown fields {sorted(unknown)} (allowed: {sorted(allowed)})"
    missing = (required or set()) - set(obj)
    assert not missing, f"{where}: missing {sorted(missing)}"


def _integer(where: str, value: Any, low: int, high: int = 2**31 - 1) -> None:
    assert isinstance(value, int) and not isinstance(value, bool), f"{where} = {value!r}: must be an integer"
    assert low <= value <= high, f"{where} = {value}: must be in [{low}, {high}]"


def check_hpa_behavior(where: str, behavior: Mapping[str, Any]) -> None:
    """autoscaling/v2 HorizontalPodAutoscalerBehavior, which KEDA embeds in its ScaledObject."""
    _keys(where, behavior, {"scaleUp", "scaleDown"})
    for direction, rules in behavior.items():
        here = f"{where}.{direction}"
        _keys(here, rules, {"stabilizationWindowSeconds", "selectPolicy", "policies"})
        _integer(f"{here}.stabilizationWindowSeconds", rules.get("stabilizationWindowSeconds", 0), 0, 3600)
        assert rules.get("selectPolicy", "Max") in ("Max", "Min", "Disabled"), here
        for i, policy in enumerate(rules.get("policies", [])):
            fields = {"type", "value", "periodSeconds"}
            _keys(f"{here}.policies[{i}]", policy, fields, fields)
            assert policy["type"] in ("Pods", "Percent"), f"{here}.policies[{i}].type"
            _integer(f"{here}.policies[{i}].value", policy["value"], 1)
            _integer(f"{here}.policies[{i}].periodSeconds", policy["periodSeconds"], 1, 1800)


def check_scaled_object(doc: Mapping[str, Any]) -> None:
    """keda.sh/v1alpha1 ScaledObject, as its CRD and KEDA's Prometheus scaler define it."""
    assert doc["apiVersion"] == "keda.sh/v1alpha1"
    spec = doc["spec"]
    _keys("spec", spec, _SCALED_OBJECT_SPEC, {"scaleTargetRef", "triggers"})
    target_fields = {"apiVersion", "kind", "name", "envSourceContainerName"}
    _keys("spec.scaleTargetRef", spec["scaleTargetRef"], target_fields, {"name"})
    for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
        if key in spec:
            _integer(f"spec.{key}", spec[key], 0)
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100), "minReplicaCount > max"
    advanced = spec.get("advanced", {})
    _keys("spec.advanced", advanced, _ADVANCED)
    hpa_config = advanced.get("horizontalPodAutoscalerConfig", {})
    _keys("spec.advanced.horizontalPodAutoscalerConfig", hpa_config, {"name", "behavior"})
    check_hpa_behavior("spec.advanced.horizontalPodAutoscalerConfig.behavior", hpa_config.get("behavior", {}))
    assert spec["triggers"], "spec.triggers: at least one"
    names = [t.get("name") for t in spec["triggers"]]
    assert len(names) == len(set(names)), f"trigger names repeat: {names}"
    for i, trigger in enumerate(spec["triggers"]):
        here = f"spec.triggers[{i}]"
        _keys(here, trigger, _TRIGGER, {"type", "metadata"})
        assert trigger.get("metricType", "AverageValue") in ("AverageValue", "Value", "Utilization"), here
        metadata = trigger["metadata"]
        # The CRD types metadata as map[string]string: the API server rejects a number here.
        for key, value in metadata.items():
            assert isinstance(value, str), f"{here}.metadata.{key} = {value!r}: must be a string"
        if trigger["type"] == "prometheus":
            _keys(f"{here}.metadata", metadata, _PROMETHEUS_METADATA, {"serverAddress", "query", "threshold"})
            assert re.match(r"^https?://", metadata["serverAddress"]), f"{here}.metadata.serverAddress"
            assert _NUMBER.match(metadata["threshold"]), f"{here}.metadata.threshold: not a number"


def check_monitor(doc: Mapping[str, Any]) -> None:
    """monitoring.coreos.com/v1 ServiceMonitor or PodMonitor (the fields this chart uses)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    endpoints = "endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    spec = doc["spec"]
    _keys("spec", spec, {"selector", "namespaceSelector", "jobLabel", endpoints}, {"selector", endpoints})
    _keys("spec.selector", spec["selector"], {"matchLabels", "matchExpressions"})
    for i, expr in enumerate(spec["selector"].get("matchExpressions", [])):
        here = f"spec.selector.matchExpressions[{i}]"
        _keys(here, expr, {"key", "operator", "values"}, {"key", "operator"})
        assert expr["operator"] in ("In", "NotIn", "Exists", "DoesNotExist")
    for i, endpoint in enumerate(spec[endpoints]):
        here = f"spec.{endpoints}[{i}]"
        _keys(here, endpoint, {"port", "path", "interval", "scrapeTimeout", "scheme"}, {"port"})
        if "interval" in endpoint:
            assert _DURATION.match(endpoint["interval"]), f"{here}.interval = {endpoint['interval']!r}"


def check_prometheus_rule(doc: Mapping[str, Any]) -> None:
    """monitoring.coreos.com/v1 PrometheusRule (the fields this chart uses)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    _keys("spec", doc["spec"], {"groups"}, {"groups"})
    names = [g.get("name") for g in doc["spec"]["groups"]]
    assert len(names) == len(set(names)), f"group names repeat: {names}"
    for i, group in enumerate(doc["spec"]["groups"]):
        here = f"spec.groups[{i}]"
        _keys(here, group, {"name", "interval", "rules", "partial_response_strategy", "limit"}, {"name", "rules"})
        if "interval" in group:
            assert _DURATION.match(group["interval"]), f"{here}.interval = {group['interval']!r}"
        for j, rule in enumerate(group["rules"]):
            fields = {"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            _keys(f"{here}.rules[{j}]", rule, fields, {"expr"})
            assert ("record" in rule) != ("alert" in rule), f"{here}.rules[{j}]: one of record, alert"
            assert re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", rule.get("record", "x")), f"{here}.rules[{j}].record"
            assert isinstance(rule["expr"], str) and rule["expr"].strip(), f"{here}.rules[{j}].expr"


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _port_number(where: str, port: Mapping[str, Any]) -> None:
    _keys(where, port, {"number"}, {"number"})
    _integer(f"{where}.number", port["number"], 1, 65535)


def check_inference_pool(doc: Mapping[str, Any]) -> None:
    """inference.networking.k8s.io/v1 InferencePool (Gateway API Inference Extension v1.0)."""
    assert doc["apiVersion"] == "inference.networking.k8s.io/v1"
    spec = doc["spec"]
    _keys(
        "spec", spec, {"selector", "targetPorts", "endpointPickerRef"}, {"selector", "targetPorts", "endpointPickerRef"}
    )
    _keys("spec.selector", spec["selector"], {"matchLabels"}, {"matchLabels"})
    assert spec["selector"]["matchLabels"], "spec.selector.matchLabels: at least one label"
    assert len(spec["targetPorts"]) == 1, "spec.targetPorts: exactly one port in v1.0"
    _port_number("spec.targetPorts[0]", spec["targetPorts"][0])
    ref = spec["endpointPickerRef"]
    _keys("spec.endpointPickerRef", ref, {"group", "kind", "name", "port", "failureMode"}, {"name"})
    if ref.get("kind", "Service") == "Service":
        assert "port" in ref, "spec.endpointPickerRef.port: required when kind is Service"
    _port_number("spec.endpointPickerRef.port", ref["port"])
    assert ref.get("failureMode", "FailClose") in ("FailOpen", "FailClose"), "spec.endpointPickerRef.failureMode"


def check_http_route(doc: Mapping[str, Any]) -> None:
    """gateway.networking.k8s.io/v1 HTTPRoute (the fields this chart uses)."""
    assert doc["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = doc["spec"]
    _keys("spec", spec, {"parentRefs", "hostnames", "rules"}, {"parentRefs", "rules"})
    for i, parent in enumerate(spec["parentRefs"]):
        here = f"spec.parentRefs[{i}]"
        _keys(here, parent, {"group", "kind", "namespace", "name", "sectionName", "port"}, {"name"})
        assert _DNS_LABEL.match(parent.get("namespace", "x")), f"{here}.namespace"
    for i, rule in enumerate(spec["rules"]):
        here = f"spec.rules[{i}]"
        _keys(here, rule, {"name", "matches", "filters", "backendRefs", "timeouts"})
        for j, match in enumerate(rule.get("matches", [])):
            _keys(f"{here}.matches[{j}]", match, {"path", "headers", "queryParams", "method"})
            path = match.get("path", {})
            _keys(f"{here}.matches[{j}].path", path, {"type", "value"})
            assert path.get("type", "PathPrefix") in ("Exact", "PathPrefix", "RegularExpression")
            assert path.get("value", "/").startswith("/"), f"{here}.matches[{j}].path.value"
        for j, backend in enumerate(rule.get("backendRefs", [])):
            _keys(
                f"{here}.backendRefs[{j}]",
                backend,
                {"group", "kind", "name", "namespace", "port", "weight", "filters"},
                {"name"},
            )


def validate_manifest(doc: Mapping[str, Any]) -> None:
    """One rendered manifest: the OpenAPI schema for built-in kinds, the checks above for custom ones."""
    assert doc.get("apiVersion") and doc.get("kind"), f"not a Kubernetes object: {doc}"
    name = doc["metadata"]["name"]
    assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name) and len(name) <= 63, f"bad name {name!r}"
    if doc["kind"] == "ScaledObject":
        check_scaled_object(doc)
    elif doc["kind"] in ("ServiceMonitor", "PodMonitor"):
        check_monitor(doc)
    elif doc["kind"] == "PrometheusRule":
        check_prometheus_rule(doc)
    elif doc["kind"] == "InferencePool":
        check_inference_pool(doc)
    elif doc["kind"] == "HTTPRoute":
        check_http_route(doc)
    else:
        validate_builtin(doc)
