"""Turns one Triton pod's Prometheus exposition text into a :class:`~autoscaler.aggregate.PodSample`.

This module owns reading a page through a backend's mapping (:mod:`autoscaler.collect.backends`:
this project's names of ``docs/metrics.md`` by default, vLLM's, TensorRT-LLM's or Triton's own) to the
short names and seconds the aggregator and the policies use, and the rules for series that do not
fit one-to-one:

- Only series whose ``model`` label is the scaled model count.
- Counters (``_total``) are summed over their labels: finished requests over every ``finish_reason``.
- Several series where one was expected (the model's versions, each its own ``version`` label)
  are summed: every version serves traffic. ``kv_usage`` is averaged instead: it is a ratio.
- Histogram buckets are matched on their ``le`` label (``+Inf`` included), merged over versions;
  a family in ms or us has its bounds and ``_sum`` scaled to seconds.
- A gauge or counter the backend selects by a label (``request_type="waiting"``) reads only the
  series with that value.
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

import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Final, Generic, TypeVar

from autoscaler.aggregate import Histogram, PodSample
from autoscaler.collect.backends.base import AVERAGED, Backend
from autoscaler.collect.backends.nlg import COUNTER_SAMPLES, GAUGE_FAMILIES, HISTOGRAM_FAMILIES, NLG

__all__ = [
    "COUNTER_SAMPLES", "GAUGE_FAMILIES", "HISTOGRAM_FAMILIES",
    "ExpositionError", "gauge_totals", "parse_exposition",
]  # fmt: skip

#: Where each series of a sample goes, for one backend: ``(sample, label value)`` -> ``(kind, short
#: name, scale)``, kind one of ``bucket``, ``sum``, ``count``, ``gauge``, ``counter``.
_Entries = dict[tuple[str, str], tuple[tuple[str, str, float], ...]]


def _entries(backend: Backend) -> _Entries:
    out: dict[tuple[str, str], list[tuple[str, str, float]]] = {}
    for family, (short, scale) in backend.histograms.items():
        for part in ("bucket", "sum", "count"):
            out.setdefault((f"{family}_{part}", ""), []).append((part, short, scale))
    for short, mean in backend.means.items():
        out.setdefault((mean.sum_sample, ""), []).append(("sum", short, mean.scale))
        out.setdefault((mean.count_sample, ""), []).append(("count", short, 1.0))
    for (sample, _, value), short in backend.gauges.items():
        out.setdefault((sample, value), []).append(("gauge", short, 1.0))
    for (sample, _, value), short in backend.counters.items():
        out.setdefault((sample, value), []).append(("counter", short, 1.0))
    return {key: tuple(entries) for key, entries in out.items()}


def _selectors(backend: Backend) -> dict[str, str]:
    """Sample name -> the label whose value tells its series apart (``""``: none; ``le`` for buckets)."""
    names = {sample: "" for sample, _ in _entries(backend)}
    for family in backend.histograms:
        names[f"{family}_bucket"] = "le"
    for sample, label, _ in (*backend.gauges, *backend.counters):
        names[sample] = label
    return names


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


#: What one series is to a reader: (sample name, its selecting label's value or "", bucket bound or
#: 0), or None (not read).
_Series = tuple[str, str, float] | None
#: Distinct series a reader remembers per model, and models; past these it starts afresh.
_MAX_SERIES: Final = 4096
_MAX_MODELS: Final = 64


T = TypeVar("T")


class _Known(Generic[T]):
    """What a reader learnt of one model's pages: each line head's slot (-1: not read), each
    series' slot, and what each slot is to the caller. Heads of several versions of one series
    share its slot."""

    __slots__ = ("heads", "index", "series")

    def __init__(self) -> None:
        self.heads: dict[str, int] = {}
        self.index: dict[tuple[str, str, float], int] = {}
        self.series: list[T] = []


class _SeriesReader(Generic[T]):
    """Reads the samples in ``names`` (sample name -> the label that tells its series apart, ``le``
    for buckets, ``""`` for none) and remembers what each series of a model is (keyed by the line's
    text up to its last ``}``), and what ``resolve`` makes of it, once per series."""

    def __init__(self, names: dict[str, str], resolve: Callable[[tuple[str, str, float]], T]) -> None:
        self._names = names
        self._resolve = resolve
        # One prefix test is cheaper than one per name; the names that merely share it are told
        # apart by the series cache below.
        self._prefix = os.path.commonprefix(list(names))
        self._known: dict[str, _Known[T]] = {}

    def totals(self, text: str, model_id: str) -> list[tuple[T, float, float]]:
        """Each series of ``model_id`` the page has, resolved from ``(sample, label value, bucket bound or 0)``,
        with the sum and the number of its samples (series differing only in other labels, such as
        ``version``, are one), summed in the page's order."""
        known = self._known.get(model_id)
        if known is None or len(known.heads) > _MAX_SERIES:
            if len(self._known) >= _MAX_MODELS:
                self._known.clear()
            known = self._known[model_id] = _Known[T]()
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

    def _slot(self, known: _Known[T], head: str, model_id: str) -> int:
        series = self._series(head, model_id)
        if series is None:
            return -1
        slot = known.index.get(series)
        if slot is None:
            slot = known.index[series] = len(known.series)
            known.series.append(self._resolve(series))
        return slot

    def _series(self, head: str, model_id: str) -> _Series:
        name, brace, labels_text = head.partition("{")
        if not brace:
            raise ExpositionError(f"not Prometheus text format: {head[:200]!r}")
        label = self._names.get(name)
        if label is None:
            return None  # a longer name that starts like a wanted one
        labels = _labels(labels_text)
        if labels.get("model") != model_id:
            return None
        if not label:
            return name, "", 0.0
        le = labels.get(label)
        if le is None:
            return None
        if label != "le":
            return name, le, 0.0
        try:
            return name, "", float(le)
        except ValueError:
            raise ExpositionError(f"bucket bound le={le!r} is not a number in {head[:200]!r}") from None


#: Where one series goes: ``(kind, short name, bucket bound in seconds, scale)`` for each reader of it.
_Targets = tuple[tuple[str, str, float, float], ...]


class _Reading:
    """One backend's reader, each series resolved once to where it goes."""

    def __init__(self, backend: Backend) -> None:
        entries = _entries(backend)

        def targets(series: tuple[str, str, float]) -> _Targets:
            sample, value, bound = series
            return tuple((kind, name, bound * scale, scale) for kind, name, scale in entries.get((sample, value), ()))

        self.reader = _SeriesReader(_selectors(backend), targets)
        self.counts_only = set(backend.means)


_READINGS: Final[dict[str, _Reading]] = {}


def parse_exposition(text: str, model_id: str, backend: Backend = NLG) -> PodSample:
    """The histograms, gauges and counters of ``model_id`` in one scrape, in ``backend``'s names
    turned into the aggregator's short names and seconds; families absent stay absent.

    A mean-only latency (:class:`~autoscaler.collect.backends.base.MeanOf`) is a histogram with only
    the ``+Inf`` bucket: its window has a mean and no quantiles."""
    reading = _READINGS.get(backend.name)
    if reading is None:
        reading = _READINGS[backend.name] = _Reading(backend)
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    for targets, total, n in reading.reader.totals(text, model_id):
        for kind, name, bound, scale in targets:
            if kind == "bucket":
                buckets.setdefault(name, {})[bound] = total
            elif kind == "sum":
                sums[name] = total * scale
            elif kind == "count":
                counts[name] = total
            elif kind == "gauge":
                gauges[name] = total / n if name in AVERAGED else total
            else:
                counters[name] = total
    histograms = {
        name: Histogram.of_columns(tuple(per_le), tuple(per_le.values()), sums.get(name, 0.0), counts[name])
        for name, per_le in buckets.items()
        if name in counts
    }
    for name in reading.counts_only & counts.keys() & sums.keys():
        histograms[name] = Histogram(((math.inf, counts[name]),), sums[name], counts[name])
    return PodSample(histograms=histograms, gauges=gauges, counters=counters)


def gauge_totals(text: str, model_id: str, family_names: Iterable[str]) -> dict[str, float]:
    """Each named gauge's samples for ``model_id`` summed (all versions and instances), in one pass;
    a family with no sample for the model is left out."""
    reader = _SeriesReader(dict.fromkeys(family_names, ""), lambda series: series[0])
    return {name: total for name, total, _ in reader.totals(text, model_id)}
