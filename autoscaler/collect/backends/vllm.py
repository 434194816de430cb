"""NVIDIA's vLLM backend for Triton: the families its ``src/utils/metrics.py`` exports.

Source: triton-inference-server/vllm_backend@8de0c148bda1da25de1e05ffaaf67116dacc7264 (2026-01-09),
``src/utils/metrics.py`` (``TritonMetrics``): labels ``model`` and ``version``; seconds.

- ``vllm:time_to_first_token_seconds``: TTFT, buckets 0.001 ... 10.
- ``vllm:time_per_output_token_seconds``: vLLM's "time per output token" is the time *between*
  tokens after the first (``inter_token_latencies_iter``), this project's ITL
  (``nlg_inter_token_latency_seconds``), not the thesis's per-token latency; buckets 0.01 ... 2.5.
- ``vllm:e2e_request_latency_seconds``: request latency, buckets 1 ... 60.
- ``vllm:request_generation_tokens`` / ``vllm:request_prompt_tokens``: tokens of each finished
  request (1-2-5 buckets up to ``max_model_len``); ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``: tokens processed; ``vllm:request_params_n``.

No gauge: the backend exports no waiting or running requests and no KV-cache use (vLLM's own server
has ``vllm:num_requests_waiting`` and ``vllm:gpu_cache_usage_perc``; the Triton backend does not
export them at any commit of its history). So ``waiting_per_replica`` and ``kv_usage`` are refused,
and an idle deployment (nothing finishing) is no data: the replicas are held, not scaled in.

The thesis's per-token latency is derived: (TTFT + ITL x (n - 1)) / n, n the mean generated tokens
of the requests that finished in the window (:func:`~autoscaler.collect.backends.base.per_token_from_ttft_itl`).
"""

from __future__ import annotations

from typing import Final

from autoscaler.collect.backends.base import Backend, Derived, per_token_from_ttft_itl

VLLM_COMMIT: Final = "triton-inference-server/vllm_backend@8de0c148bda1da25de1e05ffaaf67116dacc7264"

VLLM: Final = Backend(
    name="vllm",
    marker="vllm:time_to_first_token_seconds_count",
    presence="vllm:prompt_tokens_total",
    source=f"{VLLM_COMMIT} src/utils/metrics.py",
    histograms={
        "vllm:e2e_request_latency_seconds": ("request", 1.0),
        "vllm:time_to_first_token_seconds": ("ttft", 1.0),
        "vllm:time_per_output_token_seconds": ("itl", 1.0),
    },
    counters={
        ("vllm:prompt_tokens_total", "", ""): "prompt_tokens",
        ("vllm:generation_tokens_total", "", ""): "generation_tokens",
        ("vllm:request_generation_tokens_count", "", ""): "finished",
        ("vllm:request_generation_tokens_sum", "", ""): "finished_tokens",
    },
    derived={
        "pertoken": Derived(
            per_token_from_ttft_itl,
            "(vllm:time_to_first_token_seconds + vllm:time_per_output_token_seconds x (n - 1)) / n, "
            "n = vllm:request_generation_tokens mean; exact when the window's requests have equal n",
        ),
    },
)
