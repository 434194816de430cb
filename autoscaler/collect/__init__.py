"""Metric sources: where the window statistics of a model come from.

This package owns reading metrics over the network and nothing else. Two sources implement
:class:`WindowSource`:

- :class:`~autoscaler.collect.direct.DirectSource` scrapes each Triton pod's ``/metrics``
  (static targets, or the pods of a Service's EndpointSlices) and keeps a
  :class:`~autoscaler.aggregate.WindowAggregator` per model; the default, no Prometheus needed.
- :class:`~autoscaler.collect.promql.PrometheusSource` asks a Prometheus server, with PromQL
  ``increase()`` over the window, for the same statistics.

A source never reads the clock: ``now`` comes from the control loop. A source that can read nothing
raises :class:`SourceError`; the loop then holds the replicas and counts the error. A source that
reads some pods but not others reports each failure through its ``on_error`` callback and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from autoscaler.aggregate import WindowStats

#: ``on_error(target, message)``: one failed scrape of one target (a pod, or the Prometheus server).
ErrorCallback = Callable[[str, str], None]


class SourceError(RuntimeError):
    """Nothing could be read this round; the message says which targets failed and why."""


class WindowSource(Protocol):
    def read(self, now: float, model_id: str, time_window: float) -> WindowStats:
        """The statistics of ``model_id`` over ``(now - time_window, now]``."""
        ...

    def close(self) -> None:
        """Releases connections."""
        ...


def ignore_error(target: str, message: str) -> None:
    """The default ``on_error``: failures are still raised as :class:`SourceError` when total."""
