"""Prometheus adapter: `Observations` and `EngineStats` onto Triton's metrics endpoint.

Uses `pb_utils.MetricFamily`, so the series appear on Triton's own metrics port next to its `nv_*`
metrics; names and buckets are documented in docs/metrics.md.

Updates from the model's threads only increment and observe: those release the GIL while the stub
waits for the server's answer, `Metric.set()` holds it. A server killed mid-`set()` never answers, and
a thread stuck there with the GIL held keeps every other thread of the stub, its own exit and our
parent watchdog included, from running. Gauges therefore move by increments (`_Gauge`).
"""

from __future__ import annotations

import ctypes
from typing import Any

from triton_backend.engine_stats import EngineStats
from triton_backend.metrics import LATENCY_BUCKETS, TOKEN_BUCKETS, Observations
from triton_backend.outputs import FinishReason
from triton_backend.presets import ModelInfo

# Gauge values go out rounded to multiples of 2**-20: sums and differences of such values are exact in
# a double, so a gauge moved by increments reads exactly what was last recorded, with no drift.
_GAUGE_STEP = 2.0**-20


class _Gauge:
    """A gauge moved by increments from the value it was last given (see the module's docstring)."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._value = 0.0

    def set(self, value: float) -> None:
        value = round(value / _GAUGE_STEP) * _GAUGE_STEP
        if value != self._value:
            self._metric.increment(value - self._value)
            self._value = value


class TritonMetrics:
    def __init__(self, pb_utils: Any, model: str, version: str, instance: str, info: ModelInfo) -> None:
        family = pb_utils.MetricFamily
        labels = {"model": model, "version": version}
        # Instances of a model share a series when their labels match: counters and histograms add
        # up there, but a gauge would hold whichever instance set it last. Gauges name the instance.
        # Not "instance": Prometheus gives every target that label.
        own = {**labels, "model_instance": instance}
        # A family must outlive its metrics, so every family is kept on the object.
        self._families: list[Any] = []

        def new_family(name: str, doc: str, kind: Any) -> Any:
            self._families.append(family(name=name, description=doc, kind=kind))
            return self._families[-1]

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return new_family(name, doc, family.HISTOGRAM).Metric(labels=labels, buckets=list(buckets))

        def single(name: str, doc: str, kind: Any) -> Any:
            return new_family(name, doc, kind).Metric(labels=own if kind == family.GAUGE else labels)

        def gauge(name: str, doc: str) -> _Gauge:
            return _Gauge(single(name, doc, family.GAUGE))

        self.request_latency = histogram(
            "nlg_request_latency_seconds", "Arrival to final response of finished requests", LATENCY_BUCKETS
        )
        self.ttft = histogram(
            "nlg_time_to_first_token_seconds", "Arrival to first token, per choice", LATENCY_BUCKETS
        )
        self.tpot = histogram(
            "nlg_time_per_output_token_seconds",
            "Per-token latency: a choice's whole latency, first token included, over its generated tokens "
            "(vLLM's time_per_output_token is the gap between tokens: nlg_inter_token_latency_seconds)",
            TOKEN_BUCKETS,
        )
        self.itl = histogram(
            "nlg_inter_token_latency_seconds", "Time between consecutive tokens", TOKEN_BUCKETS
        )
        self.prompt_tokens = single(
            "nlg_prompt_tokens_total", "Prompt tokens of admitted requests", family.COUNTER
        )
        self.generation_tokens = single("nlg_generation_tokens_total", "Generated tokens", family.COUNTER)
        finished_family = new_family(
            "nlg_requests_finished_total", "Finished requests by finish reason", family.COUNTER
        )
        self.finished = {
            reason.value: finished_family.Metric(labels={**labels, "finish_reason": reason.value})
            for reason in FinishReason
        }
        self.rejected = single(
            "nlg_requests_rejected_total", "Requests refused for bad input", family.COUNTER
        )
        self.running = gauge("nlg_requests_running", "Requests in the running batch")
        self.waiting = gauge("nlg_requests_waiting", "Requests waiting for KV cache room")
        # An info metric (value 1): what this instance serves, random weights included, in plain sight.
        # Set once, in initialize(), before any thread of ours runs.
        self.model_info = new_family("nlg_model_info", "What the instance serves", family.GAUGE).Metric(
            labels={
                **own,
                "preset": info.preset,
                "weights": "random" if info.random_weights else info.source,
                "dtype": info.dtype,
                "device": info.device,
            }
        )
        self.model_info.set(1)
        self.preemptions = single(
            "nlg_preemptions_total", "Sequences preempted for KV memory and recomputed later", family.COUNTER
        )
        self.length_predictions = single(
            "nlg_length_predictions_total", "Requests given a predicted output length on arrival (S3)", family.COUNTER
        )
        self.length_underestimates = single(
            "nlg_length_underestimates_total",
            "Choices that generated more tokens than their predicted length",
            family.COUNTER,
        )
        # What the engine's cumulative counts were at the last record, per counter.
        self._seen = {"preemptions": 0, "length_predictions": 0, "length_underestimates": 0}
        self.kv_usage = gauge("nlg_kv_cache_usage_ratio", "Used over total KV cache pages")

    def keep_past_exit(self) -> None:
        """Keeps every metric and family alive through the stub's exit. Triton 2.51's stub frees what is
        left of them while it is being torn down and dies of SIGSEGV there (``Metric::Clear`` reads the
        stub: triton-inference-server/server#8662, fixed after 2.51 by python_backend#429). Freeing
        them earlier is no way out: a family is the series every instance of the model shares, and an
        instance retired by a scale-in that freed its families made the server abort at the next request."""
        for held in [*self._families, *vars(self).values()]:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(held))

    def record(self, observations: Observations) -> None:
        for metric, values in (
            (self.request_latency, observations.request_latency),
            (self.ttft, observations.time_to_first_token),
            (self.tpot, observations.time_per_output_token),
            (self.itl, observations.inter_token_latency),
        ):
            for value in values:
                metric.observe(value)
        if observations.prompt_tokens:
            self.prompt_tokens.increment(observations.prompt_tokens)
        if observations.generation_tokens:
            self.generation_tokens.increment(observations.generation_tokens)
        for reason, count in observations.finished.items():
            self.finished[reason].increment(count)

    def record_rejected(self) -> None:
        self.rejected.increment(1)

    def record_engine(self, stats: EngineStats) -> None:
        self.running.set(stats.running_requests)
        self.waiting.set(stats.waiting_requests)
        self.kv_usage.set(stats.kv_usage)
        for name, now in (
            ("preemptions", stats.preemptions),
            ("length_predictions", stats.length_predictions),
            ("length_underestimates", stats.length_underestimates),
        ):
            if now > self._seen[name]:
                getattr(self, name).increment(now - self._seen[name])
                self._seen[name] = now
