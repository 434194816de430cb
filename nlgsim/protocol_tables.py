"""The tables of a protocol's result, as ``run --protocol`` prints them and the report shows them.

Pure functions of a :class:`nlgsim.protocol.ProtocolResult`: every number is a mean over the seeds or
windows, with its spread (least and most) in parentheses where they differ.

* :func:`thesis_table`: the thesis's figures 7.1-7.3 as numbers, with ratios against the request
  policy (the thesis's baseline) taken between the means;
* :func:`claims_table`: those ratios against the thesis's claims;
* :func:`trace_table`: attainment over the feasible requests, and GPU-seconds against the oracle and
  the start-up bound window by window; the front (``*``) is over the policies a user can run, the
  references (the lagged oracle, which reads the oracle) left out;
* :func:`equal_attainment_table`: per policy family (request, pertoken, planner, fixed), the fewest
  GPU-seconds among its configurations whose mean attainment reaches each level: a family saves
  GPU-seconds only where it does so at the same attainment.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nlgsim.lagged import NAME as LAGGED
from nlgsim.protocol_result import ProtocolResult, Replicate
from nlgsim.results import Summary, format_table
from nlgsim.sweep import pareto_front

#: The thesis's claims (ch. 7): per-token at 20 ms against the request policy.
THESIS_CLAIMS = {"violations": 2.1, "gpu_saving": 0.17, "first_scale": 2.29}
#: Attainment levels at which families are compared.
LEVELS = (0.90, 0.95, 0.98, 0.99)
FAMILIES = ("request", "pertoken", "planner", "fixed")
#: Families that read the oracle (nlgsim/lagged.py): rows of a table, never on its front or the cheapest.
REFERENCES = (LAGGED,)


@dataclass(frozen=True)
class Spread:
    """Mean, least and most of the finite values (all NaN when there is none)."""

    mean: float
    lo: float
    hi: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return cls(math.nan, math.nan, math.nan)
        return cls(statistics.fmean(finite), min(finite), max(finite))

    def text(self, fmt: str = ".1f", scale: float = 1.0, unit: str = "") -> str:
        """``mean (least-most)``, or the mean alone where they agree; ``unit`` follows the mean."""
        if math.isnan(self.mean):
            return "-"
        mean, lo, hi = (format(x * scale, fmt) for x in (self.mean, self.lo, self.hi))
        return f"{mean}{unit}" if lo == hi else f"{mean}{unit} ({lo}-{hi})"


def family(policy: str) -> str:
    """``pertoken:25 w60`` -> ``pertoken``."""
    return policy.split()[0].partition(":")[0]


def by_policy(result: ProtocolResult) -> dict[str, list[Summary]]:
    """Each policy's summaries, replicate by replicate, in the order the plan named the policies."""
    out: dict[str, list[Summary]] = {}
    for run in sorted(result.runs, key=lambda r: r.key.replicate):
        out.setdefault(run.key.policy, []).append(run.summary)
    order = list(result.command.get("policies") or out)
    return {p: out[p] for p in order if p in out}


def stat(summaries: Sequence[Summary], value: Callable[[Summary], float]) -> Spread:
    return Spread.of([value(s) for s in summaries])


def _ratio(a: float, b: float) -> float:
    return a / b if b else (math.inf if a else math.nan)


def ratio_text(x: float) -> str:
    """A ratio to two places; ``inf`` where the policy compared acted at once (0 s), ``-`` where undefined."""
    return "-" if math.isnan(x) else "inf" if math.isinf(x) else f"{x:.2f}"


def baseline(result: ProtocolResult) -> str | None:
    """The thesis's baseline: the request policy at the SLO's request-latency limit (else the first one)."""
    requests = [p for p in by_policy(result) if family(p) == "request"]
    at_slo = f"request:{1000 * float(result.command['slo']['request_s']):g}"
    return at_slo if at_slo in requests else next(iter(requests), None)


def thesis_ratios(result: ProtocolResult) -> dict[str, dict[str, float]]:
    """Per policy, against :func:`baseline`: violations base/this, GPU-s saved, first scale-out base/this."""
    runs = by_policy(result)
    base = baseline(result)
    if base is None:
        return {}

    def mean(p: str, value: Callable[[Summary], float]) -> float:
        return stat(runs[p], value).mean

    out = {}
    for p in runs:
        out[p] = {
            "violations": _ratio(mean(base, _missed), mean(p, _missed)),
            "gpu_saving": 1 - mean(p, _gpu) / mean(base, _gpu),
            "first_scale": _ratio(mean(base, _first), mean(p, _first)),
        }
    return out


def _missed(s: Summary) -> float:
    return round((1 - s.attainment) * s.requests)


def _gpu(s: Summary) -> float:
    return s.gpu_seconds


def _first(s: Summary) -> float:
    return s.first_scale_s


def thesis_table(result: ProtocolResult) -> str:
    runs = by_policy(result)
    ratios = thesis_ratios(result)
    rows = []
    for p, summaries in runs.items():
        r = ratios.get(p, {})
        rows.append({
            "policy": p,
            "attainment %": stat(summaries, lambda s: s.attainment).text(".1f", 100),
            "violations": stat(summaries, _missed).text(".0f"),
            "GPU-s": stat(summaries, _gpu).text(".0f"),
            "first scale-out s": stat(summaries, _first).text(".1f"),
            "max pods": stat(summaries, lambda s: s.max_replicas).text(".1f"),
            "viol. ratio (base/this)": ratio_text(r.get("violations", math.nan)),
            "GPU-s saved vs base": "-" if not r else f"{100 * r['gpu_saving']:.1f}%",
            "first-scale ratio": ratio_text(r.get("first_scale", math.nan)),
        })  # fmt: skip
    return format_table(rows)


def claims(result: ProtocolResult) -> dict[str, tuple[float, bool]]:
    """The thesis's three claims here: (value, at least the thesis's). The lowest per-token threshold
    plays the thesis's 20 ms; first scale-out takes the best per-token threshold."""
    ratios = thesis_ratios(result)
    pertoken = sorted((p for p in ratios if family(p) == "pertoken"), key=lambda p: float(p.split(":")[1].split()[0]))
    if not pertoken:
        return {}
    low = ratios[pertoken[0]]
    firsts = [ratios[p]["first_scale"] for p in pertoken if not math.isnan(ratios[p]["first_scale"])]
    first = max(firsts, default=math.nan)
    return {
        "violations": (low["violations"], low["violations"] >= THESIS_CLAIMS["violations"]),
        "gpu_saving": (low["gpu_saving"], low["gpu_saving"] >= THESIS_CLAIMS["gpu_saving"]),
        "first_scale": (first, first >= THESIS_CLAIMS["first_scale"]),
    }


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def claims_table(result: ProtocolResult) -> str:
    got = claims(result)
    if not got:
        return ""
    v, g, f = got["violations"], got["gpu_saving"], got["first_scale"]
    rows = [
        ("violations, request / per-token (lowest threshold)", "2.1x", f"{ratio_text(v[0])}x", v[1]),
        ("GPU-seconds saved by per-token (lowest threshold)", "17%", f"{100 * g[0]:.1f}%", g[1]),
        ("first scale-out, request / per-token (best threshold)", "2.29x", f"{ratio_text(f[0])}x", f[1]),
    ]
    return format_table(
        [{"claim": c, "thesis": t, "here": h, "at least the thesis's": verdict(ok)} for c, t, h, ok in rows]
    )


def window_ratios(result: ProtocolResult, policy: str) -> tuple[Spread, Spread]:
    """A policy's GPU-seconds over the oracle's and over the start-up bound's, window by window."""
    reps = {r.index: r for r in result.replicates}
    runs = [r for r in result.runs if r.key.policy == policy]
    oracle, paid = [], []
    for run in runs:
        rep = reps[run.key.replicate]
        if rep.oracle_gpu_s:
            oracle.append(run.summary.gpu_seconds / rep.oracle_gpu_s)
        if rep.startup_bound_gpu_s:
            paid.append(run.summary.gpu_seconds / rep.startup_bound_gpu_s)
    return Spread.of(oracle), Spread.of(paid)


def figure_window(result: ProtocolResult) -> Replicate:
    """The window a trace's replica figure draws: where ``planner`` (the project's policy at its defaults)
    meets the fewest of its feasible requests, the window that decides its row; without it, the window
    whose oracle costs most."""
    planner = {r.key.replicate: r.summary.attainment_feasible for r in result.runs if r.key.policy == "planner"}
    if planner:
        return min(result.replicates, key=lambda r: (planner.get(r.index, 1.0), r.index))
    return max(result.replicates, key=lambda r: r.oracle_gpu_s or 0.0)


def meets_target(s: Summary, target: float) -> bool:
    return s.attainment_feasible >= target - 1e-12


def trace_table(result: ProtocolResult, target: float) -> str:
    runs = by_policy(result)
    names = list(runs)
    runnable = [p for p in names if family(p) not in REFERENCES]
    points = [(stat(runs[p], _gpu).mean, 1 - stat(runs[p], lambda s: s.attainment_feasible).mean) for p in runnable]
    front = {runnable[i] for i in pareto_front(points)}
    rows = []
    for p in names:
        summaries = runs[p]
        x_oracle, x_paid = window_ratios(result, p)
        rows.append({
            "policy": p,
            "front": "*" if p in front else "",
            "attainment % (feasible)": stat(summaries, lambda s: s.attainment_feasible).text(".2f", 100),
            "windows at target": f"{sum(meets_target(s, target) for s in summaries)}/{len(summaries)}",
            "GPU-s": stat(summaries, _gpu).text(".0f"),
            "x oracle": x_oracle.text(".2f"),
            "x start-up bound": x_paid.text(".2f"),
            "max pods": stat(summaries, lambda s: s.max_replicas).text(".0f"),
            "TTFT p99 ms": stat(summaries, lambda s: s.ttft_p99_s).text(".0f", 1000),
            "per-token p99 ms": stat(summaries, lambda s: s.per_token_p99_s).text(".0f", 1000),
        })  # fmt: skip
    return format_table(rows)


def cheapest_at(result: ProtocolResult, level: float, feasible: bool) -> dict[str, tuple[str, float] | None]:
    """Per family: the configuration with the fewest mean GPU-seconds whose mean attainment is >= level."""
    runs = by_policy(result)
    out: dict[str, tuple[str, float] | None] = {}
    for fam in FAMILIES:
        best = None
        for p, summaries in runs.items():
            if family(p) != fam:
                continue
            att = stat(summaries, lambda s: s.attainment_feasible if feasible else s.attainment).mean
            gpu = stat(summaries, _gpu).mean
            if att >= level - 1e-12 and (best is None or gpu < best[1]):
                best = (p, gpu)
        if any(family(p) == fam for p in runs):
            out[fam] = best
    return out


def equal_attainment_table(result: ProtocolResult, levels: Sequence[float] = LEVELS, feasible: bool = False) -> str:
    rows = []
    for level in levels:
        row = {"mean attainment at least": f"{100 * level:g}%"}
        for fam, best in cheapest_at(result, level, feasible).items():
            row[fam] = "none" if best is None else f"{best[1]:.0f} ({best[0]})"
        rows.append(row)
    return format_table(rows)


def oracle_line(result: ProtocolResult) -> str:
    """The oracle and the start-up bound over the measured windows, in one sentence."""
    orc = result.oracle
    if orc is None:
        return ""
    reps = result.replicates
    bound = sum(r.oracle_gpu_s or 0.0 for r in reps)
    paid = sum(r.startup_bound_gpu_s or 0.0 for r in reps)
    seconds = sum((r.until or 0.0) - r.since for r in reps)
    return (
        f"oracle ({orc.interval_s:g} s intervals, within 1-{orc.max_replicas} replicas): {bound:.0f} GPU-s over "
        f"the {len(reps)} windows, {bound / max(seconds, 1e-9):.2f} replicas on average, at most {max(orc.replicas)}; "
        f"with each pod's {orc.startup_s:g} s start-up paid (the start-up bound): {paid:.0f} GPU-s, "
        f"{paid / max(bound, 1e-9):.2f}x the oracle; {len(orc.unattainable)} of {len(orc.replicas)} intervals "
        f"unattainable at {orc.max_replicas} replicas"
    )


def tables(result: ProtocolResult) -> list[str]:
    """Everything ``run --protocol`` prints after its header lines, in order."""
    target = float(result.command["slo"]["target"])
    if result.protocol == "thesis":
        out = [thesis_table(result), claims_table(result), equal_attainment_table(result)]
    else:
        out = [trace_table(result, target), equal_attainment_table(result, feasible=True)]
    return [t for t in out if t]


def header(result: ProtocolResult) -> list[str]:
    lines = [
        f"workload: {result.workload}",
        f"profile: {result.profile}",
        f"SLO: {result.slo}",
        f"feasibility: {result.feasibility}",
    ]
    line = oracle_line(result)
    return [*lines, line] if line else lines
