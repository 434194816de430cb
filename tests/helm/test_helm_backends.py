"""autoscaler.metrics.backend in the chart: rendered into the autoscaler's config, and the
PrometheusRule's recorded series those the Prometheus source reads for that backend (promtool
accepts them, colons of vLLM's names included)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from external_tools import PROMTOOL, require
from helm_testkit import ROOT, validate_manifest

from autoscaler.backend_check import backend_report
from autoscaler.collect.backends import BACKENDS, signals
from autoscaler.collect.promql import recorded_name, recorded_series
from autoscaler.config import parse_config

CHOICES = ["auto", "nlg", "vllm", "tensorrt_llm", "triton"]


def values(backend: str) -> dict:
    return {"monitoring": {"enabled": True}, "autoscaler": {"metrics": {"backend": backend}}}


@pytest.mark.parametrize("backend", CHOICES)
def test_the_backend_reaches_the_autoscalers_config(render, backend):
    rendered = render(values=values(backend))
    config = yaml.safe_load(rendered.one("ConfigMap", "-autoscaler")["data"]["config.yaml"])
    assert parse_config(config).metrics.backend == backend


@pytest.mark.parametrize("backend", CHOICES)
def test_the_recorded_series_are_the_ones_the_source_reads_for_the_backend(render, backend, tmp_path: Path):
    rule = render(values=values(backend)).one("PrometheusRule")
    validate_manifest(rule)
    recorded = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    series = recorded_series(BACKENDS["nlg" if backend == "auto" else backend])
    assert {r["record"] for r in recorded} == {recorded_name(s, "60s") for s in series}
    promtool = require(PROMTOOL)
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_keda_reads_queue_time_from_tritons_own_counters(render):
    signals = [{"metric": "queue_mean", "target": 5}]
    values = {"scaling": {"mode": "keda"}, "autoscaler": {"policy": {"signals": signals}}}
    queries = [t["metadata"]["query"] for t in render(values=values).one("ScaledObject")["spec"]["triggers"]]
    queue = [q for q in queries if "nv_inference_queue_duration_us" in q]
    assert len(queue) == 1
    assert "/ 1000 / sum(rate(nv_inference_request_success{" in queue[0]


def panels(render, backend: str) -> dict[str, str]:
    text = render(values=values(backend)).config_map_file("-dashboard", "nlg-serving.json")
    return {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in json.loads(text)["panels"]}


NATIVE = {"nlg_", "vllm:", "nv_trt_llm_", "nv_llm_"}  # the prefixes only one backend's pages carry


@pytest.mark.parametrize(
    ("backend", "titles", "names", "own"),
    [
        ("auto", ["Per-token latency"], {"nlg_time_per_output_token_seconds_sum", "nlg_requests_waiting"}, {"nlg_"}),
        ("vllm", ["Per-token latency"],
         {"vllm:time_to_first_token_seconds_bucket", "vllm:request_generation_tokens_sum",
          "vllm:e2e_request_latency_seconds_sum", "vllm:generation_tokens_total"}, {"vllm:"}),
        ("tensorrt_llm", ["Per-token latency"],
         {"nv_inference_first_response_histogram_ms_bucket", "nv_llm_output_token_len_sum",
          "nv_trt_llm_request_metrics"}, {"nv_trt_llm_", "nv_llm_"}),
        ("triton", ["Queue time and request latency", "Request throughput"],
         {"nv_inference_queue_duration_us", "nv_inference_pending_request_count"}, set()),
    ],
)  # fmt: skip
def test_the_dashboard_panels_follow_the_backend(render, backend, titles, names, own):
    board = panels(render, backend)
    assert set(titles) <= set(board)
    queried = set(re.findall(r"\b((?:nlg_|vllm:|nv_)[a-z0-9_:]+)\{", " ".join(board.values())))
    assert names <= queried
    assert not {q for q in queried if q.startswith(tuple(NATIVE - own))}, queried  # no other backend's names


# --- docs/backends.md -----------------------------------------------------------------------------

DOC = ROOT / "docs" / "backends.md"


def signals_table() -> str:
    """The table of docs/backends.md as autoscaler.collect.backends gives it."""
    rows = ["request_mean", "request_p99", "pertoken_mean", "pertoken_p99", "ttft_mean", "ttft_p99", "itl_mean",
            "itl_p99", "queue_mean", "waiting_per_replica", "kv_usage", "running", "instances"]  # fmt: skip
    lines = ["| signal | " + " | ".join(BACKENDS) + " |", "|---|" + "---|" * len(BACKENDS)]
    for row in rows:
        cells = []
        for backend in BACKENDS.values():
            origin = signals(backend).get(row)
            cells.append("—" if origin is None else "derived" if origin.startswith("(") else f"`{origin}`")
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_the_docs_signals_table_is_what_the_backends_give():
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- signals-table:")[1].split("\n", 1)[1].split("<!-- end signals-table -->")[0]
    assert table.strip() == signals_table()


def documented_values() -> dict[str, dict]:
    blocks = re.findall(r"```yaml\n# values: (\w+)\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    return {backend: yaml.safe_load(body) for backend, body in blocks}


def test_the_docs_show_values_for_each_backend():
    assert set(documented_values()) == set(BACKENDS)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_documented_values_example_renders_and_passes_check(render, backend):
    rendered = render(values=documented_values()[backend])
    config = parse_config(yaml.safe_load(rendered.one("ConfigMap", "-autoscaler")["data"]["config.yaml"]))
    assert config.metrics.backend == backend
    report = backend_report(config)  # a configured backend: no probe
    assert report.lines[0] == f"metrics.backend: {backend}"
    assert report.refused == []
