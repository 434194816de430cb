"""Prometheus source: the window statistics of a model from PromQL over Prometheus's HTTP API.

This module owns the queries and the reading of their answers. Histograms come from
``sum by (le) (increase(<family>_bucket{model="..."}[<window>]))`` plus ``_sum`` and ``_count``,
reduced to mean and quantiles by :func:`autoscaler.aggregate.latency_stats` (the same arithmetic as
the direct source); counters from ``sum(increase(<series>{model="..."}[<window>]))``.
Gauges are summed over pods (``kv_usage`` averaged); ``pods`` counts the pods
reporting the backend's ``presence`` sample (``nlg_requests_running`` for this project's model).
Queries are evaluated at ``now`` (``time=`` parameter).

The names are a backend's (:mod:`autoscaler.collect.backends`, ``metrics.backend``): with ``auto``
the first backend whose marker series for the model Prometheus has (one ``group by (__name__)``
query, remembered once found); a mean-only latency (Triton's summed durations) is the increase of its
sum over the increase of its count; derived latencies are computed from the window last.

Recorded series first: the chart's recording rules (``templates/prometheus-rules.yaml``, with
``monitoring.enabled``) keep each of those increases summed per namespace and model, under the name
:func:`recorded_name` gives (``namespace_model:<series>:increase<window>``). Each value is read from
its recorded series when Prometheus has it, so a query costs the same for 10 pods or 10,000; when
the answer is empty (no rules for this window, or none loaded) the same value is computed from the
pods' raw series, as above. A recorded value lags by up to one rule evaluation interval.

Rules for odd answers (each has a table test):

- An empty vector is no data for that value (nothing was scraped, or no such series yet).
- NaN or Inf (Prometheus writes them as strings) is no data for that value; a NaN bucket makes the
  whole histogram no data.
- Several series where one was expected is a :class:`~autoscaler.collect.SourceError` naming the
  query: the selector matches more than it should, and guessing which one to use would hide that.
- An HTTP error, a non-JSON body or ``status != success`` is a
  :class:`~autoscaler.collect.SourceError` (the loop holds the replicas and counts it).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Final

import httpx

from autoscaler.aggregate import LatencyStats, WindowStats, latency_stats
from autoscaler.collect import ErrorCallback, SourceError, ignore_error
from autoscaler.collect.backends import BACKENDS, DETECT_ORDER, Backend
from autoscaler.collect.backends.base import AVERAGED, MeanOf
from autoscaler.collect.backends.nlg import NLG


def recorded_series(backend: Backend) -> tuple[str, ...]:
    """The series whose increase over the window the recording rules keep for ``backend`` (and this
    source reads). A counter the backend selects by a label is recorded summed over that label: each
    such family has one value of it (``nv_llm_output_token_len{response_metric_type=...}``)."""
    means = {name for mean in backend.means.values() for name in (mean.sum_sample, mean.count_sample)}
    return tuple(dict.fromkeys((
        *(f"{family}_{part}" for family in backend.histograms for part in ("bucket", "sum", "count")),
        *sorted(means),
        *(sample for sample, _, _ in backend.counters),
    )))  # fmt: skip


#: The series the recording rules keep for this project's model (the chart's default).
RECORDED_SERIES: Final = recorded_series(NLG)


def promql_duration(seconds: float) -> str:
    """Seconds as a PromQL duration, as the chart writes it: 60 -> ``60s``, 7.5 -> ``7500ms``."""
    scaled = seconds * 1000
    ms = max(1, math.floor(scaled) + (scaled - math.floor(scaled) >= 0.5))  # halves up, as sprig's round
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def recorded_name(series: str, window: str) -> str:
    """The recording rule's name for the increase of ``series`` over ``window`` (a PromQL duration)."""
    return f"namespace_model:{series}:increase{window}"


log = logging.getLogger(__name__)


def _selector(model_id: str, label: str = "", value: str = "") -> str:
    escaped = model_id.replace("\\", "\\\\").replace('"', '\\"')
    extra = f',{label}="{value}"' if label else ""
    return f'{{model="{escaped}"{extra}}}'


def _float(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class PrometheusSource:
    """Asks ``base_url``'s ``/api/v1/query`` for each value of the window."""

    def __init__(
        self,
        base_url: str,
        timeout: float,
        on_error: ErrorCallback = ignore_error,
        http: httpx.Client | None = None,
        backend: str = "nlg",
    ) -> None:
        if backend != "auto" and backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: must be auto or one of {', '.join(BACKENDS)}")
        self._backend = backend
        self._backends: dict[str, Backend] = {}
        self._url = base_url.rstrip("/") + "/api/v1/query"
        self._timeout = timeout
        self._on_error = on_error
        self._http = http or httpx.Client(timeout=timeout)

    def query(self, promql: str, now: float) -> list[dict[str, Any]]:
        """The result vector of an instant query; raises :class:`SourceError` on any failure."""
        try:
            response = self._http.get(self._url, params={"query": promql, "time": f"{now:.3f}"})
            body = response.json()
        except (httpx.HTTPError, ValueError) as e:
            message = f"Prometheus query failed ({self._url}): {type(e).__name__}: {e}"
            self._on_error("prometheus", message)
            raise SourceError(message) from e
        if response.status_code != 200 or body.get("status") != "success":
            error = body.get("error", "") if isinstance(body, dict) else ""
            message = f"Prometheus rejected {promql!r}: HTTP {response.status_code} {error}".strip()
            self._on_error("prometheus", message)
            raise SourceError(message)
        data = body.get("data", {})
        if data.get("resultType") != "vector":
            raise SourceError(f"Prometheus answered {promql!r} with {data.get('resultType')!r}, not a vector")
        result: list[dict[str, Any]] = data.get("result", [])
        return result

    def scalar(self, promql: str, now: float) -> float | None:
        """One value, ``None`` for an empty vector or NaN/Inf."""
        return _one(self.query(promql, now), promql)

    def _increase_vector(self, series: str, selector: str, window: str, now: float) -> list[dict[str, Any]]:
        """``sum by (le)`` of the increase of ``series``: recorded when Prometheus has it, else raw."""
        recorded = self.query(f"sum by (le) ({recorded_name(series, window)}{selector})", now)
        return recorded or self.query(f"sum by (le) (increase({series}{selector}[{window}]))", now)

    def _increase(self, series: str, selector: str, window: str, now: float) -> float | None:
        """The increase of ``series`` summed over pods: recorded when Prometheus has it, else raw."""
        recorded = f"sum({recorded_name(series, window)}{selector})"
        answer = self.query(recorded, now)
        if answer:
            return _one(answer, recorded)
        return self.scalar(f"sum(increase({series}{selector}[{window}]))", now)

    def _histogram(self, family: str, scale: float, selector: str, window: str, now: float) -> LatencyStats:
        rows = self._increase_vector(f"{family}_bucket", selector, window, now)
        buckets: list[tuple[float, float]] = []
        for row in rows:
            le = _float_le(row.get("metric", {}).get("le"))
            value = _float(row.get("value", [None, None])[1])
            if le is None or value is None:
                return LatencyStats.empty()
            buckets.append((le * scale, value))
        total = self._increase(f"{family}_sum", selector, window, now)
        count = self._increase(f"{family}_count", selector, window, now)
        if not buckets or total is None or count is None:
            return LatencyStats.empty()
        return latency_stats(buckets, total * scale, count)

    def _mean(self, mean: MeanOf, selector: str, window: str, now: float) -> LatencyStats:
        total = self._increase(mean.sum_sample, selector, window, now)
        count = self._increase(mean.count_sample, selector, window, now)
        if total is None or count is None:
            return LatencyStats.empty()
        return latency_stats([(math.inf, count)], total * mean.scale, count)

    def backend(self, model_id: str, now: float) -> Backend | None:
        """The configured backend, or with ``auto`` the first whose marker series for the model
        Prometheus has (remembered once found)."""
        if self._backend != "auto":
            return BACKENDS[self._backend]
        found = self._backends.get(model_id)
        if found is None:
            names = "|".join(re.escape(b.marker) for b in DETECT_ORDER)
            rows = self.query(f'group by (__name__) ({{__name__=~"{names}",{_selector(model_id)[1:-1]}}})', now)
            present = {row.get("metric", {}).get("__name__") for row in rows}
            found = next((b for b in DETECT_ORDER if b.marker in present), None)
            if found is not None:
                self._backends[model_id] = found
                log.info("metrics.backend auto: %s found for model %s in Prometheus", found.name, model_id)
        return found

    def read(self, now: float, model_id: str, time_window: float) -> WindowStats:
        backend = self.backend(model_id, now)
        if backend is None:
            return WindowStats.empty()
        selector = _selector(model_id)
        window = promql_duration(time_window)
        latencies = {
            short: self._histogram(family, scale, selector, window, now)
            for family, (short, scale) in backend.histograms.items()
        }
        for short, m in backend.means.items():
            latencies[short] = self._mean(m, selector, window, now)
        gauges: dict[str, float] = {}
        for (sample, label, value), name in backend.gauges.items():
            how = "avg" if name in AVERAGED else "sum"
            reading = self.scalar(f"{how}({sample}{_selector(model_id, label, value)})", now)
            if reading is not None:
                gauges[name] = reading
        counters: dict[str, float] = {}
        for (sample, _, _), name in backend.counters.items():
            reading = self._increase(sample, selector, window, now)
            if reading is not None:
                counters[name] = reading
        pods = self.scalar(f"count(count by (instance) ({backend.presence}{selector}))", now)
        n = int(pods or 0)
        span = time_window if n else 0.0
        stats = WindowStats(latencies=latencies, gauges=gauges, pods=n, span=span, counters=counters)
        return backend.derive(stats)

    def close(self) -> None:
        self._http.close()


def _one(result: list[dict[str, Any]], promql: str) -> float | None:
    """The value of a one-series answer; ``None`` for an empty vector or NaN/Inf."""
    if not result:
        return None
    if len(result) > 1:
        labels = [r.get("metric", {}) for r in result]
        raise SourceError(f"{promql!r} returned {len(result)} series where one was expected: {labels}")
    return _float(result[0].get("value", [None, None])[1])


def _float_le(raw: Any) -> float | None:
    """Bucket bounds may be ``+Inf``; anything unparseable is None."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
