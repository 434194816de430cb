"""The chart lints, renders in every scaling mode and variant, and every manifest is a valid object."""

from __future__ import annotations

import copy

import pytest
import yaml
from helm_testkit import CHART, KUBE_VERSIONS, NAMESPACE, RELEASE, Helm, validate_builtin, validate_manifest
from variants import VARIANTS


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_every_manifest_is_valid(render, variant):
    rendered = render(values=VARIANTS[variant])
    assert rendered.docs, "nothing rendered"
    for doc in rendered.docs:
        validate_manifest(doc)


@pytest.mark.parametrize("mode", ["autoscaler", "keda", "hpa"])
def test_helm_lint_passes(helm: Helm, mode):
    out = helm.run("lint", "--strict", str(CHART), "--set", f"scaling.mode={mode}")
    assert "0 chart(s) failed" in out


def test_defaults_render_the_whole_release(render):
    rendered = render()
    names = {(d["kind"], d["metadata"]["name"]) for d in rendered.docs}
    base = f"{RELEASE}-nlg-serving"
    assert names == {
        ("Deployment", f"{base}-triton"),
        ("Service", f"{base}-triton"),
        ("Service", f"{base}-triton-pods"),
        ("PodDisruptionBudget", f"{base}-triton"),
        ("NetworkPolicy", f"{base}-triton"),
        ("NetworkPolicy", f"{base}-autoscaler"),
        ("NetworkPolicy", f"{base}-balancer"),
        ("Deployment", f"{base}-balancer"),
        ("ConfigMap", f"{base}-balancer"),
        ("PodDisruptionBudget", f"{base}-balancer"),
        ("Deployment", f"{base}-autoscaler"),
        ("Service", f"{base}-autoscaler"),
        ("ConfigMap", f"{base}-autoscaler"),
        ("ConfigMap", f"{base}-targets"),
        ("ServiceAccount", f"{base}-autoscaler"),
        ("Role", f"{base}-autoscaler"),
        ("RoleBinding", f"{base}-autoscaler"),
        ("Secret", f"{base}-api-token"),
        ("ConfigMap", f"{base}-dashboard"),
        ("Pod", f"{base}-test-stream"),
    }
    # Namespaced objects only: the chart needs no cluster-wide permission to install.
    assert not {"ClusterRole", "ClusterRoleBinding", "Namespace"} & set(rendered.kinds())


def test_names_stay_within_63_characters(render):
    long_release = {"fullnameOverride": "x" * 80}
    for doc in render(values=long_release).docs:
        validate_manifest(doc)


def test_every_object_carries_the_release_labels(render):
    for doc in render(values=VARIANTS["service-monitor"]).docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE, doc["metadata"]["name"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/name"] == "nlg-serving"


def test_validation_is_not_vacuous(render):
    """kubernetes-validate (strict) does reject a misspelled field of a rendered Deployment."""
    deployment = copy.deepcopy(render().one("Deployment", "-triton"))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 30
    with pytest.raises(AssertionError, match="terminationGracePeriod"):
        validate_builtin(deployment)


def test_objects_go_to_the_release_namespace(render):
    """No manifest pins a namespace, so `helm install -n` decides; references use the release's."""
    rendered = render()
    assert all("namespace" not in d["metadata"] for d in rendered.docs)
    binding = rendered.one("RoleBinding")
    assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_manifests_are_checked_against_the_charts_oldest_kubernetes():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["kubeVersion"] == f">={KUBE_VERSIONS[0]}-0"
