"""NVIDIA's TensorRT-LLM backend for Triton: its gauges and token histograms, with Triton core's
latencies of the ``tensorrt_llm`` model.

Source: triton-inference-server/tensorrtllm_backend@c2e65b88d85255be30cf50440a91662abeb497dd
(2025-05-13, the last commit holding the C++ backend in this repository; it moved to TensorRT-LLM's
``triton_backend/`` after), ``inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``
and the README's metrics section. Labels ``model``, ``version`` and one category label per family:

- ``nv_trt_llm_request_metrics{request_type=active|max|scheduled|context|waiting}`` (gauge).
- ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max|free|used|tokens_per|reused|fraction}``
  (gauge; ``fraction`` is used / max).
- ``nv_llm_output_token_len{response_metric_type="total_output_tokens"}`` and
  ``nv_llm_input_token_len{response_metric_type="total_input_tokens"}``: histograms of each
  request's tokens, buckets 10, 50, 100, 500, 1000.
- runtime memory, inflight-batcher / v1, general and disaggregated-serving families: not read.

The backend exports no latency: the request latency is Triton core's
``nv_inference_request_duration_us`` over ``nv_inference_request_success`` (the backend reports a
request's statistics when its last response is sent, ``reportBaseMetrics`` in
``model_instance_state.cc``), a mean only; TTFT is core's ``nv_inference_first_response_histogram_ms``
(decoupled models, with ``--metrics-config histogram_latencies=true``). Per-token latency is the
request latency over n, ITL (request - TTFT) / (n - 1), n the mean output tokens of the requests that
finished in the window: exact when those requests have equal n, token-weighted otherwise.
"""

from __future__ import annotations

from typing import Final

from autoscaler.collect.backends.base import (
    MS,
    US,
    Backend,
    Derived,
    MeanOf,
    itl_from_request,
    per_token_from_request,
)

TRTLLM_COMMIT: Final = "triton-inference-server/tensorrtllm_backend@c2e65b88d85255be30cf50440a91662abeb497dd"

TENSORRT_LLM: Final = Backend(
    name="tensorrt_llm",
    marker="nv_trt_llm_request_metrics",
    presence="nv_trt_llm_request_metrics",
    source=f"{TRTLLM_COMMIT} inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc",
    histograms={"nv_inference_first_response_histogram_ms": ("ttft", MS)},
    means={
        "request": MeanOf("nv_inference_request_duration_us", "nv_inference_request_success", US),
        "queue": MeanOf("nv_inference_queue_duration_us", "nv_inference_request_success", US),
    },
    gauges={
        ("nv_trt_llm_request_metrics", "request_type", "waiting"): "waiting",
        ("nv_trt_llm_request_metrics", "request_type", "active"): "running",
        ("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction"): "kv_usage",
    },
    counters={
        ("nv_llm_input_token_len_sum", "response_metric_type", "total_input_tokens"): "prompt_tokens",
        ("nv_llm_output_token_len_sum", "response_metric_type", "total_output_tokens"): "finished_tokens",
        ("nv_llm_output_token_len_count", "response_metric_type", "total_output_tokens"): "finished",
    },
    derived={
        "pertoken": Derived(
            per_token_from_request,
            "(nv_inference_request_duration_us / nv_inference_request_success) / n, "
            "n = nv_llm_output_token_len mean; exact when the window's requests have equal n",
        ),
        "itl": Derived(
            itl_from_request,
            "(request latency - nv_inference_first_response_histogram_ms mean) / (n - 1); "
            "exact when the window's requests have equal n",
        ),
    },
)
