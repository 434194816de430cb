"""The exposition parser as it was before the fleet-scale one: prometheus-client's text parser over
the whole scrape, then the mapping of :mod:`autoscaler.collect.exposition`.

Kept as the reference the line parser must agree with (tests/autoscaler/test_exposition_parser.py)
and is measured against (:mod:`benchmarks.fleet_round`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Final

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.aggregate import Histogram, PodSample
from autoscaler.collect.exposition import COUNTER_SAMPLES, GAUGE_FAMILIES, HISTOGRAM_FAMILIES, ExpositionError

# A typed counter's family drops ``_total``; an untyped one keeps it.
_COUNTER_FAMILIES: Final = {n.removesuffix("_total") for n in COUNTER_SAMPLES} | set(COUNTER_SAMPLES)
_AVERAGED: Final = {"kv_usage"}


def _families(text: str) -> list[Metric]:
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as e:
        raise ExpositionError(f"not Prometheus text format: {e}") from e


def reference_parse_exposition(text: str, model_id: str) -> PodSample:
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
