"""The fleet-scale section of the report (issue 27): per trace and scale, who reaches the target for the
fewest GPU-seconds, against the best fixed fleet chosen in hindsight, and whether the goal is met.

Numbers only come from the runner's results; an experiment without results reads "not run" in every
cell, so the report can be rendered before every scale has been simulated and says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.config import ScalerSpec
from benchmarks.scaling import miss_timing
from benchmarks.scaling.analysis import PolicyFigures, figures, range_text
from benchmarks.scaling.experiments import FLEET, LONG_WINDOW, WINDOWS, experiment
from nlgsim.experiment import policy_spec
from nlgsim.protocol import PROTOCOLS
from nlgsim.protocol_result import ProtocolResult
from nlgsim.protocol_tables import REFERENCES, by_policy, family
from nlgsim.results import format_table

#: (trace, scale, experiment) of the summary table, in its order.
ROWS = (
    ("azure2023_code", 1, "trace-code-h100"),
    ("azure2023_code", 10, "trace-code-h100-x10"),
    ("azure2023_code", 30, "trace-code-h100-x30"),
    ("azure2023_conv", 1, "trace-conv-h100"),
    ("azure2023_conv", 10, "trace-conv-h100-x10"),
    ("azure2023_conv", 30, "trace-conv-h100-x30"),
)
#: The project's own policy families (the anchors and fixed fleets are what they are compared with).
OWN = ("planner", "pertoken", "request")
#: The project's policies at the settings every fleet-scale row runs, chosen once for all traces: the goal
#: is judged on these; every other setting run is an approach tried, shown beside them.
DEFAULTS = tuple(p for p in FLEET if family(p) in OWN)
#: Issue 27's goals beyond reaching the target for no more than the best fixed fleet: where the load
#: swings slowly (conv, at x10 and x30), GPU-seconds within this of the start-up bound ...
SLOW_SWING_X_STARTUP = 1.15
#: ... and where bursts are shorter than a start-up (code, at x10 and x30), within this of the best fixed fleet.
BURSTY_X_FIXED = 0.85
NOT_RUN = "not run"


@dataclass(frozen=True)
class Row:
    policy: str
    figures: PolicyFigures
    peak: int
    scale_events: float
    """Changes of the pod count a window, the mean over the windows."""


def _rows(result: ProtocolResult) -> list[Row]:
    out = []
    for p, summaries in by_policy(result).items():
        runs = [r for r in result.runs if r.key.policy == p]
        events = [sum(1 for a, b in zip(r.timeline, r.timeline[1:], strict=False) if a[1] != b[1]) for r in runs]
        out.append(Row(p, figures(result, p), max(s.max_replicas for s in summaries), statistics.fmean(events)))
    return out


def _meets(f: PolicyFigures, target: float) -> bool:
    return f.feasible.mean >= target - 1e-12


def best_fixed(result: ProtocolResult) -> PolicyFigures | None:
    """The smallest fixed fleet (of those run) whose mean attainment over the feasible requests reaches the
    target: the best fixed fleet chosen in hindsight."""
    target = float(result.command["slo"]["target"])
    fixed = [figures(result, p) for p in by_policy(result) if family(p) == "fixed"]
    meeting = [f for f in fixed if _meets(f, target)]
    return min(meeting, key=lambda f: int(f.name.partition(":")[2]), default=None)


def best_fixed_bracketed(result: ProtocolResult) -> bool:
    """Whether the best fixed fleet is the fewest that reach the target, not the fewest of those run: one
    reaches it and the fleet of one replica fewer was run too (and missed it), unless it is one replica."""
    best = best_fixed(result)
    if best is None:
        return False
    n = int(best.name.partition(":")[2])
    return n == 1 or f"fixed:{n - 1}" in by_policy(result)


def _conv_above(results: Mapping[str, ProtocolResult]) -> list[tuple[str, int, ProtocolResult]]:
    return [(t, s, results[k]) for t, s, k in ROWS if t == "azure2023_conv" and s > 1 and k in results]


def conv_rows_met(results: Mapping[str, ProtocolResult]) -> bool:
    """What the prose on `conv` above its recorded rate says: on every such row the planner at its
    defaults meets the goal."""
    rows = _conv_above(results)
    return bool(rows) and all(meets_goal(t, s, r, "planner") for t, s, r in rows)


def other_windows_meeting(results: Mapping[str, ProtocolResult], windows: tuple[str, ...] = WINDOWS) -> list[str]:
    """The windows other than the default, run on every `conv` row above the recorded rate, that meet the
    goal on all of them."""
    rows = _conv_above(results)
    ran = [p for p in windows if rows and all(p in by_policy(r) for _, _, r in rows)]
    return [p for p in ran if all(meets_goal(t, s, r, p) for t, s, r in rows)]


def other_windows_text(results: Mapping[str, ProtocolResult], windows: tuple[str, ...] = WINDOWS) -> str:
    """In words, which other windows meet both `conv` rows."""
    others = other_windows_meeting(results, windows)
    if not others:
        return "none meets both"
    names = ", ".join(f"`{p}`" for p in others[:-1]) + (" and " if len(others) > 1 else "") + f"`{others[-1]}`"
    return f"{names} meet{'s' if len(others) == 1 else ''} both as well, so the rows do not turn on the window"


def cheapest(
    result: ProtocolResult, families: tuple[str, ...] = (), policies: tuple[str, ...] = ()
) -> PolicyFigures | None:
    """The fewest GPU-seconds at the target among ``policies``, else among ``families``, else among every
    policy a user can run (all but the references)."""
    target = float(result.command["slo"]["target"])
    def counted(p: str) -> bool:
        if policies:
            return p in policies
        return family(p) in families if families else family(p) not in REFERENCES

    found = [figures(result, p) for p in by_policy(result) if counted(p)]
    return min((f for f in found if _meets(f, target)), key=lambda f: f.gpu.mean, default=None)


def goal(trace: str, scale: int) -> str:
    """What the row must show to be met, in words."""
    base = "a policy of this project >= the target at <= the best fixed fleet's GPU-s"
    if scale == 1:
        return base
    if "conv" in trace:
        return f"{base}, and <= {SLOW_SWING_X_STARTUP:g}x the start-up bound"
    return f"{base}, and <= {BURSTY_X_FIXED:g}x the best fixed fleet's GPU-s"


def shortfall(trace: str, scale: int, f: PolicyFigures, fixed: PolicyFigures) -> str:
    """What keeps ``f``, which reaches the target, from the row's goal ("" when it meets it)."""
    ratio = f.gpu.mean / fixed.gpu.mean
    if ratio > 1.0 + 1e-12:
        return f"`{f.name}` reaches it at {ratio:.2f}x `{fixed.name}`'s GPU-s"
    if scale > 1 and "conv" in trace and f.x_startup.mean > SLOW_SWING_X_STARTUP:
        return f"`{f.name}` at {ratio:.2f}x `{fixed.name}`, but {f.x_startup.mean:.2f}x the start-up bound"
    if scale > 1 and "code" in trace and ratio > BURSTY_X_FIXED:
        return f"`{f.name}` at {ratio:.2f}x `{fixed.name}`'s GPU-s"
    return ""


def verdict(trace: str, scale: int, result: ProtocolResult) -> tuple[bool, str]:
    """Whether the goal is met by a policy of this project at its defaults, and what decided it."""
    mine = cheapest(result, policies=DEFAULTS)
    fixed = best_fixed(result)
    if fixed is None:
        return False, "no fixed fleet run reaches the target (the best fixed fleet is not known)"
    if mine is None:
        return False, "no policy of this project reaches the target at its defaults"
    short = shortfall(trace, scale, mine, fixed)
    if short:
        return False, short
    ratio = mine.gpu.mean / fixed.gpu.mean
    return True, f"`{mine.name}` at {ratio:.2f}x `{fixed.name}`, {mine.x_startup.mean:.2f}x the start-up bound"


def _pct(f: PolicyFigures) -> str:
    return f"{100 * f.feasible.mean:.2f}"


def summary_table(results: Mapping[str, ProtocolResult]) -> str:
    rows = []
    for trace, scale, key in ROWS:
        result = results.get(key)
        row = {"trace": f"`{trace}`", "scale": f"x{scale}"}
        if result is None:
            row.update(dict.fromkeys(("oracle replicas (mean, max)", "best fixed", "cheapest >= target",
                                      "cheapest of this project's defaults", "x best fixed", "x start-up bound",
                                      "goal"), NOT_RUN))  # fmt: skip
            rows.append(row)
            continue
        orc = result.oracle
        reps = orc.replicas if orc else ()
        row["oracle replicas (mean, max)"] = f"{statistics.fmean(reps):.1f}, {max(reps)}" if reps else "-"
        fixed, best, mine = best_fixed(result), cheapest(result), cheapest(result, policies=DEFAULTS)
        row["best fixed"] = f"`{fixed.name}` ({_pct(fixed)}%)" if fixed else "none reaches it"
        row["cheapest >= target"] = f"`{best.name}` ({_pct(best)}%)" if best else "none"
        row["cheapest of this project's defaults"] = f"`{mine.name}` ({_pct(mine)}%)" if mine else "none"
        row["x best fixed"] = f"{mine.gpu.mean / fixed.gpu.mean:.2f}" if mine and fixed else "-"
        row["x start-up bound"] = f"{mine.x_startup.mean:.2f}" if mine else "-"
        ok, why = verdict(trace, scale, result)
        row["goal"] = f"{'met' if ok else 'not met'}: {why}"
        rows.append(row)
    return format_table(rows)


def fleet_table(result: ProtocolResult) -> str:
    fixed = best_fixed(result)
    rows = []
    for r in _rows(result):
        f = r.figures
        rows.append({
            "policy": r.policy + (" (best fixed)" if fixed and fixed.name == r.policy else ""),
            "attainment % (feasible)": _pct(f),
            "windows at target": f"{f.at_target}/{f.replicates}",
            "GPU-s": f"{f.gpu.mean:.0f}",
            "x oracle": f"{f.x_oracle.mean:.2f}",
            "x start-up bound": f"{f.x_startup.mean:.2f}",
            "x best fixed": f"{f.gpu.mean / fixed.gpu.mean:.2f}" if fixed else "-",
            "peak replicas": str(r.peak),
            "scale events / window": f"{r.scale_events:.0f}",
        })  # fmt: skip
    return format_table(rows)


def slot_bound(result: ProtocolResult | None) -> bool:
    """Whether planning at a higher per-token latency (``planner:0.9``) left the planner's GPU-s where
    they were (within 1%): the replicas are sized by their batch slots, not by the per-token target."""
    runs = by_policy(result) if result else {}
    if "planner" not in runs or "planner:0.9" not in runs:
        return False
    assert result is not None
    base, higher = figures(result, "planner").gpu.mean, figures(result, "planner:0.9").gpu.mean
    return abs(higher - base) <= 0.01 * base


def meets_goal(trace: str, scale: int, result: ProtocolResult, policy: str) -> bool:
    """Whether ``policy``, run in ``result``, meets the row's goal (at whatever setting it is)."""
    fixed = best_fixed(result)
    if fixed is None or policy not in by_policy(result):
        return False
    f = figures(result, policy)
    return _meets(f, float(result.command["slo"]["target"])) and not shortfall(trace, scale, f, fixed)


def approaches_table(results: Mapping[str, ProtocolResult]) -> str:
    """The approaches tried on each row whose goal is not met at the defaults: every policy but the fixed
    fleets that its experiment ran, with its attainment of feasible requests and its GPU-s over the best
    fixed fleet's, marked where it meets the goal ("-" where the experiment did not run it); "" when every
    row run is met."""
    missed = _missed(results)
    if not missed:
        return ""
    names: list[str] = []
    for _, _, result in missed:
        names += [p for p in by_policy(result) if family(p) not in ("fixed", *REFERENCES) and p not in names]
    rows = []
    for name in names:
        row = {"approach": f"`{name}`"}
        for trace, scale, result in missed:
            fixed = best_fixed(result)
            cell = "-"
            if name in by_policy(result):
                f = figures(result, name)
                ratio = f"{f.gpu.mean / fixed.gpu.mean:.2f}x `{fixed.name}`" if fixed else "no best fixed"
                cell = f"{_pct(f)}%, {ratio}" + (" (meets the goal)" if meets_goal(trace, scale, result, name) else "")
            row[f"`{trace}` x{scale}"] = cell
        rows.append(row)
    return format_table(rows)


def _missed(results: Mapping[str, ProtocolResult]) -> list[tuple[str, int, ProtocolResult]]:
    return [(t, s, results[k]) for t, s, k in ROWS if k in results and not verdict(t, s, results[k])[0]]


def lagged_lines(results: Mapping[str, ProtocolResult]) -> str:
    """Per row not met, what the lagged oracle reaches: the references that meet its goal; else the
    cheapest of those reaching the target and what keeps it from the goal, or, none reaching it, the one
    with the highest attainment. One Markdown bullet a row, "" when no row not met ran them."""
    lines = []
    for trace, scale, result in _missed(results):
        target = float(result.command["slo"]["target"])
        refs = [figures(result, p) for p in by_policy(result) if family(p) in REFERENCES]
        fixed = best_fixed(result)
        if not refs or fixed is None:
            continue
        meet = [f for f in refs if _meets(f, target) and not shortfall(trace, scale, f, fixed)]
        head = f"- `{trace}` x{scale}: "
        if meet:
            lines.append(head + "met by " + ", ".join(
                f"`{f.name}` ({_pct(f)}%, {f.gpu.mean / fixed.gpu.mean:.2f}x `{fixed.name}`, "
                f"{f.x_startup.mean:.2f}x the start-up bound)" for f in meet
            ))  # fmt: skip
            continue
        reaching = [f for f in refs if _meets(f, target)]
        if reaching:
            why = shortfall(trace, scale, min(reaching, key=lambda f: f.gpu.mean), fixed)
        else:
            best = max(refs, key=lambda f: f.feasible.mean)
            why = (
                f"none reaches the target; `{best.name}`, the closest, {_pct(best)}% at "
                f"{best.gpu.mean / fixed.gpu.mean:.2f}x `{fixed.name}`"
            )
        lines.append(head + f"not met by any hold: {why}")
    return "\n".join(lines)


def placeholders(data: Mapping[str, Any]) -> dict[str, str]:
    """The ``fleet.*`` placeholders from the runner's JSON: `values`, and what its runs cost."""
    results = {k: ProtocolResult.from_json(v) for k, v in data["experiments"].items()}
    out = values(results)
    wall = [data["wall_s"][k] for _, _, k in ROWS if k in data["wall_s"]]
    out["fleet.minutes"] = f"{sum(wall) / 60:.0f}"
    load = [data["load_average_before"].get(k) for _, _, k in ROWS]
    out["fleet.load"] = range_text([v for v in load if v is not None], ".1f")
    return out


def first_burst_values(bursts: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``first_burst.*`` placeholders from ``benchmarks/first_burst.py``'s results: on `code` above
    its recorded rate, the windows whose first new burst no scaler holding the most load it had seen can
    serve in time (the mean over the windows stays under the target whatever it does after)."""
    rows = [r for r in (bursts or {}).get("rows", []) if r["trace"] == "azure2023_code" and r["scale"] > 1]
    beyond = [
        (r, w) for r in rows for w in r["windows"] if "burst_at_s" in w and w["mean_bound_at_seen"] < r["target"]
    ]  # fmt: skip
    every_row = bool(rows) and all(any(row is r for row, _ in beyond) for r in rows)
    needed = [w["needed"] / w["seen"] for _, w in beyond if w["needed"] is not None]
    return {
        "check:first_burst.code_beyond_seen": "true" if every_row and len(needed) == len(beyond) else "false",
        "first_burst.code.quiet_s": range_text([w["quiet_s"] for _, w in beyond], ".0f"),
        "first_burst.code.needed_x": range_text(needed, ".1f"),
    }


def holds_added(terms: Mapping[str, Mapping[str, float]]) -> float:
    """What the holds (remembered misses, tail guard, scale-in holds, stabilization, rate limits) add to the
    planned count."""
    return terms["asked for"]["mean"] - terms["planned (the largest)"]["mean"]


def need_values(needs: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``need.*`` placeholders from ``benchmarks/need_estimate.py``'s results: on `conv` above its
    recorded rate, how far the planner's work, planned count and holds stand from the oracle's need, in
    replicas, with the check the prose relies on (on every such row the work below the need, and what it
    asks for, the planned count with the holds, above it)."""
    rows = [r for r in (needs or {}).get("rows", []) if r["trace"] == "azure2023_conv" and r["scale"] > 1]
    work = [r["terms"]["work measured"]["mean"] for r in rows]
    planned = [r["terms"]["planned (the largest)"]["mean"] for r in rows]
    held = [holds_added(r["terms"]) for r in rows]
    asked = [p + h for p, h in zip(planned, held, strict=True)]
    return {
        "need.conv.work_below": range_text([-w for w in work], ".2f"),
        "need.conv.work_spread": range_text([r["terms"]["work measured"]["sd"] for r in rows], ".2f"),
        "need.conv.planned": range_text(planned, "+.2f"),
        "need.conv.held": range_text(held, ".2f"),
        "need.conv.asked": range_text(asked, "+.2f"),
        "check:need.conv_signs": "true" if rows and max(work) < 0 < min(asked) else "false",
    }


def long_need_values(needs: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``need.long.*`` placeholders from ``benchmarks/need_estimate.py``'s results: on `conv` above its
    recorded rate, where the burst level stands and what the holds add, for the planner over its default
    window and over the long window, with the check the prose relies on (over the long window, on every
    such row, the holds adding more)."""
    rows = [
        r for r in (needs or {}).get("rows", [])
        if r["trace"] == "azure2023_conv" and r["scale"] > 1 and "long" in r
    ]  # fmt: skip
    held, long_held = [holds_added(r["terms"]) for r in rows], [holds_added(r["long"]["terms"]) for r in rows]
    holds_higher = bool(rows) and all(lh > h for lh, h in zip(long_held, held, strict=True))
    return {
        "need.conv.burst": range_text([r["terms"]["burst level"]["mean"] for r in rows], "+.2f"),
        "need.long.conv.burst": range_text([r["long"]["terms"]["burst level"]["mean"] for r in rows], "+.2f"),
        "need.long.conv.held": range_text(long_held, ".2f"),
        "need.long.conv.work_below": range_text([-r["long"]["terms"]["work measured"]["mean"] for r in rows], ".2f"),
        "check:need.long_holds_higher": "true" if holds_higher else "false",
    }


def short_values(needs: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``need.short.*`` placeholders from ``benchmarks/need_estimate.py``'s results, per row above
    the trace's recorded rate (``need.short.conv_x10.median``): what an interval one replica under its
    need keeps of its feasible requests (the median), and what share of a window's allowance of misses
    one such interval spends; with the checks the prose relies on: on `conv` at x10 one such interval
    spends the whole allowance, at x30 less than half of it."""
    out: dict[str, str] = {}
    spent: dict[str, float] = {}
    for r in (needs or {}).get("rows", []):
        short = r.get("short", {})
        if r["scale"] == 1 or not short.get("intervals"):
            continue
        name = f"{r['trace'].rsplit('_', 1)[-1]}_x{r['scale']}"
        out[f"need.short.{name}.median"] = f"{100 * short['median']:.0f}"
        out[f"need.short.{name}.allowance"] = f"{short['allowance']:.2f}"
        spent[name] = short["allowance"]
    out["check:need.short.conv_x10_whole"] = "true" if spent.get("conv_x10", 0.0) >= 1 else "false"
    out["check:need.short.conv_x30_under_one"] = "true" if spent.get("conv_x30", 1.0) < 1 else "false"
    return out


def _ratio(result: ProtocolResult, policy: str) -> float:
    fixed = best_fixed(result)
    return figures(result, policy).gpu.mean / fixed.gpu.mean if fixed else math.inf


def window_findings(results: Mapping[str, ProtocolResult], windows: tuple[str, ...] = WINDOWS) -> str:
    """In words, what the planner's windows reach: on the `conv` rows above the recorded rate, which
    windows meet the goal on which rows (none meeting it, the closest: the window at the target on every
    row whose largest GPU-seconds over the best fixed fleet's is the least); on `code` at its recorded
    rate, which fall below the target. "" when no such `conv` row ran the windows."""
    conv = [(t, s, r) for t, s, r in _conv_above(results) if any(p in by_policy(r) for p in windows)]
    if not conv:
        return ""
    ran = [p for p in windows if all(p in by_policy(r) for _, _, r in conv)]
    met = {p: [f"x{s}" for t, s, r in conv if meets_goal(t, s, r, p)] for p in ran}
    rows = " and ".join(f"x{s}" for _, s, _ in conv)
    if any(met.values()):
        said = [f"`{p}` on {' and '.join(m)}" for p, m in met.items() if m]
        rest = [f"`{p}`" for p, m in met.items() if not m]
        text = f"On `conv` above the recorded rate the goal is met by {', '.join(said)}" + (
            f", on neither row by {', '.join(rest)}" if rest else ""
        )
    else:
        at_target = [
            p for p in ran if all(_meets(figures(r, p), float(r.command["slo"]["target"])) for _, _, r in conv)
        ]
        text = "On `conv` above the recorded rate none of them meets the goal"
        if at_target:
            closest = min(at_target, key=lambda p: max(_ratio(r, p) for _, _, r in conv))
            spent = " and ".join(f"{_ratio(r, closest):.3f}x" for _, _, r in conv)
            text += f": the closest, `{closest}`, spends {spent} the best fixed fleet's GPU-seconds ({rows})"
    code = results.get("trace-code-h100")
    if code is not None and any(p in by_policy(code) for p in windows):
        target = float(code.command["slo"]["target"])
        below = [f"`{p}`" for p in windows if p in by_policy(code) and not _meets(figures(code, p), target)]
        text += "; on `code` at its recorded rate " + (
            f"the target is missed by {', '.join(below)}" if below else "each of them reaches the target"
        )
    return text


def long_window_values(policy: str = LONG_WINDOW) -> dict[str, str]:
    """``policy``'s window (its ``wS`` option) and the trace protocol's, in seconds, and how many times
    the one is the other; whether the trace protocol leaves every scaler setting but the replica bounds
    at the autoscaler's defaults (the summary says the goal is judged at what the service deploys)."""
    scaler = PROTOCOLS["trace"].scaler
    protocol = replace(ScalerSpec(), **scaler)  # type: ignore[arg-type]
    own = float(policy_spec(policy, protocol).time_window)
    at_defaults = set(scaler) <= {"min_deployment_count", "max_deployment_count"}
    return {
        "fleet.long_window_s": f"{own:g}",
        "fleet.protocol_window_s": f"{protocol.time_window:g}",
        "fleet.protocol_stabilization_s": f"{protocol.stabilization_window:g}",
        "fleet.long_window_x": f"{own / protocol.time_window:g}",
        "check:fleet.protocol_at_defaults": "true" if at_defaults else "false",
    }


def values(results: Mapping[str, ProtocolResult]) -> dict[str, str]:
    """The ``fleet.*`` placeholders: the summary table, and per experiment its command, workload, oracle
    and table (``not run`` where the results lack it)."""
    out = {"fleet.summary": summary_table(results), "fleet.approaches": approaches_table(results)}
    out["fleet.lagged"] = lagged_lines(results)
    not_met = [(t, s, k) for t, s, k in ROWS if k in results and not verdict(t, s, results[k])[0]]
    out["fleet.miss_timing"] = miss_timing.lines(results, not_met)
    out["check:fleet.misses_mostly_late"] = "true" if miss_timing.mostly_late(results, not_met) else "false"
    out["fleet.long_window"] = LONG_WINDOW
    out.update(long_window_values())
    out["fleet.window_findings"] = window_findings(results)
    out["fleet.windows"] = ", ".join(f"`{p}`" for p in WINDOWS[:-1]) + f" and `{WINDOWS[-1]}`"
    out["fleet.defaults"] = " and ".join(f"`{p}`" for p in DEFAULTS)
    out["fleet.slow_x_startup"] = f"{SLOW_SWING_X_STARTUP:g}"
    out["fleet.bursty_x_fixed"] = f"{BURSTY_X_FIXED:g}"
    startups = {r.oracle.startup_s for k, r in results.items() if k in {key for _, _, key in ROWS} and r.oracle}
    out["fleet.startup_s"] = ", ".join(f"{x:g}" for x in sorted(startups)) or "-"
    out["check:fleet.conv_x10_slot_bound"] = str(slot_bound(results.get("trace-conv-h100-x10"))).lower()
    out["check:fleet.conv_rows_met"] = "true" if conv_rows_met(results) else "false"
    out["fleet.other_windows"] = other_windows_text(results)
    bracketed = all(best_fixed_bracketed(results[k]) for _, _, k in ROWS if k in results)
    out["check:fleet.best_fixed_bracketed"] = "true" if bracketed else "false"
    met = [verdict(t, s, results[k])[0] for t, s, k in ROWS if k in results]
    out["fleet.met"] = str(sum(met))
    out["fleet.rows"] = str(len(ROWS))
    out["fleet.run"] = str(len(met))
    for _, _, key in ROWS:
        result = results.get(key)
        out[f"fleet.{key}.command"] = experiment(key).command()
        if result is None:
            for name in ("workload", "table", "oracle"):
                out[f"fleet.{key}.{name}"] = NOT_RUN
            continue
        out[f"fleet.{key}.workload"] = result.workload
        out[f"fleet.{key}.table"] = fleet_table(result)
        orc = result.oracle
        out[f"fleet.{key}.oracle"] = (
            f"{statistics.fmean(orc.replicas):.1f} replicas on average, at most {max(orc.replicas)}, "
            f"{len(orc.unattainable)} of {len(orc.replicas)} intervals unattainable at {orc.max_replicas}"
            if orc else "-"
        )
    return out
