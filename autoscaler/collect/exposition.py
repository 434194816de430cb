"""Turns one Triton pod's Prometheus exposition text into a :class:`~autoscaler.aggregate.PodSample`.

This module owns the mapping from the metric names of ``docs/metrics.md`` to the short names the
aggregator and the policies use, and the rules for series that do not fit one-to-one:

- Only series whose ``model`` label is the scaled model count.
- Counters (``_total``) are summed over their labels: finished requests over every ``finish_reason``.
- Several series where one was expected (the model's versions, each its own ``version`` label)
  are summed: every version serves traffic. ``kv_usage`` is averaged instead: it is a ratio.
- Histogram buckets are matched on their ``le`` label (``+Inf`` included), merged over versions.
- A NaN or Inf sample is passed on as is; the aggregator ignores it (see :mod:`autoscaler.aggregate`).

Parsing uses prometheus-client's parser; malformed text raises :class:`ExpositionError`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Final

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.aggregate import Histogram, PodSample

#: Triton model metric family -> the aggregator's histogram name.
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
}
#: Triton model counter sample -> the aggregator's counter name (all ``finish_reason`` values summed).
COUNTER_SAMPLES: Final[dict[str, str]] = {
    "nlg_prompt_tokens_total": "prompt_tokens",
    "nlg_generation_tokens_total": "generation_tokens",
    "nlg_requests_finished_total": "finished",
}
# A typed counter's family drops ``_total``; an untyped one keeps it.
_COUNTER_FAMILIES: Final = {n.removesuffix("_total") for n in COUNTER_SAMPLES} | set(COUNTER_SAMPLES)
_AVERAGED: Final = {"kv_usage"}


class ExpositionError(ValueError):
    """The text is not Prometheus exposition format."""


def _families(text: str) -> list[Metric]:
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as e:
        raise ExpositionError(f"not Prometheus text format: {e}") from e


def parse_exposition(text: str, model_id: str) -> PodSample:
    """The histograms and gauges of ``model_id`` in one scrape; families absent stay absent."""
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    gauges: dict[str, list[float]] = defaultdict(list)
    counters: dict[str, float] = defaultdict(float)
    for family in _families(text):
        hist_name = HISTOGRAM_FAMILIES.get(family.name)
        gauge_name = GAUGE_FAMILIES.get(family.name)
        if hist_name is None and gauge_name is None and family.name not in _COUNTER_FAMILIES:
            continue
        for sample in family.samples:
            if sample.labels.get("model") != model_id:
                continue
            if sample.name in COUNTER_SAMPLES:
                counters[COUNTER_SAMPLES[sample.name]] += float(sample.value)
            elif gauge_name is not None:
                gauges[gauge_name].append(float(sample.value))
            elif hist_name is not None:
                if sample.name.endswith("_bucket") and "le" in sample.labels:
                    buckets[hist_name][float(sample.labels["le"])] += float(sample.value)
                elif sample.name.endswith("_sum"):
                    sums[hist_name] += float(sample.value)
                elif sample.name.endswith("_count"):
                    counts[hist_name] += float(sample.value)
    histograms = {
        name: Histogram(tuple(sorted(per_le.items())), sums[name], counts[name])
        for name, per_le in buckets.items()
        if name in counts
    }
    merged = {name: sum(v) / len(v) if name in _AVERAGED else sum(v) for name, v in gauges.items()}
    return PodSample(histograms=histograms, gauges=merged, counters=dict(counters))


def gauge_totals(text: str, model_id: str, family_names: Iterable[str]) -> dict[str, float]:
    """Each named family's samples for ``model_id`` summed (all versions and instances), in one parse;
    a family with no sample for the model is left out."""
    wanted = set(family_names)
    totals: dict[str, float] = {}
    for family in _families(text):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            if sample.labels.get("model") == model_id:
                totals[family.name] = totals.get(family.name, 0.0) + float(sample.value)
    return totals
