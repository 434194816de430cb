"""How far the planner's count stands from the replicas each interval needed, term by term.

    .venv/bin/python -m benchmarks.need_estimate --workers 2 \
        --json benchmarks/results/need_estimate.json --report benchmarks/need_estimate.md

The oracle (`nlgsim/oracle.py`) finds the fewest replicas each 30 s interval of a trace needed; the
lagged oracle (`nlgsim/lagged.py`), which holds that exact need a start-up late, says how much of a
row's gap reacting at all leaves. This measures the rest: the planner's own estimate of the need. It
replays the planner on every window of the scaling report's summary rows (`benchmarks/scaling/fleet.py`'s
`ROWS`, each window opening as the report's does) and sets each round's terms against the oracle's
count for the interval the round falls in: the work it measured (demand over the profile's capacity for
the mix, in replicas' worth), the forecast at its headroom and the burst level in whole replicas, the
TTFT queue's count, the count it planned (the largest of those), the count it asked for after the
remembered misses, the tail guard, the scale-in holds, stabilization and rate limits, and the pods it
had. A term's mean over the need says how far it stands off on average, its spread how much it moves
round to round; a hold that keeps the highest of a noisy term for minutes pays about its spread on top of its mean.

What being under the need costs: each interval whose need is above one replica is replayed on one
replica fewer (`nlgsim.oracle.short_attainment`), and its attainment set against what a window of the
report may miss. Where one such interval spends most of a window's allowance, a scaler has to stay
above the need nearly always, and its margin is what its estimate's noise asks for.

The same terms for the planner over the report's long window (`LONG_WINDOW`, `planner w120`), on every
row, say what measuring over longer windows changes: which terms move, and by how much.

Deterministic: a re-run on any machine gives the same figures.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import statistics
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from benchmarks import harness
from benchmarks.scaling.experiments import LONG_WINDOW, experiment
from benchmarks.scaling.fleet import ROWS, holds_added
from benchmarks.scaling.runner import plan_of
from nlgsim.oracle import short_attainment
from nlgsim.profile import load_profile
from nlgsim.protocol import simulate_one, trace_requests, window_length
from nlgsim.protocol_result import RunKey
from nlgsim.simulator import LoopRecord

RESULTS = harness.REPO / "benchmarks/results/scaling_policies.json"
POLICY = "planner"

#: Each term: its name in the report, and how it is read from a round's decision.
TERMS: dict[str, Callable[[LoopRecord], float]] = {
    "work measured": lambda r: r.values["demand"] / r.values["per_replica"],
    "forecast at its headroom": lambda r: r.values["forecast_replicas"],
    "burst level": lambda r: r.values["burst_replicas"],
    "TTFT queue": lambda r: r.values["queue_replicas"],
    "planned (the largest)": lambda r: max(r.values["throughput_replicas"], r.values["queue_replicas"]),
    "asked for": lambda r: float(r.desired),
    "pods": lambda r: float(r.current),
}


def window_rounds(
    key: str, index: int, initial: int, offset: float, needed: tuple[int, ...], interval: float,
    policy: str = POLICY,
) -> list[dict[str, float]]:  # fmt: skip
    """Each round of ``policy`` (a planner) in the window's measured part: the oracle's need and every term."""
    plan = plan_of(experiment(key))
    log, since, until = simulate_one(plan, RunKey(policy, index), initial)
    end = until if until is not None else log.end
    rounds = []
    for r in log.loops:
        if since <= r.time < end and "forecast_replicas" in r.values:
            need = needed[min(int((offset + r.time) // interval), len(needed) - 1)]
            rounds.append({"need": float(need), **{name: read(r) for name, read in TERMS.items()}})
    return rounds


def _window_task(task: tuple[str, int, int, float, tuple[int, ...], float, str]) -> list[dict[str, float]]:
    return window_rounds(*task)


def short_stats(key: str, needed: tuple[int, ...], map_: Any) -> dict[str, float]:
    """One replica short of the need, over the intervals whose need is above one replica: how many, the
    median attainment of their feasible requests, the share below the target, and the share of a window's
    allowance of misses (its intervals times one less the target) that one interval at the median
    spends, were its requests the window's average."""
    plan = plan_of(experiment(key))
    requests = trace_requests(plan)
    profile = load_profile(plan.profile)
    short = short_attainment(profile, requests, plan.slo, needed, routing=plan.routing, map_=map_)
    got = [a for a in short if not math.isnan(a)]
    intervals = window_length(plan, requests[-1].arrival) / plan.slo.interval_s
    target = plan.slo.target
    if not got:
        return {"intervals": 0, "window_intervals": intervals, "target": target}
    median = statistics.median(got)
    return {
        "intervals": len(got),
        "median": median,
        "below": sum(a < target for a in got) / len(got),
        "window_intervals": intervals,
        "target": target,
        "allowance": (1 - median) / (intervals * (1 - target)),
    }


def stats(rounds: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per term: the mean and spread (population standard deviation) of term less need, and the share
    of rounds above and below the need."""
    out = {}
    for name in TERMS:
        off = [r[name] - r["need"] for r in rounds]
        out[name] = {
            "mean": statistics.fmean(off),
            "sd": statistics.pstdev(off),
            "above": sum(x > 0 for x in off) / len(off),
            "below": sum(x < 0 for x in off) / len(off),
        }
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    data = harness.read_json(RESULTS)["experiments"]
    tasks = []
    for policy in (POLICY, LONG_WINDOW):
        for _, _, key in ROWS:
            orc = data[key]["oracle"]
            for rep in data[key]["replicates"]:
                needed = tuple(orc["replicas"])
                tasks.append((key, rep["index"], rep["initial"], rep["offset"], needed, orc["interval_s"], policy))
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        per_window = list(pool.map(_window_task, tasks, chunksize=1))
        short = {
            key: short_stats(key, tuple(data[key]["oracle"]["replicas"]), functools.partial(pool.map, chunksize=4))
            for _, _, key in ROWS
        }
    by_key: dict[tuple[str, str], list[dict[str, float]]] = {}
    for task, rounds in zip(tasks, per_window, strict=True):
        by_key.setdefault((task[-1], task[0]), []).extend(rounds)
    rows = []
    for trace, scale, key in ROWS:
        rounds, long = by_key[(POLICY, key)], by_key[(LONG_WINDOW, key)]
        rows.append({
            "trace": trace, "scale": scale, "key": key, "rounds": len(rounds),
            "need": statistics.fmean(r["need"] for r in rounds), "terms": stats(rounds), "short": short[key],
            "long": {"rounds": len(long), "terms": stats(long)},
        })  # fmt: skip
    return {
        "machine": harness.machine(),
        "code": harness.revision("nlgsim", "autoscaler", "benchmarks/need_estimate.py"),
        "date": datetime.date.today().isoformat(),
        "policy": POLICY,
        "long_window": LONG_WINDOW,
        "rows": rows,
    }


def _signed(x: float) -> str:
    return f"{x:+.2f}"


def short_text(short: Mapping[str, float]) -> str:
    """The row's paragraph on what one replica under the need costs."""
    window = f"a window of {short['window_intervals']:.0f} intervals at {short['target']:.0%}"
    if not short["intervals"]:
        return f"No interval needed more than one replica, so none was replayed one replica short ({window})."
    return (
        f"One replica short of the need, the {short['intervals']:.0f} intervals that needed more than one keep "
        f"a median {short['median']:.1%} of their feasible requests, and {short['below']:.0%} of them fall below "
        f"the target. At the median, one such interval spends {short['allowance']:.2f} of what {window} may "
        "miss, were its requests the window's average."
    )


def render(data: dict[str, Any]) -> str:
    lines = [
        "# The planner's count against the replicas each interval needed",
        "",
        harness.computed(data, "benchmarks/need_estimate.py") + f". `{data['policy']}` at its defaults "
        "on every window of the scaling report's summary rows, each round's terms set against the oracle's "
        "count for its interval (the need), in replicas: the mean of term less need, its spread (standard "
        "deviation), and the rounds above and below the need. Work is in replicas' worth, not rounded; the "
        "other terms are whole replicas. `asked for` is the count after the remembered misses, the tail guard, "
        "the scale-in holds, stabilization and rate limits; `pods` what the Deployment had.",
        "",
    ]
    for row in data["rows"]:
        terms = row["terms"]
        lines += [
            f"## `{row['trace']}` x{row['scale']}",
            "",
            f"{row['rounds']} rounds; the oracle's need {row['need']:.2f} replicas on average. The planned count "
            f"stands {_signed(terms['planned (the largest)']['mean'])} off the need and the holds add "
            f"{_signed(holds_added(terms))}; the work measured is {_signed(terms['work measured']['mean'])} off it, "
            f"spread {terms['work measured']['sd']:.2f}.",
            "",
            "| term | mean less need | spread | rounds above the need | rounds below |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, s in terms.items():
            lines.append(f"| {name} | {_signed(s['mean'])} | {s['sd']:.2f} | {s['above']:.0%} | {s['below']:.0%} |")
        lines += ["", short_text(row["short"]), ""]
    return "\n".join(lines + long_window_section(data))


#: The terms set side by side for the long window: what it measures, the two terms a window's length
#: acts on (the forecast and the burst level), the count planned (the TTFT queue's among them) and what it
#: asked for.
LONG_TERMS = ("work measured", "forecast at its headroom", "burst level", "planned (the largest)", "asked for")


def long_window_section(data: Mapping[str, Any]) -> list[str]:
    """Per row, the mean of each of ``LONG_TERMS`` less the need (its spread in parentheses) for the
    planner over its default window and over the long window, and what the holds add."""
    long, base = data["long_window"], data["policy"]
    lines = [
        f"## `{long}`: the same terms over longer windows",
        "",
        f"`{long}` is `{base}` measuring over longer windows (the scaling report's approaches). Each cell is "
        f"the term's mean less the need, its spread in parentheses: `{base}`, then `{long}`.",
        "",
        "| row | " + " | ".join(LONG_TERMS) + " | holds add |",
        "|---|" + "---:|" * (len(LONG_TERMS) + 1),
    ]
    for row in data["rows"]:
        short, longer = row["terms"], row["long"]["terms"]
        cells = [
            f"{_signed(short[t]['mean'])} ({short[t]['sd']:.2f}), {_signed(longer[t]['mean'])} ({longer[t]['sd']:.2f})"
            for t in LONG_TERMS
        ]
        held = f"{_signed(holds_added(short))}, {_signed(holds_added(longer))}"
        lines.append(f"| `{row['trace']}` x{row['scale']} | " + " | ".join(cells) + f" | {held} |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, measure, render, argv, workers="processes to spread the windows over")


if __name__ == "__main__":
    raise SystemExit(main())
