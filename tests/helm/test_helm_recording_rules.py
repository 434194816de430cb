"""The PrometheusRule: rendered with monitoring.enabled only, its recorded names the ones the
autoscaler's prometheus source reads (for the policy's window, fractional ones included), its
selectors this release's namespace plus prometheus.extraMatchers, and valid for promtool."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from external_tools import PROMTOOL, require
from helm_testkit import NAMESPACE, validate_manifest

from autoscaler.collect.promql import RECORDED_SERIES, promql_duration, recorded_name


def rules(render, **values) -> list[dict]:
    rendered = render(values={"monitoring": {"enabled": True}, **values})
    rule = rendered.one("PrometheusRule")
    validate_manifest(rule)
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_no_rules_without_monitoring(render):
    assert render().maybe("PrometheusRule") is None


@pytest.mark.parametrize("window", [60, 7.5, 300, 0.25], ids=["default", "fractional", "five-minutes", "sub-second"])
def test_the_recorded_names_are_what_the_prometheus_source_reads(render, window):
    recorded = rules(render, autoscaler={"policy": {"time_window": window}})
    expected = {recorded_name(series, promql_duration(window)) for series in RECORDED_SERIES}
    assert {r["record"] for r in recorded} == expected
    assert all(f"[{promql_duration(window)}]" in r["expr"] for r in recorded)


def test_each_rule_sums_the_increase_of_its_own_series_by_namespace_and_model(render):
    for rule in rules(render):
        series = rule["record"].split(":")[1]
        by = "namespace, model, le" if series.endswith("_bucket") else "namespace, model"
        assert rule["expr"] == f'sum by ({by}) (increase({series}{{namespace="{NAMESPACE}"}}[60s]))'


def test_extra_matchers_narrow_every_rule(render):
    recorded = rules(render, prometheus={"extraMatchers": 'job="triton"'})
    assert all(f'{{namespace="{NAMESPACE}",job="triton"}}' in r["expr"] for r in recorded)


def test_the_rules_carry_the_monitoring_labels_and_interval(render):
    rendered = render(values={"monitoring": {"enabled": True, "interval": "30s", "labels": {"release": "kps"}}})
    rule = rendered.one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert [g["interval"] for g in rule["spec"]["groups"]] == ["30s"]


def test_promtool_accepts_the_rules(render, tmp_path: Path):
    promtool = require(PROMTOOL)
    rule = render(values={"monitoring": {"enabled": True}}).one("PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"SUCCESS: {len(RECORDED_SERIES)} rules found", done.stdout), done.stdout
