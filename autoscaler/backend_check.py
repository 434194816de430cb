"""What ``nlg-autoscaler --check`` says about the metric backend: which one, its signals, and the
configured signals it cannot give (refused, each named).

This module owns that report and nothing else. With ``metrics.backend: auto`` it probes what it can
reach without Kubernetes credentials: ``source.static_targets`` (each pod's page, once) or the
Prometheus server; a Service's pods are found only by the running service, so there the backend is
named at its first scrape (in its log) and ``--check`` says so. A probe that reaches nothing is
reported, not refused: the file may be checked where the pods are not reachable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autoscaler.collect import SourceError
from autoscaler.collect.backends import BACKENDS, Backend, detect, refusals, signals
from autoscaler.collect.direct import StaticTargets
from autoscaler.collect.promql import PrometheusSource
from autoscaler.collect.scrape import Scraper
from autoscaler.config import AutoscalerConfig, ScalerSpec
from autoscaler.decide import POLICIES
from autoscaler.slo import SLO


@dataclass(frozen=True)
class BackendReport:
    """``lines`` for stdout; ``refused``: one error per needed signal the backend lacks."""

    lines: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def needed_signals(spec: ScalerSpec, path: str = "scaler") -> dict[str, str]:
    """Each signal the scaler reads -> the config key that makes it read it."""
    needs: dict[str, str] = {}
    if spec.type == "planner":
        q = SLO(attain=("pertoken", "ttft"), target=spec.planner.slo_percentile).window_quantile
        for family in ("pertoken", "ttft"):
            needs[f"{family}_{q}"] = f"{path}.type = planner (its tail guard, at scaler.planner.slo_percentile)"
        needs["ttft_mean"] = f"{path}.type = planner (demand: requests started, the TTFT count)"
    else:
        needs[POLICIES[spec.type](spec).metric] = f"{path}.type = {spec.type}"
    for i, signal in enumerate(spec.signals):
        needs.setdefault(signal.metric, f"{path}.signals[{i}].metric")
    return needs


def _probe(config: AutoscalerConfig) -> tuple[Backend | None, str]:
    """The backend ``auto`` finds, and where (or why none)."""
    source = config.source
    if source.kind == "prometheus":
        prometheus = PrometheusSource(source.prometheus_url, source.timeout, backend="auto")
        try:
            found = prometheus.backend(config.model_id, time.time())
        except SourceError as e:
            return None, f"Prometheus not reachable: {e}"
        finally:
            prometheus.close()
        return found, f"in Prometheus at {source.prometheus_url}"
    if not source.static_targets:
        return None, f"the pods of service {source.namespace}/{source.service} are probed at the first scrape"
    scraper = Scraper(source.timeout)
    try:
        result = scraper.scrape(StaticTargets(source.static_targets).targets())
    finally:
        scraper.close()
    for pod, text in result.texts.items():
        found = detect(text, config.model_id)
        if found is not None:
            return found, f"on {pod}"
    failed = "; ".join(f"{pod}: {message}" for pod, message in result.errors.items())
    seen = ", ".join(result.texts)
    return None, (f"no known metric for model {config.model_id} on {seen}" if seen else "") + (
        f"{'; ' if seen else ''}{failed}" if failed else ""
    )


def backend_report(config: AutoscalerConfig) -> BackendReport:
    """The backend, its signals and the refusals of the signals it lacks."""
    name = config.metrics.backend
    if name == "auto":
        backend, where = _probe(config)
        if backend is None:
            return BackendReport([f"metrics.backend: auto, not detected ({where})"])
        head = f"metrics.backend: auto, found {backend.name} {where}"
    else:
        backend, head = BACKENDS[name], f"metrics.backend: {name}"
    have = signals(backend)
    lines = [head, f"  names from {backend.source}"]
    lines += [f"  {signal}: {origin}" for signal, origin in sorted(have.items())]
    if "running" not in have:
        lines.append(
            f"  note: {backend.name} has no running-requests gauge, so an idle window (nothing finished) "
            "is no data and the replicas are held, not scaled in"
        )
    return BackendReport(lines, refusals(needed_signals(config.scaler), backend))
