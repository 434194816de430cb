"""scaling.mode: exactly one scaler owns the Triton Deployment, and each translates autoscaler.policy."""

from __future__ import annotations

import re

import pytest
from helm_testkit import NAMESPACE, RELEASE, HelmError, check_scaled_object

from autoscaler.config import SIGNAL_METRICS

TRITON = f"{RELEASE}-nlg-serving-triton"
# What each mode renders; the other modes' objects must be absent.
AUTOSCALER_KINDS = ("Deployment", "ConfigMap", "Role", "RoleBinding", "ServiceAccount", "Service")
MODE_OBJECTS = {
    "autoscaler": {(kind, "-autoscaler") for kind in AUTOSCALER_KINDS},
    "keda": {("ScaledObject", "-triton")},
    "hpa": {("HorizontalPodAutoscaler", "-triton")},
}


@pytest.mark.parametrize("mode", list(MODE_OBJECTS))
def test_exactly_one_scaling_mode_is_active(render, mode):
    rendered = render("--set", f"scaling.mode={mode}")
    present = {
        (kind, suffix)
        for objects in MODE_OBJECTS.values()
        for kind, suffix in objects
        if rendered.maybe(kind, suffix) is not None
    }
    assert present == MODE_OBJECTS[mode]


@pytest.mark.parametrize("mode", list(MODE_OBJECTS))
def test_the_scaler_owns_the_replica_count(render, mode):
    """The Triton Deployment sets no replicas, so `helm upgrade` never undoes a scaling decision."""
    triton = render("--set", f"scaling.mode={mode}").one("Deployment", "-triton")
    assert "replicas" not in triton["spec"]


def test_unknown_mode_is_rejected(helm):
    with pytest.raises(HelmError, match=r"(?s)/scaling/mode.*'autoscaler', 'keda', 'hpa'"):
        helm.template("--set", "scaling.mode=vpa")


# --- KEDA ------------------------------------------------------------------------------------------


def test_scale_to_zero_is_keda_s(render, helm):
    """The autoscaler cannot scale up from zero pods (no pod, no metric): the chart sends 0 to KEDA."""
    spec = render("--set", "scaling.mode=keda", "--set", "autoscaler.policy.min_deployment_count=0")
    assert spec.one("ScaledObject", "-triton")["spec"]["minReplicaCount"] == 0
    with pytest.raises(HelmError, match=r"min_deployment_count \(0\) must be at least 1 with scaling.mode=autoscaler"
                       r".*use scaling.mode=keda to scale to zero"):  # fmt: skip
        helm.template("--set", "autoscaler.policy.min_deployment_count=0")


def test_keda_scales_the_triton_deployment_on_per_token_latency(render):
    spec = render("--set", "scaling.mode=keda").one("ScaledObject", "-triton")["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": TRITON}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus"
    # Value, not AverageValue: desired = ceil(replicas * latency / threshold), the HPA rule the thesis uses.
    assert trigger["metricType"] == "Value"
    meta = trigger["metadata"]
    assert meta["threshold"] == "25"
    assert meta["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    selector = f'{{namespace="{NAMESPACE}",model="gpt2"}}'
    assert meta["query"] == (
        f"1000 * sum(rate(nlg_time_per_output_token_seconds_sum{selector}[60s])) / "
        f"sum(rate(nlg_time_per_output_token_seconds_count{selector}[60s])) >= 0 or vector(0)"
    )


@pytest.mark.parametrize(
    ("sets", "threshold", "query_part"),
    [
        (["autoscaler.policy.threshold=30"], "30", "nlg_time_per_output_token_seconds_sum"),
        (["autoscaler.policy.threshold=22.5"], "22.5", "nlg_time_per_output_token_seconds_sum"),
        (
            ["autoscaler.policy.type=request", "autoscaler.policy.threshold=2000"],
            "2000",
            "nlg_request_latency_seconds_sum",
        ),
        (["autoscaler.policy.time_window=30"], "25", "[30s]"),
        (["autoscaler.policy.time_window=7.5"], "25", "[7500ms]"),
        (["autoscaler.policy.time_window=4.35"], "25", "[4350ms]"),
        (["model.name=gpt2-xl"], "25", 'model="gpt2-xl"'),
        (['prometheus.extraMatchers=job="triton"'], "25", 'model="gpt2",job="triton"}'),
    ],
    ids=[
        "threshold",
        "fractional-threshold",
        "request-policy",
        "window",
        "fractional-window",
        "float-rounding-window",
        "model",
        "extra-matchers",
    ],
)
def test_keda_trigger_follows_the_policy(render, sets, threshold, query_part):
    args = ["--set", "scaling.mode=keda"] + [a for s in sets for a in ("--set", s)]
    [trigger] = render(*args).one("ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["threshold"] == threshold
    assert query_part in trigger["metadata"]["query"]


SIGNAL_QUERIES = [
    ("request_p50", "histogram_quantile(0.50, sum by (le) (rate(nlg_request_latency_seconds_bucket"),
    ("pertoken_p99", "histogram_quantile(0.99, sum by (le) (rate(nlg_time_per_output_token_seconds_bucket"),
    ("ttft_mean", "sum(rate(nlg_time_to_first_token_seconds_sum"),
    ("itl_p99", "histogram_quantile(0.99, sum by (le) (rate(nlg_inter_token_latency_seconds_bucket"),
    ("waiting_per_replica", "avg(nlg_requests_waiting{"),
    ("kv_usage", "avg(nlg_kv_cache_usage_ratio{"),
]


@pytest.mark.parametrize(("metric", "query_part"), SIGNAL_QUERIES, ids=[m for m, _ in SIGNAL_QUERIES])
def test_keda_adds_one_trigger_per_signal(render, metric, query_part):
    """Signals combine as in the autoscaler: the HPA takes the largest desired count over triggers."""
    values = {
        "scaling": {"mode": "keda"},
        "autoscaler": {"policy": {"signals": [{"metric": metric, "target": 0.5}]}},
    }
    primary, extra = render(values=values).one("ScaledObject")["spec"]["triggers"]
    assert primary["name"] == "policy-pertoken-mean"
    assert extra["name"] == "signal-" + metric.replace("_", "-")
    assert extra["metadata"]["threshold"] == "0.5"
    assert query_part in extra["metadata"]["query"]
    # One element, whatever Prometheus holds: KEDA rejects a query that returns several.
    assert extra["metadata"]["query"].endswith("or vector(0)")


def test_every_signal_the_autoscaler_knows_has_a_query(render):
    # Every metric, the policy's own included (a signal may repeat it with another target).
    signals = [{"metric": m, "target": 0.5} for m in SIGNAL_METRICS]
    values = {"scaling": {"mode": "keda"}, "autoscaler": {"policy": {"signals": signals}}}
    scaled_object = render(values=values).one("ScaledObject")
    check_scaled_object(scaled_object)  # trigger names must be unique
    triggers = scaled_object["spec"]["triggers"]
    assert [t["name"] for t in triggers] == ["policy-pertoken-mean"] + [
        "signal-" + m.replace("_", "-") for m in SIGNAL_METRICS
    ]
    for trigger in triggers:
        # queue_mean is Triton's own nv_inference_* (docs/backends.md); every other signal is the model's.
        family = "nv_inference" if trigger["name"] == "signal-queue-mean" else "nlg"
        assert re.search(family + r"_[a-z_]+\{namespace=", trigger["metadata"]["query"]), trigger["name"]


def test_policy_becomes_hpa_behavior(render):
    behavior = render("--set", "scaling.mode=keda").one("ScaledObject")["spec"]["advanced"][
        "horizontalPodAutoscalerConfig"
    ]["behavior"]
    up = [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ]
    down = [
        {"type": "Pods", "value": 1, "periodSeconds": 60},
        {"type": "Percent", "value": 100, "periodSeconds": 60},
    ]
    assert behavior == {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": up},
        "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Min", "policies": down},
    }


def test_zero_limits_disable_a_direction(render):
    values = {
        "scaling": {"mode": "hpa"},
        "autoscaler": {
            "policy": {
                "scale_down": {"max_pods": 0, "max_percent": 0},
                "scale_up": {"max_pods": 2, "max_percent": 0},
            }
        },
    }
    behavior = render(values=values).one("HorizontalPodAutoscaler")["spec"]["behavior"]
    assert behavior["scaleDown"] == {"stabilizationWindowSeconds": 300, "selectPolicy": "Disabled"}
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 15}]


# --- HPA -------------------------------------------------------------------------------------------


def test_hpa_pods_metric(render):
    spec = render("--set", "scaling.mode=hpa").one("HorizontalPodAutoscaler", "-triton")["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": TRITON}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 4)
    [metric] = spec["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "nlg_time_per_output_token_seconds"
    # The adapter serves seconds; 25 ms is the quantity 25m.
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "25m"}


@pytest.mark.parametrize(
    ("sets", "name", "target"),
    [
        ([], "nlg_time_per_output_token_seconds", "25m"),
        (["autoscaler.policy.threshold=22.5"], "nlg_time_per_output_token_seconds", "22500u"),
        (["autoscaler.policy.threshold=25.3"], "nlg_time_per_output_token_seconds", "25300u"),
        (
            ["autoscaler.policy.type=request", "autoscaler.policy.threshold=2000"],
            "nlg_request_latency_seconds",
            "2000m",
        ),
        (["scaling.hpa.metricName=nlg_tpot_seconds"], "nlg_tpot_seconds", "25m"),
    ],
    ids=["default", "fractional", "float-rounding", "request-policy", "renamed"],
)
def test_hpa_external_metric(render, sets, name, target):
    args = ["--set", "scaling.mode=hpa", "--set", "scaling.hpa.metricType=External"]
    [metric] = render(*args, *[a for s in sets for a in ("--set", s)]).one("HorizontalPodAutoscaler")["spec"][
        "metrics"
    ]
    assert metric["type"] == "External"
    assert metric["external"]["metric"] == {
        "name": name,
        "selector": {"matchLabels": {"namespace": NAMESPACE, "model": "gpt2"}},
    }
    assert metric["external"]["target"] == {"type": "Value", "value": target}
