"""This project's model (``triton_backend/triton_metrics.py``, ``docs/metrics.md``): every signal,
natively. ``nlg_time_per_output_token_seconds`` is the thesis's per-token latency (a choice's whole
latency over its tokens, first token included); the time between tokens is
``nlg_inter_token_latency_seconds`` (what vLLM calls ``time_per_output_token``)."""

from __future__ import annotations

from typing import Final

from autoscaler.collect.backends.base import Backend

#: Triton model metric family -> the aggregator's histogram name (seconds).
HISTOGRAM_FAMILIES: Final[dict[str, str]] = {
    "nlg_request_latency_seconds": "request",
    "nlg_time_per_output_token_seconds": "pertoken",
    "nlg_time_to_first_token_seconds": "ttft",
    "nlg_inter_token_latency_seconds": "itl",
}
#: Triton model gauge -> the aggregator's gauge name.
GAUGE_FAMILIES: Final[dict[str, str]] = {
    "nlg_requests_waiting": "waiting",
    "nlg_requests_running": "running",
    "nlg_kv_cache_usage_ratio": "kv_usage",
    # 1 per model instance: the replicas serving, where one pod holds several (the Triton actuator).
    "nlg_model_info": "instances",
}
#: Triton model counter sample -> the aggregator's counter name (all ``finish_reason`` values summed).
COUNTER_SAMPLES: Final[dict[str, str]] = {
    "nlg_prompt_tokens_total": "prompt_tokens",
    "nlg_generation_tokens_total": "generation_tokens",
    "nlg_requests_finished_total": "finished",
}

NLG: Final = Backend(
    name="nlg",
    marker="nlg_requests_running",
    presence="nlg_requests_running",
    source="triton_backend/triton_metrics.py (this repository)",
    histograms={family: (short, 1.0) for family, short in HISTOGRAM_FAMILIES.items()},
    gauges={(family, "", ""): short for family, short in GAUGE_FAMILIES.items()},
    counters={(sample, "", ""): short for sample, short in COUNTER_SAMPLES.items()},
)
