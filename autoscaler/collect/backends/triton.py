"""Triton's own per-model metrics, for any backend (an LLM one this autoscaler does not know, or none).

Source: triton-inference-server/core@73aad7c3348d040c7087d57837d75822c488495e (2026-06-09),
``src/metrics.cc`` and ``src/metric_model_reporter.{h,cc}``: labels ``model`` and ``version``.

- ``nv_inference_request_success`` (counter): requests finished without error.
- ``nv_inference_request_duration_us``, ``nv_inference_queue_duration_us`` (counters, cumulative
  microseconds; "counter_latencies", on by default): the window's mean request latency and queue
  time are their increases over the increase of ``nv_inference_request_success``; no quantiles.
- ``nv_inference_pending_request_count`` (gauge): requests awaiting execution, the ``waiting`` signal.
- ``nv_inference_first_response_histogram_ms`` (histogram, ms; default buckets 100, 500, 2000, 5000):
  TTFT of decoupled models, with ``--metrics-config histogram_latencies=true``.
- The ``nv_inference_*_summary_us`` summaries (``summary_latencies=true``) are not read: a summary's
  quantiles are over the server's life (or its own age window), not the autoscaler's window.

What these measure depends on the backend: for a decoupled Python-backend model whose ``execute()``
hands requests to an engine thread and returns (this project's model, vLLM's), the request duration
and queue time end when ``execute()`` returns, not with the stream; the queue time is then Triton's
queue in front of ``execute()``, and the engine's own queue is not in it.
"""

from __future__ import annotations

from typing import Final

from autoscaler.collect.backends.base import MS, TRITON_CORE_COMMIT, US, Backend, MeanOf

TRITON: Final = Backend(
    name="triton",
    marker="nv_inference_request_success",
    presence="nv_inference_request_success",
    source=f"{TRITON_CORE_COMMIT} src/metrics.cc",
    histograms={"nv_inference_first_response_histogram_ms": ("ttft", MS)},
    means={
        "request": MeanOf("nv_inference_request_duration_us", "nv_inference_request_success", US),
        "queue": MeanOf("nv_inference_queue_duration_us", "nv_inference_request_success", US),
    },
    gauges={("nv_inference_pending_request_count", "", ""): "waiting"},
)
