"""The chart lints, renders in every scaling mode and variant, and every manifest is a valid object."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from helm_testkit import CHART, KUBE_VERSIONS, NAMESPACE, RELEASE, Helm, validate_builtin, validate_manifest

# Each variant turns on templates the defaults leave off; ids name what they exercise.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "keda": {"scaling": {"mode": "keda"}},
    "keda-signals": {
        "scaling": {"mode": "keda"},
        "autoscaler": {
            "policy": {
                "type": "request",
                "threshold": 2000,
                "signals": [
                    {"metric": "ttft_p99", "target": 2000},
                    {"metric": "waiting_per_replica", "target": 4},
                    {"metric": "kv_usage", "target": 0.9},
                    {"metric": "pertoken_p90", "target": 30},
                ],
            }
        },
    },
    "hpa-pods": {"scaling": {"mode": "hpa"}},
    "hpa-external": {"scaling": {"mode": "hpa", "hpa": {"metricType": "External"}}},
    "service-monitor": {"monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "pod-monitor-keda": {"monitoring": {"enabled": True, "kind": "PodMonitor"}, "scaling": {"mode": "keda"}},
    "weights-pvc": {"weights": {"source": "pvc", "pvc": {"claimName": "gpt2-xl", "subPath": "gpt2-xl"}}},
    "weights-init": {
        "weights": {
            "source": "initContainer",
            "initContainer": {"image": {"repository": "registry.example/gpt2-xl-weights", "tag": "1"}},
        }
    },
    "package-in-image": {
        "package": {"delivery": "image", "modelRepository": "/opt/nlg/model_repository"},
        "triton": {"image": {"repository": "registry.example/nlg-triton", "tag": "0.1.0", "suffix": ""}},
    },
    "autoscaler-minimal-rbac": {
        "autoscaler": {
            "source": {"kind": "prometheus"},
            "actuator": {"kind": "none"},
            "leader_election": {"enabled": False},
            "api": {"port": 0},
            "metrics": {"port": 0},
        }
    },
    "autoscaler-triton-actuator": {"autoscaler": {"actuator": {"kind": "triton"}}},
    "balancer-off": {"balancer": {"kind": "none"}},
    "balancer-nameservers-monitored": {
        "balancer": {"dns": {"nameservers": ["10.96.0.10:53"]}, "podDisruptionBudget": {"enabled": False}},
        "monitoring": {"enabled": True},
    },
    "inference-pool": {
        "balancer": {
            "kind": "inferencePool",
            "inferencePool": {
                "gateway": {"name": "inference-gateway", "namespace": "gateways", "sectionName": "http"},
                "endpointPicker": {"name": "gpt2-epp"},
            },
        }
    },
    "autoscaler-api-token": {"autoscaler": {"api": {"tokenSecret": {"name": "autoscaler-token"}}}},
    "scheduling": {
        "triton": {
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "extraArgs": ["--log-info=true"],
            "extraEnv": [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}],
            "podAnnotations": {"example.com/team": "nlg"},
        },
        "model": {"settings": {"dtype": "float16", "max_num_seqs": 32}},
        "imagePullSecrets": [{"name": "ngc"}],
        "dashboard": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
    },
}


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
