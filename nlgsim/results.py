"""The numbers of one run: SLO violations and attainment, GPU-seconds, first scaling time, timelines.

Per request (all choices counted; a request is as late as its latest choice):

* request latency: arrival to its last token (the thesis's SLO: 2,000 ms);
* TTFT: arrival to its first tokens (all choices get theirs in the same engine step);
* per-token latency: the thesis's metric, a choice's latency over its tokens; the request's is its
  worst choice's.

SLO attainment is the share of requests meeting every SLO named in ``SLO.attain``, stated twice: over
the feasible requests (those that meet it alone on an idle replica, :mod:`nlgsim.feasibility`; the
share a policy can be held to) and over all. GPU-seconds are
replica-seconds (one GPU a replica), counted from pod creation (start-up included) until the pod is
gone (drained after deletion) or the run ends (its last request finishes). ``since`` and ``until``
cut a measured window out of a run: only requests arriving in ``[since, until)`` count, GPU-seconds
are billed over ``[since, until]``, and the first scale-out is timed from ``since``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nlgsim.feasibility import infeasible
from nlgsim.simulator import RunLog
from nlgsim.slo import SLO as SLO
from nlgsim.slo import SLO_NAMES as SLO_NAMES


@dataclass(frozen=True)
class Summary:
    name: str
    requests: int
    violations: dict[str, int]
    attainment: float
    """Over all requests."""
    gpu_seconds: float
    first_scale_s: float
    """Seconds from the first arrival to the first scale-out decision; NaN if it never scaled out."""
    max_replicas: int
    latency_p50_s: float
    latency_p99_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    per_token_p50_s: float
    per_token_p99_s: float
    end_s: float
    infeasible: int = 0
    """Requests that miss the SLO even alone on an idle replica."""
    attainment_feasible: float = 1.0
    """Over the feasible requests: what ``SLO.target`` is compared with."""
    intervals_below_target: int = 0
    """Intervals of ``SLO.interval_s`` whose feasible requests fall short of ``SLO.target``."""

    def row(self) -> dict[str, str]:
        """Cells of the report's table."""

        def ms(x: float) -> str:
            return f"{x * 1000:.0f}"

        return {
            "policy": self.name,
            "req viol": str(self.violations["request"]),
            "TTFT viol": str(self.violations["ttft"]),
            "per-tok viol": str(self.violations["pertoken"]),
            "attain %": f"{self.attainment * 100:.2f}",
            "feasible attain %": f"{self.attainment_feasible * 100:.2f}",
            "intervals < target": str(self.intervals_below_target),
            "GPU-s": f"{self.gpu_seconds:.0f}",
            "first scale s": "-" if math.isnan(self.first_scale_s) else f"{self.first_scale_s:.0f}",
            "max pods": str(self.max_replicas),
            "lat p50/p99 ms": f"{ms(self.latency_p50_s)}/{ms(self.latency_p99_s)}",
            "TTFT p50/p99 ms": f"{ms(self.ttft_p50_s)}/{ms(self.ttft_p99_s)}",
            "tok p50/p99 ms": f"{ms(self.per_token_p50_s)}/{ms(self.per_token_p99_s)}",
        }


@dataclass(frozen=True)
class RequestTable:
    """Per-request outcomes as arrays, in arrival order."""

    arrival: npt.NDArray[np.float64]
    latency: npt.NDArray[np.float64]
    ttft: npt.NDArray[np.float64]
    per_token: npt.NDArray[np.float64]
    replica: npt.NDArray[np.int64]


def request_table(log: RunLog) -> RequestTable:
    st = log.states
    arrival = np.array([s.request.arrival for s in st], dtype=np.float64)
    return RequestTable(
        arrival=arrival,
        latency=np.array([s.finish for s in st], dtype=np.float64) - arrival,
        ttft=np.array([s.first_token for s in st], dtype=np.float64) - arrival,
        per_token=np.array([s.per_token for s in st], dtype=np.float64),
        replica=np.array([s.replica for s in st], dtype=np.int64),
    )


def violations(table: RequestTable, slo: SLO) -> dict[str, npt.NDArray[np.bool_]]:
    """Per request, whether it missed each SLO."""
    return slo.misses(table.latency, table.ttft, table.per_token)


def interval_attainment(
    arrival: npt.NDArray[np.float64], missed: npt.NDArray[np.bool_], feasible: npt.NDArray[np.bool_], slo: SLO
) -> npt.NDArray[np.float64]:
    """Attainment over the feasible requests of each interval of ``slo.interval_s`` from time 0.

    NaN for an interval without feasible requests (nothing to attain).
    """
    if not len(arrival):
        return np.zeros(0)
    bins = (arrival // slo.interval_s).astype(np.int64)
    count = np.bincount(bins, weights=feasible.astype(float))
    met = np.bincount(bins, weights=(feasible & ~missed).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, met / np.maximum(count, 1), np.nan)


def first_scale_out(log: RunLog, since: float | None = None) -> float:
    """Seconds from ``since`` (default: the first arrival) to the first decision, from then on, to add pods."""
    start = since if since is not None else (log.states[0].request.arrival if log.states else 0.0)
    for loop in log.loops:
        if loop.time >= start and loop.desired > loop.current:
            return loop.time - start
    return math.nan


def billed_seconds(log: RunLog, since: float = 0.0, until: float | None = None) -> float:
    """Integral of pods billed over ``[since, until]`` (default the run's end; from 0 it equals
    ``log.replica_seconds``)."""
    end = log.end if until is None else until
    total = 0.0
    changes = [*log.pod_changes, (log.end, 0, 0, 0)]
    for (t0, _, _, billed), (t1, *_) in zip(changes, changes[1:], strict=False):
        lo, hi = max(t0, since), min(t1, end)
        if hi > lo:
            total += billed * (hi - lo)
    return total


def most_replicas(log: RunLog, since: float = 0.0, until: float | None = None) -> int:
    """The most pods the Deployment counted at any time in ``[since, until]``."""
    end = log.end if until is None else until
    at_start = [c[1] for c in log.pod_changes if c[0] <= since][-1:]
    return max([*at_start, *(c[1] for c in log.pod_changes if since < c[0] <= end)], default=0)


def summarize(
    log: RunLog, slo: SLO, name: str | None = None, since: float = 0.0, until: float | None = None
) -> Summary:
    return summarize_with_misses(log, slo, name, since, until)[0]


def summarize_with_misses(
    log: RunLog, slo: SLO, name: str | None = None, since: float = 0.0, until: float | None = None
) -> tuple[Summary, tuple[int, ...]]:
    """:func:`summarize`, and the feasible requests that missed the SLO in each interval of
    ``slo.interval_s`` from ``since``: when in the window a policy lost what it lost."""
    table = request_table(log)
    feasible = ~infeasible(log.scenario.profile, [s.request for s in log.states], slo)
    if since > 0 or until is not None:
        keep = (table.arrival >= since) & (table.arrival < (math.inf if until is None else until))
        table = RequestTable(*(getattr(table, f)[keep] for f in ("arrival", "latency", "ttft", "per_token", "replica")))
        feasible = feasible[keep]
    missed = violations(table, slo)
    bad = slo.missed(missed)
    n = len(table.arrival)
    n_feasible = int(feasible.sum())
    per_interval = interval_attainment(table.arrival, bad, feasible, slo)

    def pct(x: npt.NDArray[np.float64], q: float) -> float:
        return float(np.percentile(x, q)) if n else math.nan

    lost = feasible & bad
    bins = ((table.arrival[lost] - since) // slo.interval_s).astype(np.int64)
    ends = table.arrival[-1:] if until is None else np.array([until - 1e-9])
    count = int((ends[0] - since) // slo.interval_s) + 1 if n else 0
    misses = tuple(int(k) for k in np.bincount(bins, minlength=count)) if n else ()
    summary = Summary(
        name=name or log.scenario.name or (log.scenario.policy.name if log.scenario.policy else "fixed"),
        requests=n,
        violations={k: int(v.sum()) for k, v in missed.items()},
        attainment=1.0 - float(bad.sum()) / n if n else 1.0,
        gpu_seconds=billed_seconds(log, since, until) if since > 0 or until is not None else log.replica_seconds,
        first_scale_s=first_scale_out(log, since if since > 0 else None),
        max_replicas=most_replicas(log, since, until),
        latency_p50_s=pct(table.latency, 50),
        latency_p99_s=pct(table.latency, 99),
        ttft_p50_s=pct(table.ttft, 50),
        ttft_p99_s=pct(table.ttft, 99),
        per_token_p50_s=pct(table.per_token, 50),
        per_token_p99_s=pct(table.per_token, 99),
        end_s=log.end,
        infeasible=n - n_feasible,
        attainment_feasible=1.0 - float((bad & feasible).sum()) / n_feasible if n_feasible else 1.0,
        intervals_below_target=int((per_interval < slo.target - 1e-12).sum()),
    )
    return summary, misses


def replicas_over_time(log: RunLog, step: float = 1.0) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Pods billed (created, not yet gone) sampled every ``step`` seconds until the run's end."""
    times = np.arange(0.0, log.end + step, step)
    change_t = np.array([c[0] for c in log.pod_changes])
    billed = np.array([c[3] for c in log.pod_changes], dtype=np.int64)
    idx = np.searchsorted(change_t, times, side="right") - 1
    return times, billed[np.clip(idx, 0, len(billed) - 1)]


def format_table(rows: list[dict[str, str]]) -> str:
    """A Markdown table of rows that share their keys."""
    if not rows:
        return ""
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
    lines = [
        "| " + " | ".join(k.ljust(widths[k]) for k in keys) + " |",
        "|" + "|".join("-" * (widths[k] + 2) for k in keys) + "|",
    ]
    lines += ["| " + " | ".join(r[k].ljust(widths[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)
