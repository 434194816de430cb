"""The `helm test` pod, the Grafana dashboard, NOTES.txt, and docs/helm.md's values table."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest
from helm_testkit import CHART, NAMESPACE, RELEASE, ROOT, Helm, container, env_of, pod_spec

from autoscaler.config import SIGNAL_METRICS

TRITON = f"{RELEASE}-nlg-serving-triton"


# --- helm test -------------------------------------------------------------------------------------


def test_helm_test_streams_one_generation(render):
    pod = render().one("Pod", "-test-stream")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod_spec(pod)
    assert spec["restartPolicy"] == "Never"
    c = container(spec, "generate-stream")
    assert c["image"].startswith("curlimages/curl:")
    env = env_of(c)
    assert env["TRITON_URL"] == f"http://{TRITON}:8000"
    assert env["MODEL"] == "gpt2"
    # Triton's vLLM-backend contract: sampling_parameters is a JSON document inside a string.
    body = json.loads(env["BODY"])
    assert body == {
        "text_input": "The quick brown fox",
        "stream": True,
        "sampling_parameters": json.dumps({"max_tokens": 8}, separators=(",", ":")),
    }
    script = c["command"][-1]
    assert "$TRITON_URL/v2/health/ready" in script
    assert '"$TRITON_URL/v2/models/$MODEL/generate_stream"' in script
    assert "text_output" in script and '"error"' in script


@pytest.mark.integration
def test_helm_test_script_passes_against_a_real_triton(render, triton_tiny):
    """The pod's script, run here with the pod's environment, against tritonserver serving the model."""
    c = container(pod_spec(render().one("Pod", "-test-stream")), "generate-stream")
    env = {**env_of(c), "TRITON_URL": f"http://{triton_tiny.http_url}", "PATH": os.environ["PATH"]}
    proc = subprocess.run(c["command"], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^OK: [1-9][0-9]* streamed events$", proc.stdout, flags=re.M), proc.stdout


@pytest.mark.integration
def test_helm_test_script_fails_on_an_unknown_model(render, triton_tiny):
    c = container(pod_spec(render("--set", "model.name=gpt3").one("Pod", "-test-stream")), "generate-stream")
    env = {**env_of(c), "TRITON_URL": f"http://{triton_tiny.http_url}", "PATH": os.environ["PATH"]}
    proc = subprocess.run(c["command"], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode != 0


def test_helm_test_follows_the_service_port_and_model(render):
    env = env_of(
        container(
            pod_spec(render("--set", "service.ports.http=9000", "--set", "model.name=gpt2-xl").one("Pod")),
            "generate-stream",
        )
    )
    assert env["TRITON_URL"] == f"http://{TRITON}:9000"
    assert env["MODEL"] == "gpt2-xl"


# --- Grafana dashboard -----------------------------------------------------------------------------


def documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(nlg_[a-z_]+)` \|", text, flags=re.M))


def dashboard(render, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(render(*args).config_map_file("-dashboard", "nlg-serving.json"))
    return data


def test_dashboard_shows_ttft_per_token_latency_and_replicas(render):
    board = dashboard(render)
    titles = [p["title"] for p in board["panels"]]
    assert {"Time to first token", "Per-token latency", "Replicas"} <= set(titles)
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in board["panels"]}
    assert "nlg_time_to_first_token_seconds_bucket" in exprs["Time to first token"]
    assert "nlg_time_per_output_token_seconds_sum" in exprs["Per-token latency"]
    assert "kube_deployment_spec_replicas" in exprs["Replicas"]


def test_dashboard_queries_only_documented_metrics(render):
    known = documented_metrics()
    assert "nlg_time_per_output_token_seconds" in known
    for panel in dashboard(render)["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\b(nlg_[a-z_]+?)(?:_bucket|_sum|_count)?\{", target["expr"]):
                assert name in known, f"{panel['title']}: {name} is not in docs/metrics.md"


def test_keda_queries_only_documented_metrics(render):
    known = documented_metrics()
    # queue_mean is Triton's own nv_inference_* (docs/backends.md), which tests/helm/test_helm_backends.py checks.
    signals = [{"metric": m, "target": 0.5} for m in SIGNAL_METRICS if m != "queue_mean"]
    values = {"scaling": {"mode": "keda"}, "autoscaler": {"policy": {"signals": signals}}}
    for trigger in render(values=values).one("ScaledObject")["spec"]["triggers"]:
        names = re.findall(r"\b(nlg_[a-z_]+?)(?:_bucket|_sum|_count)?\{", trigger["metadata"]["query"])
        assert names and set(names) <= known, trigger["name"]


def test_dashboard_is_bound_to_this_release(render):
    board = dashboard(render, "--set", "autoscaler.policy.threshold=30")
    constants = {v["name"]: v["query"] for v in board["templating"]["list"] if v["type"] == "constant"}
    assert constants == {"namespace": NAMESPACE, "model": "gpt2", "deployment": TRITON, "threshold": "30"}
    assert RELEASE in board["title"]
    labels = render().one("ConfigMap", "-dashboard")["metadata"]["labels"]
    assert labels["grafana_dashboard"] == "1"


def test_dashboard_can_be_turned_off(render):
    assert render("--set", "dashboard.enabled=false").maybe("ConfigMap", "-dashboard") is None


# --- NOTES.txt ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("autoscaler", "--set autoscaler.policy.threshold="),
        ("keda", f"get scaledobject {TRITON}"),
        ("hpa", f"describe hpa {TRITON}"),
    ],
)
def test_notes_explain_access_and_scaling(helm: Helm, mode, expected):
    out = helm.run(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        "--set",
        f"scaling.mode={mode}",
    )
    notes = out.split("NOTES:", 1)[1]
    assert "/v2/models/gpt2/generate_stream" in notes
    assert f"helm test {RELEASE}" in notes
    assert f'mode "{mode}"' in notes
    assert expected in notes


# --- docs/helm.md -----------------------------------------------------------------------------------


def value_keys(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys a user sets: values.schema.json's properties down to the nodes without properties
    (scalars, lists, and free-form maps such as resources or labels)."""
    if "properties" not in schema:
        return [prefix.rstrip(".")]
    return [k for key, sub in schema["properties"].items() for k in value_keys(sub, f"{prefix}{key}.")]


def test_docs_values_table_covers_every_value(chart_values):
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    keys = set(value_keys(schema)) - {"global"}
    doc = (ROOT / "docs" / "helm.md").read_text(encoding="utf-8")
    values_section = doc.split("\n## Values\n", 1)[1]
    table = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", values_section, flags=re.M))
    assert keys - table == set(), "add these keys to the values table of docs/helm.md"
    assert table - keys == set(), "docs/helm.md documents keys that values.schema.json does not have"


def test_schema_describes_every_default_value(chart_values):
    """values.yaml and values.schema.json list the same keys (the schema forbids unknown ones)."""

    def defaults(values: Any, schema: dict[str, Any], prefix: str = "") -> list[str]:
        if not isinstance(values, dict) or "properties" not in schema:
            return [prefix.rstrip(".")]
        if not values:  # an empty map of optional keys, e.g. model.settings
            return value_keys(schema, prefix)
        return [
            k
            for key, v in values.items()
            for k in defaults(v, schema["properties"].get(key, {}), f"{prefix}{key}.")
        ]

    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert set(defaults(chart_values, schema)) == set(value_keys(schema)) - {"global"}
