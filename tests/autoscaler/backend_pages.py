"""Metrics pages of one Triton pod as each backend writes them, from the same finished requests.

Every family, label and bucket the backends export, at the commits that
``autoscaler.collect.backends`` cites:

- vLLM backend, triton-inference-server/vllm_backend@8de0c148bda1da25de1e05ffaaf67116dacc7264,
  ``src/utils/metrics.py`` (``TritonMetrics``): two counters and six histograms; the token-count
  buckets are vLLM's ``build_1_2_5_buckets(max_model_len)``.
- TensorRT-LLM backend, triton-inference-server/tensorrtllm_backend@c2e65b88d85255be30cf50440a91662abeb497dd,
  ``inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``: the gauge groups
  with each category label value, the disaggregated-serving counters, the token-length histograms
  (buckets 10, 50, 100, 500, 1000).
- Triton core, triton-inference-server/core@73aad7c3348d040c7087d57837d75822c488495e,
  ``src/metrics.cc``: the per-model ``nv_inference_*`` counters and gauge (on every page), the
  first-response histogram (ms, default buckets 100, 500, 2000, 5000; decoupled models with
  ``histogram_latencies=true``), and the server-wide ``nv_gpu_*``/``nv_cpu_*`` gauges, which carry
  no ``model`` label.
- This project's model: ``docs/metrics.md``.

A :class:`Pod` is fed finished requests (:class:`Request`: TTFT, the gap between later tokens,
tokens); ``page(backend)`` writes its cumulative counts. :class:`PageServer` serves one pod's page of
one backend over HTTP on a free loopback port.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "gpt2"
MAX_MODEL_LEN = 1024


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's ``vllm.v1.metrics.loggers.build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
VLLM_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
VLLM_E2E = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
VLLM_N = (1, 2, 5, 10, 20)
TRT_TOKENS = (10, 50, 100, 500, 1000)
TRITON_FIRST_RESPONSE_MS = (100, 500, 2000, 5000)
NLG_LATENCY = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
NLG_TOKEN = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
             0.5, 1, 2.5)  # fmt: skip


@dataclass(frozen=True)
class Request:
    """A finished request: its first token after ``ttft`` s, each later one ``itl`` s after the last."""

    ttft: float
    itl: float
    tokens: int
    prompt: int = 20
    queue: float = 0.0005

    @property
    def latency(self) -> float:
        return self.ttft + self.itl * (self.tokens - 1)


@dataclass
class _Histogram:
    bounds: Sequence[float]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    n: float = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        if not self.counts:
            self.counts = [0.0] * len(self.bounds)
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
        self.total += value * times
        self.n += times

    def lines(self, name: str, labels: str) -> list[str]:
        counts = self.counts or [0.0] * len(self.bounds)
        out = [f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{{labels},le="{_le(b)}"}} {c:g}' for b, c in zip(self.bounds, counts, strict=True)]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n:g}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.n:g}")
        return out


def _le(bound: float) -> str:
    return f"{bound:g}"


class Pod:
    """One pod's cumulative counts of the requests it finished, and its gauges now."""

    def __init__(self, model: str = MODEL) -> None:
        self.model = model
        self.requests: list[Request] = []
        self.waiting = 0
        self.running = 0
        self.kv_usage = 0.0

    def finish(self, requests: Iterable[Request]) -> Pod:
        self.requests.extend(requests)
        return self

    def page(self, backend: str) -> str:
        labels = f'model="{self.model}",version="1"'
        writers = {"nlg": self._nlg, "vllm": self._vllm, "tensorrt_llm": self._tensorrt_llm, "triton": _nothing}
        # Every page has Triton's own families; this project's Python-backend model has no
        # first-response histogram (the tritonserver the tests run does not write one for it).
        lines = writers[backend](labels) + self._core(labels, first_response=backend != "nlg")
        lines += ["# TYPE nv_gpu_utilization gauge", 'nv_gpu_utilization{gpu_uuid="GPU-0"} 0.5']
        return "\n".join(lines) + "\n"

    def _histogram(self, bounds: Sequence[float], values: Iterable[tuple[float, int]]) -> _Histogram:
        h = _Histogram(bounds)
        for value, times in values:
            if times > 0:
                h.observe(value, times)
        return h

    def _nlg(self, labels: str) -> list[str]:
        rs = self.requests
        lines: list[str] = []
        for name, bounds, values in (
            ("nlg_request_latency_seconds", NLG_LATENCY, [(r.latency, 1) for r in rs]),
            ("nlg_time_to_first_token_seconds", NLG_LATENCY, [(r.ttft, 1) for r in rs]),
            ("nlg_time_per_output_token_seconds", NLG_TOKEN, [(r.latency / r.tokens, 1) for r in rs]),
            ("nlg_inter_token_latency_seconds", NLG_TOKEN, [(r.itl, r.tokens - 1) for r in rs]),
        ):
            lines += self._histogram(bounds, values).lines(name, labels)
        lines += [
            "# TYPE nlg_prompt_tokens_total counter",
            f"nlg_prompt_tokens_total{{{labels}}} {sum(r.prompt for r in rs)}",
            "# TYPE nlg_generation_tokens_total counter",
            f"nlg_generation_tokens_total{{{labels}}} {sum(r.tokens for r in rs)}",
            "# TYPE nlg_requests_finished_total counter",
            f'nlg_requests_finished_total{{{labels},finish_reason="stop"}} {len(rs)}',
            f'nlg_requests_finished_total{{{labels},finish_reason="length"}} 0',
            "# TYPE nlg_requests_running gauge",
            f'nlg_requests_running{{{labels},model_instance="gpt2_0"}} {self.running}',
            "# TYPE nlg_requests_waiting gauge",
            f'nlg_requests_waiting{{{labels},model_instance="gpt2_0"}} {self.waiting}',
            "# TYPE nlg_kv_cache_usage_ratio gauge",
            f'nlg_kv_cache_usage_ratio{{{labels},model_instance="gpt2_0"}} {self.kv_usage}',
        ]  # fmt: skip
        return lines

    def _vllm(self, labels: str) -> list[str]:
        rs = self.requests
        tokens = build_1_2_5_buckets(MAX_MODEL_LEN)
        lines = [
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {sum(r.prompt for r in rs)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {sum(r.tokens for r in rs)}",
        ]  # fmt: skip
        for name, bounds, values in (
            ("vllm:time_to_first_token_seconds", VLLM_TTFT, [(r.ttft, 1) for r in rs]),
            ("vllm:time_per_output_token_seconds", VLLM_TPOT, [(r.itl, r.tokens - 1) for r in rs]),
            ("vllm:e2e_request_latency_seconds", VLLM_E2E, [(r.latency, 1) for r in rs]),
            ("vllm:request_prompt_tokens", tokens, [(float(r.prompt), 1) for r in rs]),
            ("vllm:request_generation_tokens", tokens, [(float(r.tokens), 1) for r in rs]),
            ("vllm:request_params_n", VLLM_N, [(1.0, 1) for _ in rs]),
        ):
            lines += self._histogram(bounds, values).lines(name, labels)
        return lines

    def _tensorrt_llm(self, labels: str) -> list[str]:
        rs = self.requests
        running, waiting = self.running, self.waiting
        requests = {"active": running, "max": 512, "scheduled": running, "context": 0, "waiting": waiting}
        max_blocks = 6239
        used = round(self.kv_usage * max_blocks)
        kv = {"max": max_blocks, "free": max_blocks - used, "used": used, "tokens_per": 64, "reused": 0,
              "fraction": used / max_blocks}  # fmt: skip
        lines = ["# TYPE nv_trt_llm_request_metrics gauge"]
        lines += [f'nv_trt_llm_request_metrics{{{labels},request_type="{k}"}} {v}' for k, v in requests.items()]
        lines += ["# TYPE nv_trt_llm_runtime_memory_metrics gauge"]
        memory = "nv_trt_llm_runtime_memory_metrics"
        lines += [f'{memory}{{{labels},memory_type="{k}"}} 0' for k in ("cpu", "gpu", "pinned")]
        lines += ["# TYPE nv_trt_llm_kv_cache_block_metrics gauge"]
        blocks = "nv_trt_llm_kv_cache_block_metrics"
        lines += [f'{blocks}{{{labels},kv_cache_block_type="{k}"}} {v!r}' for k, v in kv.items()]
        lines += ["# TYPE nv_trt_llm_disaggregated_serving_metrics counter"]
        lines += [f'nv_trt_llm_disaggregated_serving_metrics{{{labels},disaggregated_serving_type="{k}"}} 0'
                  for k in ("kv_cache_transfer_ms", "request_count")]  # fmt: skip
        lines += ["# TYPE nv_trt_llm_inflight_batcher_metrics gauge"]
        ifb = ("total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests")
        lines += [f'nv_trt_llm_inflight_batcher_metrics{{{labels},inflight_batcher_specific_metric="{k}"}} 0'
                  for k in ifb]  # fmt: skip
        lines += ["# TYPE nv_trt_llm_general_metrics gauge"]
        lines += [f'nv_trt_llm_general_metrics{{{labels},general_type="timestamp"}} 1700074049',
                  f'nv_trt_llm_general_metrics{{{labels},general_type="iteration_counter"}} {len(rs)}']  # fmt: skip
        out = self._histogram(TRT_TOKENS, [(float(r.tokens), 1) for r in rs])
        lines += out.lines("nv_llm_output_token_len", f'{labels},response_metric_type="total_output_tokens"')
        inp = self._histogram(TRT_TOKENS, [(float(r.prompt), 1) for r in rs])
        lines += inp.lines("nv_llm_input_token_len", f'{labels},response_metric_type="total_input_tokens"')
        return lines

    def _core(self, labels: str, first_response: bool) -> list[str]:
        rs = self.requests
        us = 1e6

        def counter(name: str, value: float) -> list[str]:
            return [f"# TYPE {name} counter", f"{name}{{{labels}}} {value:.0f}"]

        lines = counter("nv_inference_request_success", len(rs))
        lines += ["# TYPE nv_inference_request_failure counter"]
        lines += [f'nv_inference_request_failure{{{labels},reason="{k}"}} 0'
                  for k in ("REJECTED", "CANCELED", "BACKEND", "OTHER")]  # fmt: skip
        lines += counter("nv_inference_count", len(rs)) + counter("nv_inference_exec_count", len(rs))
        lines += counter("nv_inference_request_duration_us", sum(r.latency for r in rs) * us)
        lines += counter("nv_inference_queue_duration_us", sum(r.queue for r in rs) * us)
        for part in ("input", "infer", "output"):
            lines += counter(f"nv_inference_compute_{part}_duration_us", 0)
        lines += ["# TYPE nv_inference_pending_request_count gauge",
                  f"nv_inference_pending_request_count{{{labels}}} {self.waiting}"]  # fmt: skip
        if first_response:
            h = self._histogram(TRITON_FIRST_RESPONSE_MS, [(r.ttft * 1000, 1) for r in rs])
            lines += h.lines("nv_inference_first_response_histogram_ms", labels)
        return lines


class PageServer:
    """Serves ``page()`` at ``/metrics`` on a free loopback port until the block ends."""

    def __init__(self, page: object) -> None:
        source = page

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = source().encode()  # type: ignore[operator]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.target = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> PageServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def isclose(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _nothing(labels: str) -> list[str]:
    """A model of a backend that exports nothing of its own: only Triton's families."""
    return []
