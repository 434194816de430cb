"""Tune a policy on a trace: run a grid of thresholds and windows, keep the Pareto front.

A configuration is better than another when it uses no more GPU-seconds and misses the SLO no more
often, and strictly better in one of the two; the front is the configurations nothing is better than.
Runs are independent, so they may go to worker processes; each is deterministic, so the result does
not depend on how many workers ran it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from autoscaler.config import ScalerSpec
from nlgsim.policy import hpa_policy
from nlgsim.results import SLO, Summary, summarize
from nlgsim.simulator import Scenario, simulate


@dataclass(frozen=True)
class SweepPoint:
    spec: ScalerSpec
    summary: Summary

    @property
    def label(self) -> str:
        return f"{self.spec.type} {self.spec.threshold:g}ms w{self.spec.time_window:g}s"

    @property
    def missed(self) -> float:
        """Share of the feasible requests missing the SLO (the others miss it whatever the policy)."""
        return 1.0 - self.summary.attainment_feasible


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated in (cost, miss), both minimised; ties keep the first."""
    front = []
    for i, (c, m) in enumerate(points):
        dominated = any(
            (c2 <= c and m2 <= m and (c2 < c or m2 < m)) or ((c2, m2) == (c, m) and j < i)
            for j, (c2, m2) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def grid(
    base: ScalerSpec,
    types: Sequence[str],
    thresholds: Mapping[str, Sequence[float]],
    windows: Sequence[float],
) -> list[ScalerSpec]:
    """Every (type, threshold, window) combination on top of ``base``."""
    return [
        replace(base, type=t, threshold=float(th), time_window=float(w))  # type: ignore[arg-type]
        for t in types
        for th, w in itertools.product(thresholds[t], windows)
    ]


def _run(args: tuple[Scenario, ScalerSpec, SLO]) -> SweepPoint:
    scenario, spec, slo = args
    log = simulate(replace(scenario, policy=hpa_policy(spec)))
    return SweepPoint(spec, summarize(log, slo))


def sweep(
    scenario: Scenario,
    specs: Sequence[ScalerSpec],
    slo: SLO,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[SweepPoint]:
    """Run ``scenario`` under each spec with the live autoscaler's policy; results in ``specs`` order."""
    jobs = [(replace(scenario, policy=None), spec, slo) for spec in specs]
    out: list[SweepPoint] = []
    if workers <= 1:
        for job in jobs:
            out.append(_run(job))
            if progress is not None:
                progress(1)
        return out
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for point in pool.map(_run, jobs):
            out.append(point)
            if progress is not None:
                progress(1)
    return out
