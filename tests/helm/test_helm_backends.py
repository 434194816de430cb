"""autoscaler.metrics.backend in the chart: rendered into the autoscaler's config, and the
PrometheusRule's recorded series those the Prometheus source reads for that backend (promtool
accepts them, colons of vLLM's names included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helm_testkit import validate_manifest

from autoscaler.collect.backends import BACKENDS
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
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found: `bash scripts/setup --with-system` installs it")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
