"""The workload suite's report, rendered from its results file alone: the test set first, then the tune set;
per shape the best fixed fleet, this project's policies and the anchors; per set how many shapes are met."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from benchmarks.suite.runner import DEFAULT, POLICIES, REFERENCES
from benchmarks.suite.shapes import DAY_X_FIXED, SPLITS

TITLES = {
    "test": "Test set: reported, never used to choose",
    "tune": "Tune set: the only shapes defaults are chosen on",
}


def ratio(shape: Mapping[str, Any], policy: str) -> float:
    """``policy``'s GPU-seconds over the best fixed fleet's (NaN without one)."""
    fixed = shape["best_fixed"]
    if fixed is None or policy not in shape["policies"]:
        return math.nan
    return float(shape["policies"][policy]["gpu"] / shape["policies"][fixed]["gpu"])


def goal(shape: Mapping[str, Any]) -> float:
    """The most GPU-seconds a policy may spend, as a multiple of the best fixed fleet's."""
    return DAY_X_FIXED if shape["day"] else 1.0


def verdict(shape: Mapping[str, Any], policy: str = DEFAULT) -> tuple[bool | None, str]:
    """Whether ``policy`` meets the shape's goal (None: cannot tell), in words: the target reached for no more
    than the best fixed fleet's GPU-seconds (on a day, :data:`DAY_X_FIXED` of them)."""
    fixed = shape["best_fixed"]
    if policy not in shape["policies"]:
        return None, "not run"
    f = shape["policies"][policy]
    if fixed is None:
        if f["feasible"] >= shape["target"] - 1e-12:
            return True, "met: no fixed fleet run reaches the target"
        short = f"{100 * f['feasible']:.2f}% < {100 * shape['target']:g}%"
        return False, f"not met: {short}, and no fixed fleet run (up to the most replicas allowed) reaches it"
    if not shape["bracketed"]:
        return None, f"unknown: one replica fewer than `{fixed}` was not run"
    x = ratio(shape, policy)
    reached = f["feasible"] >= shape["target"] - 1e-12
    met = reached and x <= goal(shape) + 1e-12
    why = [] if reached else [f"{100 * f['feasible']:.2f}% < {100 * shape['target']:g}%"]
    if x > goal(shape) + 1e-12:
        why.append(f"{x:.2f}x > {goal(shape):g}x")
    return met, "met" if met else "not met: " + ", ".join(why)


def _times(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def cell(shape: Mapping[str, Any], policy: str) -> str:
    if policy not in shape["policies"]:
        return "-"
    f, x = shape["policies"][policy], ratio(shape, policy)
    return f"{100 * f['feasible']:.2f}%" + ("" if math.isnan(x) else f" {x:.2f}x")


def _reference(policy: str) -> bool:
    return policy.startswith("fixed:") or policy.partition(":")[0] in {r.partition(":")[0] for r in REFERENCES}


def _policies(data: Mapping[str, Any]) -> list[str]:
    """The policies a set's table compares: never a fixed fleet nor a reference that reads the oracle."""
    seen = {p for s in data["shapes"] for p in s["policies"] if not _reference(p)}
    return [p for p in POLICIES if p in seen] + sorted(seen - set(POLICIES))


def references(shape: Mapping[str, Any]) -> list[str]:
    return [p for p in REFERENCES if p in shape["policies"]]


def limit(shape: Mapping[str, Any]) -> str:
    """Why ``shape`` is not met, from its figures: whether a scaler told each interval's need exactly, one
    start-up late (the lagged oracle, :mod:`nlgsim.lagged`), meets it, reaches the target only for more than
    the goal's GPU-seconds, or misses the target too."""
    refs = references(shape)
    if not refs:
        return "no reference was run"
    lagged = "; ".join(f"`{r}` {cell(shape, r)}" for r in refs)
    if any(verdict(shape, r)[0] for r in refs):
        return f"the planner's estimate: a scaler told each interval's need after it meets it ({lagged})"
    if any(shape["policies"][r]["feasible"] >= shape["target"] - 1e-12 for r in refs):
        return (
            "the cost of following the load: a scaler told each interval's need exactly, but after the interval "
            f"({lagged}), reaches the target only for more GPU-seconds than the goal allows; the best fixed fleet's "
            "whole replicas hold this load with little to spare"
        )
    return (
        f"the start-up: a scaler told each interval's need exactly, but after the interval ({lagged}), misses "
        "the target too; the load changes faster than a pod starts, and what is left is holding replicas ahead "
        "of it, which a fixed fleet does"
    )


def lost(data: Mapping[str, Any]) -> list[str]:
    """A line per shape the default does not meet: its limit, and what else was tried on it."""
    lines = []
    for split in SPLITS:
        for s in data["shapes"]:
            met, why = verdict(s)
            if s["split"] != split or met is not False:
                continue
            others = ", ".join(f"`{p}` {cell(s, p)}" for p in _policies(data) if p != DEFAULT and p in s["policies"])
            lines.append(
                f"- **{s['name']}** ({split}), {why}. The limit: {limit(s)}. Tried besides `{DEFAULT}`: {others}."
            )
    return lines


def summary_table(data: Mapping[str, Any], split: str) -> list[str]:
    policies = _policies(data)
    lines = [
        "| shape | what | best fixed | " + " | ".join(f"`{p}`" for p in policies) + " | verdict |",
        "|---|---|---|" + "---:|" * len(policies) + "---|",
    ]
    for s in data["shapes"]:
        if s["split"] != split:
            continue
        fixed = s["best_fixed"]
        best = f"`{fixed}` {100 * s['policies'][fixed]['feasible']:.2f}%" if fixed else "-"
        cells = " | ".join(cell(s, p) for p in policies)
        lines.append(f"| {s['name']} | {s['summary']} | {best} | {cells} | {verdict(s)[1]} |")
    return lines


def met_counts(data: Mapping[str, Any], split: str, policy: str) -> tuple[int, int]:
    shapes = [s for s in data["shapes"] if s["split"] == split]
    return sum(verdict(s, policy)[0] is True for s in shapes), len(shapes)


def detail(shape: Mapping[str, Any]) -> list[str]:
    fixed = shape["best_fixed"]
    lines = [
        f"### {shape['name']} ({shape['split']})",
        "",
        f"`{shape['command']}`",
        "",
        f"{shape['workload']}. {shape['feasibility'][:1].upper()}{shape['feasibility'][1:]}. The oracle: "
        f"{shape['oracle_mean']:.1f} replicas on average, at most {shape['oracle_max']}. Simulated in "
        f"{shape['seconds']:.0f} s.",
        "",
        "| policy | attainment % (feasible) | each window % | GPU-s | x best fixed | peak replicas "
        "| scale events a window |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for p, f in shape["policies"].items():
        if p.startswith("fixed:") and p != fixed:
            n = int(p.partition(":")[2])
            if fixed is None or abs(n - int(fixed.partition(":")[2])) > 1:
                continue
        name = f"`{p}` (best fixed)" if p == fixed else f"`{p}`"
        windows = ", ".join(f"{100 * w:.2f}" for w in f["windows"])
        lines.append(
            f"| {name} | {100 * f['feasible']:.2f} | {windows} | {f['gpu']:.0f} | {_times(ratio(shape, p))} "
            f"| {f['peak']} | {f['events']:.1f} |"
        )
    return [*lines, ""]


def timing(data: Mapping[str, Any]) -> str:
    if data.get("partial_runs"):
        return "The shapes were measured in separate runs; each shape's own time is in its section."
    minutes = data["wall_seconds"] / 60
    return (
        f"The whole suite took {minutes:.1f} minutes on {data['workers']} worker process(es) "
        f"({data['cpu_seconds'] / 60:.1f} CPU-minutes)."
    )


def render(data: Mapping[str, Any]) -> str:
    m = data["machine"]
    lines = [
        "# The workload suite: the autoscaler on traffic it was tuned on, and on traffic it was not",
        "",
        f"Computed {data['date']} on {data['code']} with `python -m benchmarks.suite` on {m['cpu']} ({m['cores']} "
        f"cores); the simulation is deterministic, so the machine changes only the time it took. {timing(data)}",
        "",
        "Each shape is the trace protocol (`docs/simulator.md`) on the measured H100 profile: windows of the "
        "trace, each opened at the oracle's count, every policy at its defaults, judged on the share of "
        "feasible requests within the SLO (TTFT <= 1 s and per-token latency <= 50 ms, target 99%, the mean "
        "over the windows) and on GPU-seconds. The best fixed fleet is the fewest replicas reaching the target, "
        "found by search with one replica fewer run beside it. A shape is **met** when the project's default "
        f"(`{DEFAULT}`) reaches the target for no more GPU-seconds than the best fixed fleet; on a day, for at "
        f"most {DAY_X_FIXED:g}x them. Cells: attainment, and GPU-seconds as a multiple of the best fixed fleet's. "
        "The split between the sets is `benchmarks/suite/shapes.py`; no default was chosen on the test set.",
        "",
    ]
    for split in SPLITS:
        met, total = met_counts(data, split, DEFAULT)
        if total == 0:
            continue
        others = ", ".join(f"`{p}` {met_counts(data, split, p)[0]}" for p in _policies(data) if p != DEFAULT)
        lines += [
            f"## {TITLES[split]}",
            "",
            f"`{DEFAULT}` meets {met} of {total} shapes (by the same rule: {others}).",
            "",
            *summary_table(data, split),
            "",
            f"![each {split} shape's deciding window](figures/suite_{split}.png)",
            "",
        ]
    missed = lost(data)
    if missed:
        refs = ", ".join(f"`{r}`" for r in REFERENCES)
        lines += [
            "## Where a shape is not met",
            "",
            f"Each shape the default does not meet, with the reference that tells a limit of scaling from one "
            f"of the planner's: the lagged oracle ({refs}: each round, the most replicas the oracle found "
            "needed over the intervals that ended within the hold, no error of measurement or model, its pods "
            "serving one start-up later like every policy's). Where it does not meet the shape either, no "
            "better measurement would; the figures above show the deciding window of each.",
            "",
            *missed,
            "",
        ]
    lines += ["## Each shape", ""]
    for split in SPLITS:
        for s in data["shapes"]:
            if s["split"] == split:
                lines += detail(s)
    return "\n".join(lines)
