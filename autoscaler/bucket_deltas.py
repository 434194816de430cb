"""Increases of cumulative histograms: from one scrape of a pod to the next, over runs of scrapes, and
summed over pods.

Pure arithmetic on plain tuples and lists, no time; :mod:`autoscaler.aggregate` decides which steps a
window holds and states the rules for odd input, which are implemented here:

- A histogram with NaN or Inf anywhere is no point at all (:func:`point` returns ``None``).
- Buckets are sorted by bound and made monotonic with a running max from 0.
- A step whose count went down is a restart: its increase is the new histogram itself.
- Each bucket's increase is ``max(0, after - before)``, ``before`` read at the largest bound of the
  earlier scrape that is <= the bucket's bound (the bounds may differ between scrapes).
- A run of steps none of which restarts, changes bounds or has a bucket go down increases by its
  last point minus its first (:func:`regular`, :func:`telescoped`): the steps' sum, telescoped.
- A bound listed twice in one histogram (the exposition parser never makes one: it sums a bound's
  series) is kept as two buckets; the code these windows replaced summed them into one.
- A sum of steps keeps the increases per set of bounds (a "layout"); a pod's buckets are the union of
  its layouts' bounds, each bound summing the layouts that have it; pods are merged on the union of
  their bounds, each pod read at its largest bound <= the union bound.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from itertools import accumulate
from operator import add, sub
from typing import NamedTuple

Bounds = tuple[float, ...]


# Tuples of floats all through: the garbage collector stops tracking them, so the thousands of points
# a fleet's windows hold cost nothing at each collection.


class Point(NamedTuple):
    """A finite cumulative histogram, sorted and monotonic; ``bounds`` interned (see :func:`point`);
    ``total`` is its ``_sum``, ``n`` its ``_count``."""

    bounds: Bounds
    values: tuple[float, ...]
    total: float
    n: float


class Delta(NamedTuple):
    """An increase: per-bucket increases on ``bounds`` (and on ``others``, layouts that differ, when a
    sum spans a change of bounds), plus the increases of ``_sum`` (``total``) and ``_count`` (``n``)."""

    bounds: Bounds
    values: tuple[float, ...]
    total: float
    n: float
    others: tuple[tuple[Bounds, tuple[float, ...]], ...] = ()

    def layouts(self) -> dict[Bounds, tuple[float, ...]]:
        return {self.bounds: self.values, **dict(self.others)}


#: One object per distinct set of bounds, so that steps compare layouts by identity, with whether it
#: is sorted (strictly: a bound listed twice is not) and whether it holds a NaN. Pods of one fleet
#: share a handful of layouts; the cap keeps odd input from growing it.
_LAYOUTS: dict[Bounds, tuple[Bounds, bool, bool]] = {}
_MAX_LAYOUTS = 1024


def _interned(bounds: Bounds) -> tuple[Bounds, bool, bool]:
    known = _LAYOUTS.get(bounds)
    if known is None:
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        ordered = all(map(operator.lt, bounds, bounds[1:]))
        known = _LAYOUTS[bounds] = (bounds, ordered, any(map(math.isnan, bounds)))
    return known


def point(
    buckets: Sequence[tuple[float, float]],
    total: float,
    count: float,
    columns: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> Point | None:
    """``buckets`` (``(le, cumulative)``, or already split into ``columns``) in normal form; ``None``
    when anything is NaN or Inf."""
    if not buckets:
        return Point(_interned(())[0], (), total, count) if math.isfinite(total) and math.isfinite(count) else None
    bounds, counts = columns or zip(*buckets, strict=True)
    bounds, ordered, has_nan = _interned(bounds)
    if not ordered:  # unsorted, or a bound twice: sort as pairs
        bounds, counts = zip(*sorted(buckets), strict=True)
        bounds, _, has_nan = _interned(bounds)
    values: tuple[float, ...] = counts
    if has_nan or not (math.isfinite(total) and math.isfinite(count)):
        return None
    if values[0] >= 0.0 and all(map(operator.le, values, values[1:])):  # the usual: already monotonic,
        if not math.isfinite(values[-1]):  # so without NaN, and finite if its largest value is
            return None
    elif all(map(math.isfinite, values)):
        values = tuple(accumulate(values, max, initial=0.0))[1:]  # a running max from 0
    else:
        return None
    return Point(bounds, values, total, count)


def step(before: Point | None, after: Point) -> Delta:
    """The increase from ``before`` to ``after`` (``None``: nothing before, all of ``after`` is new)."""
    if before is None or after.n < before.n:  # a smaller count: the pod restarted
        return Delta(after.bounds, tuple([c if c > 0.0 else 0.0 for c in after.values]), after.total, after.n)
    if before.bounds is after.bounds:
        increases = [d if d > 0.0 else 0.0 for d in map(sub, after.values, before.values)]
    else:
        increases = []
        i, previous = 0, 0.0
        for le, c in zip(after.bounds, after.values, strict=True):
            while i < len(before.bounds) and before.bounds[i] <= le:
                previous = before.values[i]
                i += 1
            d = c - previous
            increases.append(d if d > 0.0 else 0.0)
    return Delta(after.bounds, tuple(increases), after.total - before.total, after.n - before.n)


def regular(before: Point, after: Point) -> bool:
    """Whether the step's increase is ``after - before`` bucket by bucket: same bounds, no restart,
    no bucket that went down. A run of such steps adds up to its last point minus its first."""
    return after.bounds is before.bounds and after.n >= before.n and all(map(operator.le, before.values, after.values))


def telescoped(first: Point, last: Point) -> Delta:
    """The increase over a run of regular steps from ``first`` to ``last``."""
    return Delta(last.bounds, tuple(map(sub, last.values, first.values)), last.total - first.total, last.n - first.n)


def combine(a: Delta, b: Delta) -> Delta:
    """``a + b``, a new value."""
    if a.bounds is b.bounds and not a.others and not b.others:
        return Delta(a.bounds, tuple(map(add, a.values, b.values)), a.total + b.total, a.n + b.n)
    layouts = a.layouts()
    for bounds, values in b.layouts().items():
        mine = layouts.get(bounds)
        layouts[bounds] = values if mine is None else tuple(map(add, mine, values))
    (bounds, values), *rest = layouts.items()
    return Delta(bounds, values, a.total + b.total, a.n + b.n, tuple(rest))


def _pairs(delta: Delta) -> tuple[Bounds, Sequence[float]]:
    """A pod's buckets: its one layout, or the union of its layouts' bounds."""
    if not delta.others:
        return delta.bounds, delta.values
    per_bound: dict[float, float] = {}
    for bounds, values in delta.layouts().items():
        for le, v in zip(bounds, values, strict=True):
            per_bound[le] = per_bound.get(le, 0.0) + v
    ordered = sorted(per_bound)
    return tuple(ordered), [per_bound[le] for le in ordered]


def merge_pods(deltas: Iterable[Delta]) -> tuple[list[tuple[float, float]], float, float]:
    """Pods' increases added up: ``(buckets, sum, count)``, buckets on the union of the pods' bounds."""
    pods = [(*_pairs(d), d) for d in deltas]
    total, count = 0.0, 0.0
    for _, _, d in pods:
        total += d.total
        count += d.n
    first = pods[0][0] if pods else ()
    if all(bounds is first for bounds, _, _ in pods):
        sums: Sequence[float] = [0.0] * len(first)
        for _, values, _ in pods:
            sums = tuple(map(add, sums, values))
        return list(zip(first, sums, strict=True)), total, count
    union = sorted({le for bounds, _, _ in pods for le in bounds})
    merged = [0.0] * len(union)
    for bounds, values, _ in pods:
        i, current = 0, 0.0
        for j, le in enumerate(union):
            while i < len(bounds) and bounds[i] <= le:
                current = values[i]
                i += 1
            merged[j] += current
    return list(zip(union, merged, strict=True)), total, count
