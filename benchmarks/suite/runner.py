"""Runs the workload suite: on each shape, this project's policies at their defaults, the anchors at theirs,
and the fixed fleets around the best one, found by search (:func:`best_fixed_search`).

Every run is the trace protocol's (``nlgsim.protocol``): the shape's windows, each opened at the oracle's
count for its first interval, scored over the feasible requests. The oracle is computed once per shape and
every batch of runs reuses it (:func:`nlgsim.protocol.prepare`). Deterministic: the figures are the same
on any machine; only the times it took are the machine's.
"""

from __future__ import annotations

import functools
import math
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from autoscaler.profile import load_profile
from benchmarks import harness
from benchmarks.scaling.analysis import figures
from benchmarks.suite.shapes import PROFILE, Shape
from nlgsim.anchors import ANCHORS
from nlgsim.cli import build_parser, plan_from_args
from nlgsim.oracle import Mapper
from nlgsim.protocol import Plan, prepare, with_runs
from nlgsim.protocol_result import ProtocolResult
from nlgsim.protocol_tables import by_policy

#: The project's policy at its defaults: what the suite judges.
DEFAULT = "planner"
#: Every policy each shape runs besides the fixed fleets: the project's (the planner, the planner as it was,
#: and ``pertoken`` at the chart's default threshold) and the anchors at their documented defaults.
POLICIES = (DEFAULT, "planner-v1", "pertoken:25", *ANCHORS)
#: References, never policies: the lagged oracle holding each interval's need for one start-up of the
#: profile and for five, told it only after the interval (:mod:`nlgsim.lagged`); run with ``--extend``.
REFERENCES = tuple(f"lagged:{k * load_profile(harness.REPO / PROFILE).startup_s:g}" for k in (1, 5))


def plan_of(shape: Shape) -> Plan:
    """The trace protocol's plan for ``shape``, as its command line would make it."""
    argv = ["run", "--protocol", "trace", "--profile", PROFILE, *shape.args]
    return plan_from_args(build_parser().parse_args(argv))


def command(shape: Shape) -> str:
    return " ".join(["python -m nlgsim run --protocol trace --profile", PROFILE, *shape.args])


def feasible_mean(result: ProtocolResult, policy: str) -> float:
    return figures(result, policy).feasible.mean


def _meets(result: ProtocolResult, policy: str) -> bool:
    return feasible_mean(result, policy) >= float(result.command["slo"]["target"]) - 1e-12


def best_fixed_search(
    result: ProtocolResult, run: Callable[[ProtocolResult, Sequence[int]], ProtocolResult]
) -> ProtocolResult:
    """``result`` with fixed fleets run until the fewest replicas reaching the target is found with one
    fewer beside it: from the oracle's mean count down, or up towards its most (then beyond, doubling),
    halving the gap between a count that falls short and one that meets. ``run(result, counts)`` runs those
    fixed fleets and returns ``result`` with them. Attainment is close to monotone in the count (round-robin puts
    requests elsewhere at each count), so the answer is the fewest that meets with one fewer falling short."""
    counts = result.oracle.replicas if result.oracle else (1,)
    cap = int(result.command["scaler"]["max_deployment_count"])
    known: dict[int, bool] = {}

    def check(*ns: int) -> None:
        nonlocal result
        new = [n for n in dict.fromkeys(ns) if n not in known and 1 <= n <= cap]
        if new:
            result = run(result, new)
            known.update((n, _meets(result, f"fixed:{n}")) for n in new)

    guess = max(1, math.ceil(statistics.fmean(counts)))
    check(guess, guess - 1)
    while True:
        meeting = [n for n, ok in known.items() if ok]
        short = [n for n, ok in known.items() if not ok]
        if not meeting:
            top = max(known)
            if top >= cap:
                return result
            check(min(max(max(counts), 2 * top), cap))
            continue
        best = min(meeting)
        below = max((n for n in short if n < best), default=0)
        if best == 1 or below == best - 1:
            return result
        if below == 0:
            check(best - 1, best - 2)
        else:
            check((below + best) // 2)


def summarize(shape: Shape, result: ProtocolResult, seconds: float) -> dict[str, Any]:
    """A shape's figures: per policy the mean attainment of feasible requests (and each window's), mean
    GPU-seconds, peak replicas and scale events a window; the best fixed fleet and whether it is bracketed."""
    policies: dict[str, dict[str, Any]] = {}
    for p, summaries in by_policy(result).items():
        runs = [r for r in result.runs if r.key.policy == p]
        events = [sum(1 for a, b in zip(r.timeline, r.timeline[1:], strict=False) if a[1] != b[1]) for r in runs]
        policies[p] = {
            "feasible": feasible_mean(result, p),
            "windows": [s.attainment_feasible for s in summaries],
            "gpu": figures(result, p).gpu.mean,
            "peak": max(s.max_replicas for s in summaries),
            "events": statistics.fmean(events) if events else 0.0,
        }
    fixed = sorted((int(p.partition(":")[2]), p) for p in policies if p.startswith("fixed:"))
    meeting = [n for n, p in fixed if _meets(result, p)]
    best = min(meeting, default=None)
    orc = result.oracle
    return {
        "name": shape.name,
        "split": shape.split,
        "summary": shape.summary,
        "day": shape.day,
        "command": command(shape),
        "workload": result.workload,
        "feasibility": result.feasibility,
        "target": float(result.command["slo"]["target"]),
        "windows": len(result.replicates),
        "requests": sum(r.requests for r in result.replicates),
        "oracle_mean": statistics.fmean(orc.replicas) if orc and orc.replicas else math.nan,
        "oracle_max": max(orc.replicas) if orc and orc.replicas else 0,
        "best_fixed": f"fixed:{best}" if best is not None else None,
        "bracketed": best is not None and (best == 1 or any(n == best - 1 for n, _ in fixed)),
        "policies": policies,
        "deciding": deciding_window(result, [DEFAULT, "planner-v1", *([f"fixed:{best}"] if best else [])]),
        "seconds": round(seconds, 1),
    }


def deciding_window(result: ProtocolResult, shown: Sequence[str]) -> dict[str, Any]:
    """The window where the default attains least (the one that decides its verdict): its index and length,
    the oracle's count in each SLO interval of it, and the pods of each of ``shown`` over it."""
    runs = {(r.key.policy, r.key.replicate): r for r in result.runs}
    windows = [rep for rep in result.replicates if (DEFAULT, rep.index) in runs]
    if not windows:
        return {}
    rep = min(windows, key=lambda w: runs[(DEFAULT, w.index)].summary.attainment_feasible)
    return {
        "window": rep.index,
        "length": (rep.until or 0.0) - rep.since,
        "interval": result.oracle.interval_s if result.oracle else 0.0,
        "oracle": list(result.oracle_in(rep)),
        "pods": {p: [list(point) for point in runs[(p, rep.index)].timeline] for p in shown if (p, rep.index) in runs},
    }


@contextmanager
def mapper(workers: int) -> Iterator[Mapper]:
    if workers <= 1:
        yield map
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield functools.partial(pool.map, chunksize=1)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure_shape(
    shape: Shape, workers: int, policies: Sequence[str] = POLICIES, say: Callable[[str], None] = print,
    search: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """``shape`` with ``policies``, and (``search``) the fixed fleets around the best one."""
    start = time.monotonic()
    plan = plan_of(shape)
    with mapper(workers) as map_:
        result = prepare(plan, map_, say)
        result = with_runs(result, plan, policies, map_)
        say(f"{shape.name}: {', '.join(policies)} done")

        def run(result: ProtocolResult, counts: Sequence[int]) -> ProtocolResult:
            say(f"{shape.name}: " + ", ".join(f"fixed:{n}" for n in counts))
            return with_runs(result, plan, [f"fixed:{n}" for n in counts], map_)

        if search:
            result = best_fixed_search(result, run)
    return summarize(shape, result, time.monotonic() - start)


def extended(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A shape's ``old`` figures with ``new``'s policies added (or replaced): rows run later on the same
    shape, its best fixed fleet and deciding window kept."""
    return {**old, "policies": {**old["policies"], **new["policies"]}, "seconds": old["seconds"] + new["seconds"]}
