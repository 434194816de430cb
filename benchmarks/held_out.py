"""The fleet-scale defaults on shapes of the traces that the scaling report does not contain.

    .venv/bin/python -m benchmarks.held_out --workers 2 \
        --json benchmarks/results/held_out.json --report benchmarks/held_out.md

The scaling report judges this project's defaults on the Azure traces as recorded, at x10 and x30. The
same defaults must hold on traces it does not contain, so this replays the x10 workloads in other shapes:
time-warped (``--speed``: bursts and lulls twice as long, or half as long, as recorded) and with each
request's copies spread over 30 s instead of 2 (``--scale-jitter``: closer to many independent users,
whose load is steadier within a window). Each shape runs the report's fleet policies at their defaults
and a sweep of fixed fleets, on the report's protocol (four trace windows), and is judged as the report's
rows are at x1: the cheapest of this project's defaults reaching the target, against the best fixed fleet
chosen in hindsight. Nothing here was used to choose a setting. Deterministic: a re-run on any machine
gives the same figures.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
from typing import Any

from benchmarks import harness
from benchmarks.first_burst import percent
from benchmarks.scaling.analysis import figures
from benchmarks.scaling.experiments import FLEET, experiment
from benchmarks.scaling.fleet import DEFAULTS, best_fixed, best_fixed_bracketed, cheapest
from nlgsim.cli import build_parser, plan_from_args
from nlgsim.protocol import run_plan
from nlgsim.protocol_result import ProtocolResult
from nlgsim.protocol_tables import by_policy

#: Each shape: its name, the report's experiment it reshapes, and the options that reshape it.
SHAPES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("code x10, bursts twice as long", "trace-code-h100-x10", ("--speed", "0.5")),
    ("code x10, bursts half as long", "trace-code-h100-x10", ("--speed", "2")),
    ("conv x10, swings twice as long", "trace-conv-h100-x10", ("--speed", "0.5")),
    ("conv x10, swings half as long", "trace-conv-h100-x10", ("--speed", "2")),
    ("conv x10, copies spread over 30 s", "trace-conv-h100-x10", ("--scale-jitter", "30")),
)
#: Fixed fleets from one replica to the report's largest, dense where these shapes' best fleets fall.
FIXED = tuple(f"fixed:{n}" for n in (*range(1, 17), 18, 20, 22, 24, 28, 32))


def shape_args(key: str, options: tuple[str, ...]) -> list[str]:
    """The report experiment's arguments without its policies, reshaped by ``options``, with this
    benchmark's policies."""
    args, kept = list(experiment(key).args), []
    while args:
        flag = args.pop(0)
        value = args.pop(0)
        if flag != "--policy":
            kept += [flag, value]
    for policy in (*FLEET, *FIXED):
        kept += ["--policy", policy]
    return [*kept, *options]


def summarize_shape(name: str, key: str, options: tuple[str, ...], result: ProtocolResult) -> dict[str, Any]:
    """A shape's figures: per policy its mean attainment of feasible requests, GPU-seconds and peak
    replicas; the oracle's mean and most replicas."""
    policies = {}
    for p, summaries in by_policy(result).items():
        f = figures(result, p)
        policies[p] = {"feasible": f.feasible.mean, "gpu": f.gpu.mean, "peak": max(s.max_replicas for s in summaries)}
    orc, fixed, mine = result.oracle, best_fixed(result), cheapest(result, policies=DEFAULTS)
    return {
        "shape": name,
        "from": key,
        "options": list(options),
        "target": float(result.command["slo"]["target"]),
        "windows": len(result.replicates),
        "oracle_mean": statistics.fmean(orc.replicas) if orc and orc.replicas else math.nan,
        "oracle_max": max(orc.replicas) if orc and orc.replicas else 0,
        "best_fixed": fixed.name if fixed else None,
        "best_fixed_bracketed": best_fixed_bracketed(result),
        "cheapest_default": mine.name if mine else None,
        "policies": policies,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    code = harness.revision("nlgsim", "autoscaler", "benchmarks/held_out.py")  # what the runs import
    shapes = []
    for name, key, options in SHAPES:
        plan = plan_from_args(build_parser().parse_args(["run", *shape_args(key, options)]))
        shapes.append(summarize_shape(name, key, options, run_plan(plan, args.workers)))
    return {
        "machine": harness.machine(),
        "code": code,
        "date": datetime.date.today().isoformat(),
        "shapes": shapes,
    }


def verdict(shape: dict[str, Any]) -> str:
    """Whether a default reaches the target for no more GPU-seconds than the best fixed fleet, in words."""
    fixed, mine = shape["best_fixed"], shape["cheapest_default"]
    if fixed is None:
        return "no fixed fleet run reaches the target"
    if not shape.get("best_fixed_bracketed", True):
        return f"unknown: `{fixed}` is the fewest run that reach the target, and one replica fewer was not run"
    if mine is None:
        return "not met: no default reaches the target"
    ratio = shape["policies"][mine]["gpu"] / shape["policies"][fixed]["gpu"]
    met = ratio <= 1.0 + 1e-12
    return f"{'met' if met else 'not met'}: `{mine}` at {ratio:.2f}x `{fixed}`'s GPU-s"


def render(data: dict[str, Any]) -> str:
    lines = [
        "# The fleet-scale defaults on shapes the scaling report does not contain",
        "",
        harness.computed(data, "benchmarks/held_out.py") + ". The x10 workloads of the scaling report "
        "([scaling_policies.md](scaling_policies.md), section 4) replayed time-warped (`--speed`) or with each "
        "request's copies spread over 30 s (`--scale-jitter`), on the measured H100 profile and the report's "
        "trace protocol and SLO; this project's defaults (" + ", ".join(f"`{p}`" for p in DEFAULTS) + ") and "
        "the anchors at theirs, against fixed fleets. A shape is met when a default reaches the target with no "
        "more GPU-seconds than the best fixed fleet (the fewest replicas reaching it, chosen in hindsight). No "
        "setting was chosen on these shapes.",
        "",
        "| shape | options | oracle replicas (mean, max) | best fixed | verdict |",
        "|---|---|---|---|---|",
    ]
    for s in data["shapes"]:
        fixed = s["best_fixed"]
        best = f"`{fixed}` ({percent(s['policies'][fixed]['feasible'])})" if fixed else "-"
        lines.append(
            f"| {s['shape']} | `{' '.join(s['options'])}` | {s['oracle_mean']:.1f}, {s['oracle_max']} | {best} "
            f"| {verdict(s)} |"
        )
    met = sum(verdict(s).startswith("met") for s in data["shapes"])
    lines += ["", f"{met} of {len(data['shapes'])} shapes are met.", ""]
    for s in data["shapes"]:
        fixed = s["best_fixed"]
        lines += [
            f"## {s['shape']}",
            "",
            f"`{s['from']}` with `{' '.join(s['options'])}`; {s['windows']} windows; the oracle "
            f"{s['oracle_mean']:.1f} replicas on average, at most {s['oracle_max']}.",
            "",
            "| policy | attainment % (feasible) | GPU-s | x best fixed | peak replicas |",
            "|---|---:|---:|---:|---:|",
        ]
        base = s["policies"][fixed]["gpu"] if fixed else math.nan
        for p, f in s["policies"].items():
            if p.startswith("fixed:") and p != fixed:
                continue
            name = f"{p} (best fixed)" if p == fixed else p
            lines.append(
                f"| {name} | {100 * f['feasible']:.2f} | {f['gpu']:.0f} | {f['gpu'] / base:.2f} | {f['peak']} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, measure, render, argv, workers="processes for the runs (same output)")


if __name__ == "__main__":
    raise SystemExit(main())
