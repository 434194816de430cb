"""Metric backends: vLLM's, TensorRT-LLM's and Triton's own pages (every family, label and bucket of
their source at the commits ``backend_pages`` names) through the scraper, the windows and a
decision; detection; ``--check`` naming the backend and refusing what it lacks."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from autoscaler_testkit import PrometheusServer
from backend_pages import PageServer, Pod, Request, isclose

from autoscaler.cli import main
from autoscaler.collect.backends import BACKENDS, detect, refusals, signals
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.collect.exposition import parse_exposition
from autoscaler.collect.promql import PrometheusSource
from autoscaler.config import ScalerSpec, Signal
from autoscaler.decide import PolicyState, decide

LIGHT = Request(ttft=0.05, itl=0.01, tokens=10)  # per-token (0.05 + 9 x 0.01) / 10 = 14 ms
HEAVY = Request(ttft=0.5, itl=0.05, tokens=10, queue=0.2)  # 95 ms


def pod_with(*requests: Request, waiting: int = 0, running: int = 0) -> Pod:
    pod = Pod().finish(requests)
    pod.waiting, pod.running, pod.kv_usage = waiting, running, 0.25
    return pod


@pytest.mark.parametrize("backend", ["nlg", "vllm", "tensorrt_llm", "triton"])
def test_each_page_is_detected_as_its_backend(backend):
    page = pod_with(LIGHT).page(backend)
    assert detect(page, "gpt2") is BACKENDS[backend]
    assert detect(page, "gpt3") is None  # the marker must be the scaled model's


@pytest.mark.parametrize("backend", ["vllm", "tensorrt_llm"])
def test_the_page_reads_as_the_signals_the_policies_use(backend):
    b = BACKENDS[backend]
    sample = parse_exposition(pod_with(LIGHT, HEAVY, waiting=3, running=2).page(backend), "gpt2", b)
    ttft = sample.histograms["ttft"]
    assert ttft.count == 2
    assert isclose(ttft.sum, LIGHT.ttft + HEAVY.ttft)  # TRT-LLM's is Triton's, in ms: scaled to s
    assert ttft.buckets[-1] == (math.inf, 2.0)
    assert sample.counters["finished"] == 2
    assert sample.counters["finished_tokens"] == LIGHT.tokens + HEAVY.tokens
    if backend == "vllm":
        assert sample.histograms["itl"].count == 2 * 9  # vLLM's time_per_output_token: between tokens
        assert isclose(sample.histograms["request"].sum, LIGHT.latency + HEAVY.latency)
        assert sample.gauges == {}  # the vLLM backend exports no gauge
        assert sample.counters["prompt_tokens"] == 40
    else:
        request = sample.histograms["request"]  # Triton's counters, us: a mean-only histogram
        assert request.buckets == ((math.inf, 2.0),)
        assert isclose(request.sum, LIGHT.latency + HEAVY.latency)
        assert sample.gauges == {"waiting": 3, "running": 2, "kv_usage": pytest.approx(1560 / 6239)}
        assert isclose(sample.histograms["queue"].sum, LIGHT.queue + HEAVY.queue)


def test_tritons_own_metrics_are_mean_latencies_and_pending_requests():
    sample = parse_exposition(pod_with(LIGHT, HEAVY, waiting=4).page("triton"), "gpt2", BACKENDS["triton"])
    assert set(sample.histograms) == {"request", "queue", "ttft"}
    assert isclose(sample.histograms["queue"].sum, 0.2005)
    assert sample.histograms["ttft"].buckets[:4] == ((0.1, 1.0), (0.5, 2.0), (2.0, 2.0), (5.0, 2.0))  # ms -> s
    assert sample.gauges == {"waiting": 4.0}


def read_timeline(backend: str, phases: list[tuple[Request, int]], spec: ScalerSpec) -> list[tuple[int, dict]]:
    """Serves a pod's page of ``backend``, scrapes it every 10 s of fake time while each phase's
    requests finish (``count`` a round), and decides on each window: (desired, values) per round."""
    pod = Pod()
    pod.running = 1
    decisions = []
    with PageServer(lambda: pod.page(backend)) as server:
        source = DirectSource(StaticTargets([server.target]), timeout=2.0, stale_after=30.0, backend="auto")
        state = PolicyState.initial(1, 0.0)
        now = 0.0
        try:
            source.read(now, "gpt2", spec.time_window)
            for request, count in phases:
                now += 10
                pod.finish([request] * count)
                window = source.read(now, "gpt2", spec.time_window)
                decision, state = decide(window, spec, state, now)
                decisions.append((decision.desired, dict(decision.values)))
            found = source.backend("gpt2")
        finally:
            source.close()
    assert found is BACKENDS[backend]
    return decisions


def test_the_same_pertoken_timeline_on_nlg_vllm_and_tensorrt_llm_pages():
    spec = ScalerSpec(threshold=25.0, time_window=20.0, stabilization_window=30.0, max_deployment_count=8)
    phases = [(LIGHT, 5), (LIGHT, 5), (HEAVY, 5), (HEAVY, 5), (LIGHT, 5), (LIGHT, 5), (LIGHT, 5), (LIGHT, 5)]
    timelines = {b: read_timeline(b, phases, spec) for b in ("nlg", "vllm", "tensorrt_llm")}
    desired = [d for d, _ in timelines["nlg"]]
    # Light at 14 ms holds one replica (ceil(14 / 25) = 1); heavy at 95 ms fills half the window
    # (54.5 ms), then all of it, then half again; light again. What the policy makes of that (rate
    # limits, stabilization) is decide's; the three pages must give it the same numbers.
    pertoken = [values["pertoken_mean"] for _, values in timelines["nlg"]]
    assert pertoken == pytest.approx([14.0, 14.0, 54.5, 95.0, 54.5, 14.0, 14.0, 14.0])
    assert desired[:2] == [1, 1] and max(desired) > 1, timelines["nlg"]
    for backend in ("vllm", "tensorrt_llm"):
        assert [d for d, _ in timelines[backend]] == desired, (backend, timelines[backend])
        for (_, ours), (_, theirs) in zip(timelines["nlg"], timelines[backend], strict=True):
            assert theirs["pertoken_mean"] == pytest.approx(ours["pertoken_mean"], rel=1e-9)


def test_per_token_of_unequal_lengths_is_the_token_weighted_mean():
    short, long = Request(ttft=0.1, itl=0.01, tokens=2), Request(ttft=0.1, itl=0.01, tokens=20)
    spec = ScalerSpec(threshold=25.0, time_window=20.0)
    (_, nlg), = read_timeline("nlg", [(short, 1), (long, 1)], spec)[1:]  # fmt: skip
    (_, vllm), = read_timeline("vllm", [(short, 1), (long, 1)], spec)[1:]  # fmt: skip
    per_request = (short.latency / short.tokens + long.latency / long.tokens) / 2
    per_token = (short.latency + long.latency) / (short.tokens + long.tokens)
    assert nlg["pertoken_mean"] == pytest.approx(per_request * 1000)
    assert vllm["pertoken_mean"] == pytest.approx(per_token * 1000)  # the documented approximation


def test_triton_scales_on_queue_time_and_cannot_give_per_token_latency():
    queue = Signal(metric="queue_mean", target=50.0)
    spec = ScalerSpec(type="request", threshold=60_000.0, time_window=20.0, signals=(queue,), max_deployment_count=8)
    decisions = read_timeline("triton", [(LIGHT, 5), (HEAVY, 5), (HEAVY, 5)], spec)
    # Queue 0.5 ms (holds 1), then (0.5 + 200) / 2 ms, then 200 ms: over the 50 ms target, out.
    queue = [values["queue_mean"] for _, values in decisions]
    assert queue == pytest.approx([0.5, 100.25, 200.0])
    desired = [d for d, _ in decisions]
    assert desired[0] == 1 and desired[1] > 1 and desired[2] >= desired[1], decisions
    assert "pertoken_mean" not in signals(BACKENDS["triton"])


@pytest.mark.parametrize(
    ("backend", "needs", "missing"),
    [
        ("triton", {"pertoken_mean": "scaler.type = pertoken"}, ["pertoken_mean"]),
        ("vllm", {"pertoken_mean": "scaler.type = pertoken", "waiting_per_replica": "scaler.signals[0].metric",
                  "kv_usage": "scaler.signals[1].metric"}, ["waiting_per_replica", "kv_usage"]),
        ("vllm", {"pertoken_p99": "scaler.type = planner"}, ["pertoken_p99"]),
        ("tensorrt_llm", {"pertoken_mean": "t", "itl_mean": "t", "waiting_per_replica": "t", "kv_usage": "t"}, []),
        ("nlg", {"pertoken_p99": "t", "queue_mean": "t"}, ["queue_mean"]),
    ],
    ids=["triton-pertoken", "vllm-gauges", "vllm-quantile", "trt-all", "nlg-queue"],
)  # fmt: skip
def test_refusals_name_each_missing_signal(backend, needs, missing):
    refused = refusals(needs, BACKENDS[backend])
    assert [r.split(" needs ")[1].split(",")[0] for r in refused] == missing
    for message in refused:
        assert f"the {backend} backend does not export" in message


def write_config(tmp_path, **sections) -> str:
    path = tmp_path / "autoscaler.yaml"
    path.write_text(json.dumps(sections))
    return str(path)


@pytest.mark.parametrize("backend", ["nlg", "vllm", "tensorrt_llm", "triton"])
def test_check_against_an_endpoint_names_the_backend_and_its_signals(tmp_path, capsys, backend):
    pod = pod_with(LIGHT)
    scaler = {"type": "request", "threshold": 1000} if backend == "triton" else {}
    with PageServer(lambda: pod.page(backend)) as server:
        path = write_config(tmp_path, source={"static_targets": [server.target]}, scaler=scaler)
        assert main(["--config", path, "--check"]) == 0
    out = capsys.readouterr().out
    assert f"metrics.backend: auto, found {backend} on {server.target}" in out
    assert ("pertoken_mean:" in out) == (backend != "triton")
    assert out.strip().endswith(": ok")


def test_check_refuses_a_policy_whose_signal_the_backend_lacks(tmp_path, capsys):
    pod = pod_with(LIGHT)
    with PageServer(lambda: pod.page("vllm")) as server:
        signals_ = [{"metric": "waiting_per_replica", "target": 4}]
        path = write_config(tmp_path, source={"static_targets": [server.target]}, scaler={"signals": signals_})
        assert main(["--config", path, "--check"]) == 2
    err = capsys.readouterr().err
    assert "scaler.signals[0].metric needs waiting_per_replica, which the vllm backend does not export" in err
    assert "nlg_requests_waiting" in err  # where this project's model has it


def test_check_with_a_configured_backend_needs_no_endpoint(tmp_path, capsys):
    path = write_config(tmp_path, metrics={"backend": "triton"})  # pertoken by default
    assert main(["--config", path, "--check"]) == 2
    assert "scaler.type = pertoken needs pertoken_mean, which the triton backend does not export" in (
        capsys.readouterr().err
    )
    path = write_config(tmp_path, metrics={"backend": "cuda"})
    assert main(["--config", path, "--check"]) == 2
    assert "metrics.backend = 'cuda': must be one of auto, nlg, vllm, tensorrt_llm, triton" in capsys.readouterr().err


def test_check_reports_an_unreachable_endpoint_without_refusing(tmp_path, capsys):
    from autoscaler_testkit import free_port

    path = write_config(tmp_path, source={"static_targets": [f"127.0.0.1:{free_port()}"], "timeout": 1})
    assert main(["--config", path, "--check"]) == 0
    assert "metrics.backend: auto, not detected (" in capsys.readouterr().out


@pytest.mark.integration
def test_the_prometheus_source_reads_each_backend_from_a_real_prometheus(tmp_path):
    """Three pods, one per backend and model, scraped by a real Prometheus; the source detects each
    backend from the names Prometheus has and reads the heavy requests' window in their units."""
    backends = ("vllm", "tensorrt_llm", "triton")
    # Each pod's series start at 0 before the heavy requests: Prometheus's increase() then
    # extrapolates every series of a scrape alike (from a non-zero start it stops each at its own
    # zero crossing, and ratios of increases drift).
    pods = {b: Pod(model=f"m_{b}") for b in backends}
    for pod in pods.values():
        pod.waiting, pod.running, pod.kv_usage = 2, 3, 0.5
    servers = [PageServer(lambda pod=pod, b=b: pod.page(b)) for b, pod in pods.items()]
    windows = {}
    try:
        with PrometheusServer([s.target for s in servers], tmp_path) as prometheus:
            for b in backends:
                prometheus.wait_for_samples(f'nv_inference_request_success{{model="m_{b}"}}')
            for pod in pods.values():
                pod.finish([HEAVY] * 5)
            prometheus.wait_for_samples('increase(nv_inference_request_success{model="m_triton"}[30s]) > 0')
            for b in backends:
                prometheus.wait_for_samples(f'increase(nv_inference_request_success{{model="m_{b}"}}[30s]) > 0')
            answer = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": "time()"}).json()
            now = float(answer["data"]["result"][1])
            source = PrometheusSource(prometheus.url, 2.0, backend="auto")
            try:
                for b in backends:
                    windows[b] = source.read(now, f"m_{b}", 30)
                    assert source.backend(f"m_{b}", now) is BACKENDS[b]
            finally:
                source.close()
    finally:
        for server in servers:
            server.__exit__()
    heavy_pertoken = HEAVY.latency / HEAVY.tokens
    assert windows["vllm"].latency("pertoken").mean == pytest.approx(heavy_pertoken)
    assert windows["tensorrt_llm"].latency("pertoken").mean == pytest.approx(heavy_pertoken)
    assert windows["tensorrt_llm"].latency("itl").mean == pytest.approx(HEAVY.itl)
    assert windows["tensorrt_llm"].latency("ttft").mean == pytest.approx(HEAVY.ttft)  # ms -> s
    assert windows["tensorrt_llm"].gauges == {"waiting": 2.0, "running": 3.0, "kv_usage": pytest.approx(3120 / 6239)}
    assert windows["triton"].latency("queue").mean == pytest.approx(HEAVY.queue)
    assert math.isnan(windows["triton"].latency("queue").p99)
    assert windows["triton"].gauges == {"waiting": 2.0}
    assert windows["vllm"].gauges == {}
    assert all(w.pods == 1 for w in windows.values())
