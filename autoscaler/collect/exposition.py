"""Turns one Triton pod's Prometheus exposition text into a :class:`~autoscaler.aggregate.PodSample`.

This module owns the mapping from the metric names of ``docs/metrics.md`` to the short names the
aggregator and the policies use, and the rules for series that do not fit one-to-one:

- Only series whose ``model`` label is the scaled model count.
- Counters (``_total``) are summed over their labels: finished requests over every ``finish_reason``.
- Several series where one was expected (the model's versions, each its own ``version`` label)
  are summed: every version serves traffic. ``kv_usage`` is averaged instead: it is a ratio.
- Histogram buckets are matched on their ``le`` label (``+Inf`` included), merged over versions.
- A NaN or Inf sample is passed on as is; the aggregator ignores it (see :mod:`autoscaler.aggregate`).

Only the lines of the families read here are parsed: a Triton pod's scrape is mostly Triton's own
``nv_*`` families and the model's other ones, and a fleet's worth of them must parse in a fraction of
the loop interval (``benchmarks/fleet_round.md`` measures it against prometheus-client's parser).
A line is kept when it starts with a wanted sample name (``# HELP`` and ``# TYPE`` lines are not
needed); its labels are parsed once per distinct label set and remembered, since every pod and
every round repeats the same ones. A kept line that is not exposition format raises
:class:`ExpositionError`; the lines of other families are not read, so they cannot.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Final

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
    # 1 per model instance: the replicas serving, where one pod holds several (the Triton actuator).
    "nlg_model_info": "instances",
}
#: Triton model counter sample -> the aggregator's counter name (all ``finish_reason`` values summed).
COUNTER_SAMPLES: Final[dict[str, str]] = {
    "nlg_prompt_tokens_total": "prompt_tokens",
    "nlg_generation_tokens_total": "generation_tokens",
    "nlg_requests_finished_total": "finished",
}
_AVERAGED: Final = {"kv_usage"}
#: Sample name -> (kind, short name): what :func:`parse_exposition` reads.
_WANTED: Final[dict[str, tuple[str, str]]] = {
    **{f"{family}_{part}": (part, short) for family, short in HISTOGRAM_FAMILIES.items()
       for part in ("bucket", "sum", "count")},
    **{family: ("gauge", short) for family, short in GAUGE_FAMILIES.items()},
    **{sample: ("counter", short) for sample, short in COUNTER_SAMPLES.items()},
}  # fmt: skip
_LABEL: Final = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPE: Final = re.compile(r"\\(.)")
_UNESCAPED: Final = {"n": "\n", "\\": "\\", '"': '"'}


class ExpositionError(ValueError):
    """The text is not Prometheus exposition format."""


def _labels(text: str) -> dict[str, str]:
    """The label pairs of ``name{...}``, between the braces."""
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if match is None:
            raise ExpositionError(f"bad labels {{{text[:200]}}}")
        name, raw = match.group(1), match.group(2)
        labels[name] = _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), "\\" + m.group(1)), raw) if "\\" in raw else raw
        pos = match.end()
    return labels


def _value(tail: str, line: str) -> float:
    """The sample value of what follows ``}``: a number, maybe a timestamp after it."""
    parts = tail.split()
    try:
        if len(parts) == 2:
            int(parts[1])
            return float(parts[0])
    except ValueError:
        pass
    raise ExpositionError(f"not Prometheus text format: {line[:200]!r}")


#: What one series is to a reader: (kind, short name, bucket bound or 0), or None (not read).
_Series = tuple[str, str, float] | None
#: Distinct series a reader remembers per model, and models; past these it starts afresh.
_MAX_SERIES: Final = 4096
_MAX_MODELS: Final = 64


class _Known:
    """What a reader learnt of one model's pages: each line head's slot (-1: not read), and what
    each slot is. Heads of several versions of one series share its slot."""

    __slots__ = ("heads", "series")

    def __init__(self) -> None:
        self.heads: dict[str, int] = {}
        self.series: list[tuple[str, str, float]] = []


class _SeriesReader:
    """Reads the samples of the families in ``names`` (sample name -> (kind, short name)) and
    remembers what each series of a model is (keyed by the line's text up to its last ``}``)."""

    def __init__(self, names: dict[str, tuple[str, str]]) -> None:
        self._names = names
        # One prefix test is cheaper than one per name; the names that merely share it are told
        # apart by the series cache below.
        self._prefix = os.path.commonprefix(list(names))
        self._known: dict[str, _Known] = {}

    def totals(self, text: str, model_id: str) -> list[tuple[tuple[str, str, float], float, float]]:
        """Each series of ``model_id`` the page has, as ``(kind, short name, bucket bound or 0)``,
        with the sum and the number of its samples (series differing only in other labels, such as
        ``version``, are one), summed in the page's order."""
        known = self._known.get(model_id)
        if known is None or len(known.heads) > _MAX_SERIES:
            if len(self._known) >= _MAX_MODELS:
                self._known.clear()
            known = self._known[model_id] = _Known()
        heads = known.heads
        sums = [0.0] * len(known.series)
        counts = [0] * len(known.series)
        for line in text.splitlines():
            if not line.startswith(self._prefix) or line.startswith("#"):
                continue
            head, brace, tail = line.rpartition("}")
            if not brace:
                name, brace, _ = line.partition("{")
                if brace and name in self._names:
                    raise ExpositionError(f"not Prometheus text format: {line[:200]!r}")
                continue  # no labels, so no model label: not the scaled model's
            slot = heads.get(head)
            if slot is None:
                slot = heads[head] = self._slot(known, head, model_id)
                if slot == len(sums):
                    sums.append(0.0)
                    counts.append(0)
            if slot < 0:
                continue
            try:
                value = float(tail)
            except ValueError:
                value = _value(tail, line)
            sums[slot] += value
            counts[slot] += 1
        return [(known.series[i], sums[i], n) for i, n in enumerate(counts) if n]

    def _slot(self, known: _Known, head: str, model_id: str) -> int:
        series = self._series(head, model_id)
        if series is None:
            return -1
        if series not in known.series:
            known.series.append(series)
        return known.series.index(series)

    def _series(self, head: str, model_id: str) -> _Series:
        name, brace, labels_text = head.partition("{")
        if not brace:
            raise ExpositionError(f"not Prometheus text format: {head[:200]!r}")
        wanted = self._names.get(name)
        if wanted is None:
            return None  # a longer name that starts like a wanted one
        labels = _labels(labels_text)
        if labels.get("model") != model_id:
            return None
        kind, short = wanted
        if kind != "bucket":
            return kind, short, 0.0
        le = labels.get("le")
        if le is None:
            return None
        try:
            return kind, short, float(le)
        except ValueError:
            raise ExpositionError(f"bucket bound le={le!r} is not a number in {head[:200]!r}") from None


_READER: Final = _SeriesReader(_WANTED)


def parse_exposition(text: str, model_id: str) -> PodSample:
    """The histograms, gauges and counters of ``model_id`` in one scrape; families absent stay absent."""
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    for (kind, name, bound), total, n in _READER.totals(text, model_id):
        if kind == "bucket":
            buckets.setdefault(name, {})[bound] = total
        elif kind == "sum":
            sums[name] = total
        elif kind == "count":
            counts[name] = total
        elif kind == "gauge":
            gauges[name] = total / n if name in _AVERAGED else total
        else:
            counters[name] = total
    histograms = {
        name: Histogram.of_columns(tuple(per_le), tuple(per_le.values()), sums.get(name, 0.0), counts[name])
        for name, per_le in buckets.items()
        if name in counts
    }
    return PodSample(histograms=histograms, gauges=gauges, counters=counters)


def gauge_totals(text: str, model_id: str, family_names: Iterable[str]) -> dict[str, float]:
    """Each named gauge's samples for ``model_id`` summed (all versions and instances), in one pass;
    a family with no sample for the model is left out."""
    reader = _SeriesReader({name: ("gauge", name) for name in family_names})
    return {name: total for (_, name, _), total, _ in reader.totals(text, model_id)}
