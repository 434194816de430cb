"""What a scaler must already hold when a trace window's first new burst arrives.

    .venv/bin/python -m benchmarks.first_burst \
        --json benchmarks/results/first_burst.json --report benchmarks/first_burst.md

A pod asked for when a burst begins is ready one start-up later, and round-robin routing puts each
request on a pod that is ready when it arrives. So the requests of a burst's first start-up land on
the pods that existed when it began, whatever a scaler does once it has seen the burst. For each
window of the scaling report's summary rows (`benchmarks/scaling/fleet.py`'s `ROWS`, with the oracle's
replicas per interval and each window's opening replicas from `benchmarks/results/scaling_policies.json`),
this finds the window's first new burst: the first interval whose oracle count is above every count
of the window so far and of its warm-up, the most load a scaler there has seen. It then replays that
burst's first start-up of requests alone on k fixed, idle replicas and counts the feasible requests
that miss the SLO. Every other request of the window meeting it, that bounds the window's attainment
from above, and with every other window at 100%, the mean over the windows: the fewest k for which the
mean can reach the target is what a scaler must hold when the burst begins, before any signal of it.
Set against the most load the scaler had seen, it says whether any policy that sizes from the load it
has seen can reach the target there.

The bound is generous to the scaler (idle replicas with no backlog, every other request met) and
assumes more replicas miss no more requests, which round-robin makes likely, not certain.
Deterministic: a re-run on any machine gives the same figures.
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import replace
from typing import Any

from benchmarks import harness
from benchmarks.scaling.experiments import experiment
from benchmarks.scaling.fleet import ROWS
from benchmarks.scaling.runner import plan_of
from nlgsim.feasibility import infeasible
from nlgsim.oracle import ORACLE_WARMUP_S
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.protocol import Plan, trace_requests
from nlgsim.results import summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import Request

RESULTS = harness.REPO / "benchmarks/results/scaling_policies.json"


def missed_on(plan: Plan, profile: EngineProfile, burst: list[Request], replicas: int) -> int:
    """Feasible requests of ``burst`` that miss the SLO on ``replicas`` fixed, idle replicas."""
    first = burst[0].arrival
    shifted = [replace(r, arrival=r.arrival - first) for r in burst]
    scenario = Scenario(
        profile, shifted, None, initial_replicas=replicas, loop_interval=plan.loop_interval,
        scrape_interval=plan.scrape_interval, startup_s=plan.startup_s, routing=plan.routing,
        name=f"fixed:{replicas}",
    )  # fmt: skip
    summary = summarize(simulate(scenario), plan.slo)
    feasible = summary.requests - summary.infeasible
    return round((1.0 - summary.attainment_feasible) * feasible)


def first_new_burst(counts: list[int], interval: float, lo: float, hi: float) -> tuple[float, int, int] | None:
    """The start of the first interval in ``[lo, hi)`` whose oracle count is above every count of the
    warm-up before ``lo`` and of the window so far, that count, and the highest before it; None if none."""
    seen = max(counts[int((lo - ORACLE_WARMUP_S) // interval) : int(lo // interval)], default=0)
    for i in range(int(lo // interval), min(int(hi // interval), len(counts))):
        if counts[i] > seen:
            return i * interval, counts[i], seen
        seen = max(seen, counts[i])
    return None


def measure_window(
    plan: Plan, profile: EngineProfile, trace: list[Request], experiment_data: dict[str, Any], index: int
) -> dict[str, Any]:  # fmt: skip
    oracle = experiment_data["oracle"]
    rep = experiment_data["replicates"][index]
    windows = len(experiment_data["replicates"])
    lo = rep["offset"] + rep["since"]
    hi = lo + rep["until"] - rep["since"]
    found = first_new_burst(oracle["replicas"], oracle["interval_s"], lo, hi)
    out: dict[str, Any] = {"window": index, "from_s": lo, "to_s": hi, "opening": rep["initial"]}
    if found is None:
        return out
    start, burst_count, seen = found
    seen = max(seen, rep["initial"])
    window = [r for r in trace if lo <= r.arrival < hi]
    feasible = int((~infeasible(profile, window, plan.slo)).sum())
    startup = oracle["startup_s"]
    burst = [r for r in window if start <= r.arrival < min(start + startup, hi)]
    before = [r.arrival for r in trace if r.arrival < start]
    # The window's attainment may fall short by this many feasible requests, the others' being 100%.
    allowed = windows * (1.0 - plan.slo.target) * feasible
    probes: dict[int, int] = {}

    def missed(k: int) -> int:
        if k not in probes:
            probes[k] = missed_on(plan, profile, burst, k) if burst else 0
        return probes[k]

    needed = seen
    top = plan.scaler.max_deployment_count
    while needed < top and missed(needed) > allowed:
        needed = min(2 * needed, top)
    low = max(needed // 2, seen)
    while low < needed:  # the fewest k within the allowance, between a k that misses it and one that does not
        mid = (low + needed) // 2
        if missed(mid) > allowed:
            low = mid + 1
        else:
            needed = mid
    bound = 1.0 - missed(seen) / feasible
    out.update({
        "burst_at_s": start, "burst_oracle": burst_count, "seen": seen,
        "quiet_s": start - max(before[-1] if before else lo - ORACLE_WARMUP_S, lo - ORACLE_WARMUP_S),
        "burst_requests": len(burst), "feasible": feasible,
        "bound_at_seen": bound, "mean_bound_at_seen": (bound + windows - 1) / windows,
        "needed": needed if missed(needed) <= allowed else None,
        "missed": {str(k): v for k, v in sorted(probes.items())},
    })  # fmt: skip
    return out


def measure_row(trace_name: str, scale: int, key: str, data: dict[str, Any]) -> dict[str, Any]:
    plan = plan_of(experiment(key))
    profile = load_profile(plan.profile)
    trace = trace_requests(plan)
    experiment_data = data["experiments"][key]
    count = len(experiment_data["replicates"])
    windows = [measure_window(plan, profile, trace, experiment_data, i) for i in range(count)]
    return {"trace": trace_name, "scale": scale, "key": key, "target": plan.slo.target, "windows": windows}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    data = harness.read_json(RESULTS)
    return {
        "machine": harness.machine(),
        "code": harness.revision("nlgsim", "benchmarks/first_burst.py"),
        "date": datetime.date.today().isoformat(),
        "rows": [measure_row(*row, data) for row in ROWS],
    }


def percent(x: float) -> str:
    """A share as a percentage with two decimals."""
    return f"{x * 100:.2f}%"


def render(data: dict[str, Any]) -> str:
    lines = [
        "# The first new burst of each window: what a scaler must already hold",
        "",
        harness.computed(data, "benchmarks/first_burst.py") + ", from the oracle's replicas and the "
        "windows of `benchmarks/results/scaling_policies.json`. Per window of the scaling report's summary "
        "rows: its first new burst (the first interval whose oracle count is above every count the window "
        "and its warm-up had before, the most load a scaler there has seen), the seconds before it without "
        "a request, the requests of its first start-up, which land on the replicas that existed when it "
        "began, and the most the window's attainment of feasible requests can be, and the mean over the "
        "windows (the others at 100%), with the replicas the scaler had seen the load of. The last column: "
        "the fewest replicas a scaler must hold when the burst begins for that mean to reach the target, "
        "before any signal of the burst.",
        "",
        "| trace | scale | window | opens on | first new burst | quiet before it | its requests in one start-up "
        "| oracle replicas then | most seen before | window at most, holding those | mean at most | "
        "replicas needed at its start |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    beyond = []
    for row in data["rows"]:
        for w in row["windows"]:
            head = f"| `{row['trace']}` | x{row['scale']} | {w['window']} | {w['opening']} "
            if "burst_at_s" not in w:
                lines.append(head + "| none | - | - | - | - | - | - | - |")
                continue
            needed = w["needed"]
            lines.append(
                head + f"| {w['burst_at_s'] - w['from_s']:.0f} s in | {w['quiet_s']:.0f} s | {w['burst_requests']} "
                f"| {w['burst_oracle']} | {w['seen']} | {percent(w['bound_at_seen'])} "
                f"| {percent(w['mean_bound_at_seen'])} "
                f"| {needed if needed is not None else 'more than the scaler allows'} |"
            )
            if w["mean_bound_at_seen"] < row["target"]:
                beyond.append((row, w))
    lines += [""]
    if beyond:
        lines.append(
            "Where the mean at most is below the target, no scaler that holds no more than the load it has "
            "seen when the burst begins can reach the target on that row, whatever it does after: "
        )
        lines.append("")
        for row, w in beyond:
            needed = w["needed"]
            lines.append(
                f"- `{row['trace']}` x{row['scale']}, window {w['window']}: after {w['quiet_s']:.0f} s without a "
                f"request, {w['burst_requests']} requests arrive within one start-up; holding the {w['seen']} "
                f"replicas' worth seen before, the window reaches at most {percent(w['bound_at_seen'])} and the mean "
                f"{percent(w['mean_bound_at_seen'])}; reaching {row['target']:.0%} takes "
                + (f"{needed} replicas ({needed / w['seen']:.1f}x the most seen) held through the quiet."
                   if needed is not None else "more replicas than the scaler's maximum.")
            )  # fmt: skip
    else:
        lines.append("On every row a scaler holding the most load it has seen can still reach the target.")
    lines += ["", "Feasible requests of each burst's first start-up missed on k replicas (k: missed):", ""]
    for row in data["rows"]:
        for w in row["windows"]:
            if w.get("missed"):
                probes = ", ".join(f"{k}: {v}" for k, v in w["missed"].items())
                where = f"`{row['trace']}` x{row['scale']}, window {w['window']} ({w['feasible']} feasible)"
                lines.append(f"- {where}: {probes}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, measure, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
