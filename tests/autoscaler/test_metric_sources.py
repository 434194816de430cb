"""Metric sources: exposition parsing, direct scrape over HTTP, PromQL answers, a real Prometheus."""

from __future__ import annotations

import math

import httpx
import pytest
from autoscaler_testkit import PodMetrics, PrometheusServer, free_port

from autoscaler.collect import SourceError
from autoscaler.collect.direct import DirectSource, StaticTargets, metrics_url
from autoscaler.collect.exposition import ExpositionError, gauge_totals, parse_exposition
from autoscaler.collect.promql import RECORDED_SERIES, PrometheusSource, promql_duration

EXPOSITION = """\
# TYPE nlg_time_per_output_token_seconds histogram
nlg_time_per_output_token_seconds_bucket{model="gpt2",version="1",le="0.02"} 1
nlg_time_per_output_token_seconds_bucket{model="gpt2",version="1",le="+Inf"} 2
nlg_time_per_output_token_seconds_sum{model="gpt2",version="1"} 0.05
nlg_time_per_output_token_seconds_count{model="gpt2",version="1"} 2
nlg_time_per_output_token_seconds_bucket{model="gpt2",version="2",le="0.02"} 3
nlg_time_per_output_token_seconds_bucket{model="gpt2",version="2",le="+Inf"} 3
nlg_time_per_output_token_seconds_sum{model="gpt2",version="2"} 0.03
nlg_time_per_output_token_seconds_count{model="gpt2",version="2"} 3
nlg_time_per_output_token_seconds_bucket{model="other",version="1",le="+Inf"} 99
nlg_time_per_output_token_seconds_sum{model="other",version="1"} 99
nlg_time_per_output_token_seconds_count{model="other",version="1"} 99
# TYPE nlg_requests_waiting gauge
nlg_requests_waiting{model="gpt2",version="1"} 2
nlg_requests_waiting{model="gpt2",version="2"} 3
# TYPE nlg_kv_cache_usage_ratio gauge
nlg_kv_cache_usage_ratio{model="gpt2",version="1"} 0.2
nlg_kv_cache_usage_ratio{model="gpt2",version="2"} 0.6
# TYPE nlg_requests_running gauge
nlg_requests_running{model="gpt2",version="1"} NaN
# TYPE nv_inference_count counter
nv_inference_count{model="gpt2",version="1"} 7
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="gpt2",version="1"} 4
nv_inference_pending_request_count{model="gpt2",version="2"} 1
nv_inference_pending_request_count{model="other",version="1"} 9
"""


def test_exposition_sums_versions_and_ignores_other_models():
    sample = parse_exposition(EXPOSITION, "gpt2")
    hist = sample.histograms["pertoken"]
    assert hist.buckets == ((0.02, 4.0), (math.inf, 5.0))
    assert (hist.sum, hist.count) == (pytest.approx(0.08), 5.0)
    assert set(sample.histograms) == {"pertoken"}  # absent families stay absent
    assert sample.gauges["waiting"] == 5.0
    assert sample.gauges["kv_usage"] == pytest.approx(0.4)  # a ratio: averaged
    assert math.isnan(sample.gauges["running"])  # passed on; the aggregator ignores it


def test_family_totals_for_the_model_leave_absent_ones_out():
    pending = "nv_inference_pending_request_count"
    totals = gauge_totals(EXPOSITION, "gpt2", (pending, "nlg_requests_waiting"))
    assert totals == {pending: 5.0, "nlg_requests_waiting": 5.0}
    assert gauge_totals(EXPOSITION, "gpt3", (pending,)) == {}
    with pytest.raises(ExpositionError):
        gauge_totals("x{", "gpt2", ("x",))


@pytest.mark.parametrize(
    ("text", "model", "want"),
    [("", "gpt2", {}), (EXPOSITION, "gpt3", {}), ("# TYPE x gauge\nx 1\n", "gpt2", {})],
    ids=["empty-text", "unknown-model", "no-nlg-metrics"],
)
def test_exposition_without_our_series_is_empty(text, model, want):
    sample = parse_exposition(text, model)
    assert (dict(sample.histograms), dict(sample.gauges)) == (want, want)


def test_malformed_exposition_is_an_error():
    with pytest.raises(ExpositionError):
        parse_exposition('nlg_requests_waiting{model="gpt2" 1\n', "gpt2")


@pytest.mark.parametrize(
    ("target", "url"),
    [
        ("10.0.0.1:8002", "http://10.0.0.1:8002/metrics"),
        ("http://triton:8002", "http://triton:8002/metrics"),
        ("https://triton:8443/custom", "https://triton:8443/custom"),
    ],
    ids=["host-port", "url-without-path", "url-with-path"],
)
def test_metrics_url(target, url):
    assert metrics_url(target) == url


@pytest.fixture
def pods():
    started = [PodMetrics(), PodMetrics()]
    yield started
    for pod in started:
        pod.stop()


@pytest.mark.integration
def test_direct_scrape_over_http(pods):
    errors = []
    targets = StaticTargets([p.target for p in pods])
    source = DirectSource(targets, 2.0, 10.0, on_error=lambda t, m: errors.append(t))
    try:
        assert source.read(100.0, "gpt2", 60).latency("pertoken").count == 0  # first round: baseline
        pods[0].serve(0.030, n=3)
        pods[1].serve(0.010, n=1)
        pods[1].running.set(2)
        window = source.read(105.0, "gpt2", 60)
        assert window.pods == 2
        assert window.latency("pertoken").count == 4
        assert window.latency("pertoken").mean == pytest.approx(0.025)
        assert window.gauges["running"] == 2
        pods[1].stop()  # one pod down: the other still counts, the failure is reported
        pods[0].serve(0.030, n=2)
        window = source.read(110.0, "gpt2", 60)
        assert errors == [pods[1].target]
        assert window.latency("pertoken").count == 6
        pods[0].stop()  # all down: nothing to read this round
        with pytest.raises(SourceError, match="scrape of http://127.0.0.1:.*/metrics failed"):
            source.read(115.0, "gpt2", 60)
    finally:
        source.close()


def prometheus_answering(answers: dict[str, object], status: int = 200) -> PrometheusSource:
    """A PrometheusSource whose HTTP seam answers each query from ``answers`` (default: empty vector)."""

    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        body = answers.get(query, answers.get("*", vector()))
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    http = httpx.Client(transport=httpx.MockTransport(handle))
    return PrometheusSource("http://prometheus:9090", 2.0, http=http)


def vector(*values, labels=None):
    rows = [{"metric": labels or {}, "value": [0, v]} for v in values]
    return {"status": "success", "data": {"resultType": "vector", "result": rows}}


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        (vector(), None),
        (vector("3"), 3.0),
        (vector("NaN"), None),
        (vector("+Inf"), None),
        (vector("-Inf"), None),
    ],
    ids=["empty-vector", "one-value", "nan", "inf", "minus-inf"],
)
def test_promql_scalar_rules(answer, want):
    source = prometheus_answering({"*": answer})
    assert source.scalar("sum(x)", 0.0) == want


@pytest.mark.parametrize(
    ("answer", "status", "match"),
    [
        (vector("1", "2"), 200, "returned 2 series where one was expected"),
        ({"status": "error", "error": "parse error"}, 400, "HTTP 400 parse error"),
        ("<html>proxy error</html>", 502, "Prometheus query failed"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, 200, "not a vector"),
    ],
    ids=["several-series", "bad-query", "not-json", "matrix"],
)
def test_promql_failures_are_source_errors(answer, status, match):
    source = prometheus_answering({"*": answer}, status=status)
    with pytest.raises(SourceError, match=match):
        source.scalar("sum(x)", 0.0)


def test_promql_unreachable_is_a_source_error():
    errors = []
    source = PrometheusSource(f"http://127.0.0.1:{free_port()}", 0.5, on_error=lambda t, m: errors.append(t))
    with pytest.raises(SourceError, match="Prometheus query failed"):
        source.read(0.0, "gpt2", 60)
    assert errors == ["prometheus"]


def test_promql_histogram_with_a_nan_bucket_is_no_data():
    family = "nlg_time_per_output_token_seconds"
    answers = {
        f'sum by (le) (increase({family}_bucket{{model="gpt2"}}[60s]))': {
            "status": "success",
            "data": {"resultType": "vector", "result": [
                {"metric": {"le": "0.02"}, "value": [0, "NaN"]},
                {"metric": {"le": "+Inf"}, "value": [0, "4"]},
            ]},
        },  # fmt: skip
        f'sum(increase({family}_sum{{model="gpt2"}}[60s]))': vector("0.1"),
        f'sum(increase({family}_count{{model="gpt2"}}[60s]))': vector("4"),
        'count(count by (instance) (nlg_requests_running{model="gpt2"}))': vector("1"),
    }
    window = prometheus_answering(answers).read(0.0, "gpt2", 60)
    assert window.latency("pertoken").count == 0
    assert window.pods == 1


@pytest.mark.integration
def test_promql_source_against_a_real_prometheus(pods, tmp_path):
    pod = pods[0]
    pods[1].stop()
    with PrometheusServer([pod.target], tmp_path) as prometheus:
        prometheus.wait_for_samples('nlg_requests_running{model="gpt2"}')
        source = PrometheusSource(prometheus.url, 2.0)
        try:
            pod.serve(0.030, n=8, request_s=1.5)
            pod.serve_requests(4, prompt=100, output=10, ttft_s=1.2, pertoken_s=0.030)  # 1.5 s requests too
            pod.waiting.set(3)
            pod.kv.set(0.5)
            family = "nlg_time_per_output_token_seconds"
            prometheus.wait_for_samples(f'increase({family}_count{{model="gpt2"}}[30s]) > 0')
            answer = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": "time()"}).json()
            now = float(answer["data"]["result"][1])
            window = source.read(now, "gpt2", 30)
        finally:
            source.close()
    stats = window.latency("pertoken")
    assert stats.count > 0  # increase() extrapolates: not exactly 8
    assert stats.mean == pytest.approx(0.030)
    assert 0.025 < stats.p50 <= 0.030
    assert window.latency("request").mean == pytest.approx(1.5)
    assert window.gauges == {"waiting": 3.0, "running": 0.0, "kv_usage": 0.5}
    assert window.pods == 1
    assert window.latency("itl").count == 0  # a family with no observations
    counters = window.counters  # increase() extrapolates each alike: the ratios are exact
    assert counters["prompt_tokens"] / counters["finished"] == pytest.approx(100)
    assert counters["generation_tokens"] / counters["finished"] == pytest.approx(10)


@pytest.mark.parametrize(
    ("seconds", "duration"),
    [(60, "60s"), (7.5, "7500ms"), (0.25, "250ms"), (0.0001, "1ms"), (0.0015, "2ms"), (86400, "86400s")],
    ids=["whole", "fractional", "sub-second", "below-a-millisecond", "half-up", "a-day"],
)
def test_promql_durations_are_written_as_the_chart_writes_them(seconds, duration):
    assert promql_duration(seconds) == duration


def recording_prometheus(answers: dict[str, object], asked: list[str]) -> PrometheusSource:
    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        asked.append(query)
        return httpx.Response(200, json=answers.get(query, vector()))

    return PrometheusSource("http://prometheus:9090", 2.0, http=httpx.Client(transport=httpx.MockTransport(handle)))


def test_the_recorded_series_are_read_when_prometheus_has_them():
    family = "nlg_time_per_output_token_seconds"
    buckets = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"le": "0.02"}, "value": [0, "1"]}, {"metric": {"le": "+Inf"}, "value": [0, "4"]},
    ]}}  # fmt: skip
    answers = {
        f'sum by (le) (namespace_model:{family}_bucket:increase60s{{model="gpt2"}})': buckets,
        f'sum(namespace_model:{family}_sum:increase60s{{model="gpt2"}})': vector("0.1"),
        f'sum(namespace_model:{family}_count:increase60s{{model="gpt2"}})': vector("4"),
        'sum(namespace_model:nlg_requests_finished_total:increase60s{model="gpt2"})': vector("3"),
    }
    asked: list[str] = []
    window = recording_prometheus(answers, asked).read(0.0, "gpt2", 60)
    assert (window.latency("pertoken").count, window.latency("pertoken").mean) == (4.0, pytest.approx(0.025))
    assert window.counters == {"finished": 3.0}
    raw = [q for q in asked if "increase(" in q]
    assert not any(family in q or "finished" in q for q in raw), raw  # what was recorded was read so
    assert any("nlg_request_latency_seconds" in q for q in raw)  # the rest fell back to the raw series


def test_without_recorded_series_every_value_is_computed_from_the_raw_ones():
    asked: list[str] = []
    recording_prometheus({}, asked).read(0.0, "gpt2", 7.5)
    recorded = [q for q in asked if "namespace_model:" in q]
    raw = [q for q in asked if "increase(" in q]
    assert len(recorded) == len(raw) == len(RECORDED_SERIES)  # one query each, recorded then raw
    assert all("increase7500ms" in q for q in recorded) and all("[7500ms]" in q for q in raw)
