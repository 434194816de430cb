"""The chart's recording rules in a real Prometheus: ``helm template`` renders the PrometheusRule, its
groups become Prometheus's rule file, Prometheus scrapes a fake pod (as the chart's ServiceMonitor
would, with the pod's namespace as a label) and evaluates them; the prometheus source then reads
the recorded series, one query per value, and finds what the pod served."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import yaml
from autoscaler_testkit import PodMetrics, PrometheusServer

from autoscaler.collect.promql import PrometheusSource

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helm"))

from external_tools import HELM, require  # noqa: E402
from helm_testkit import NAMESPACE, Helm, Rendered  # noqa: E402

FAMILY = "nlg_time_per_output_token_seconds"


def chart_rule_groups() -> list[dict]:
    """The PrometheusRule's groups as the chart renders them (evaluated every second for the test)."""
    values = {"monitoring": {"enabled": True, "interval": "1s"}, "autoscaler": {"source": {"kind": "prometheus"}}}
    rendered = Rendered.parse(Helm(require(HELM)).template(values=values))
    groups: list[dict] = rendered.one("PrometheusRule")["spec"]["groups"]
    return groups


class RulesPrometheus(PrometheusServer):
    """The testkit's Prometheus, with a rule file and labels on its one scrape target."""

    def __init__(self, targets: list[str], tmp: Path, groups: list[dict], labels: dict[str, str]) -> None:
        super().__init__(targets, tmp)
        rules = tmp / "rules.yml"
        rules.write_text(yaml.safe_dump({"groups": groups}))
        config = yaml.safe_load(self._config.read_text())
        config["rule_files"] = [str(rules)]
        config["scrape_configs"][0]["static_configs"][0]["labels"] = labels
        self._config.write_text(yaml.safe_dump(config))


@pytest.fixture
def pod():
    started = PodMetrics()
    yield started
    started.stop()


def prometheus_time(url: str) -> float:
    return float(httpx.get(f"{url}/api/v1/query", params={"query": "time()"}).json()["data"]["result"][1])


@pytest.mark.integration
def test_the_prometheus_source_reads_the_charts_recorded_series(pod, tmp_path):
    with RulesPrometheus([pod.target], tmp_path, chart_rule_groups(), {"namespace": NAMESPACE}) as prometheus:
        prometheus.wait_for_samples('nlg_requests_running{model="gpt2"}')
        pod.serve(0.030, n=8, request_s=1.5)
        pod.serve_requests(4, prompt=100, output=10, ttft_s=1.2, pertoken_s=0.030)
        pod.waiting.set(3)
        recorded = f"namespace_model:{FAMILY}_count:increase60s"
        prometheus.wait_for_samples(f'{recorded}{{model="gpt2",namespace="{NAMESPACE}"}} > 0')
        prometheus.wait_for_samples('namespace_model:nlg_requests_finished_total:increase60s{model="gpt2"} > 0')
        asked: list[str] = []
        http = httpx.Client(event_hooks={"request": [lambda r: asked.append(r.url.params["query"])]})
        source = PrometheusSource(prometheus.url, 2.0, http=http)
        try:
            window = source.read(prometheus_time(prometheus.url), "gpt2", 60)
            asked_60s = list(asked)
            asked.clear()
            other = source.read(prometheus_time(prometheus.url), "gpt2", 30)  # a window no rule records
        finally:
            source.close()
    # Every increase was read from a recorded series: no query over the pods' raw series.
    assert [q for q in asked_60s if "increase(" in q] == []
    assert sum("namespace_model:" in q for q in asked_60s) == 15
    stats = window.latency("pertoken")
    assert stats.count > 0  # increase() extrapolates: not exactly 12
    assert stats.mean == pytest.approx(0.030)
    assert 0.025 < stats.p50 <= 0.030
    assert window.latency("request").mean == pytest.approx((8 * 1.5 + 4 * 1.5) / 12)
    assert window.latency("itl").count == 0  # recorded as 0: a family with no observations
    counters = window.counters  # each extrapolated alike: the ratios are exact
    assert counters["prompt_tokens"] / counters["finished"] == pytest.approx(100)
    assert counters["generation_tokens"] / counters["finished"] == pytest.approx(10)
    assert (window.gauges["waiting"], window.pods) == (3.0, 1)
    # A window with no rule of its own falls back to the raw series, with the same answer's shape.
    assert any("increase(" in q and "[30s]" in q for q in asked)
    assert other.latency("pertoken").mean == pytest.approx(0.030)
