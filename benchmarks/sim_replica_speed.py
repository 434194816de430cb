"""Requests simulated per CPU-second: the simulator with its own replica (`nlgsim.replica`, a copy of
the engine's admission and batching) and with the one that runs the engine's scheduler
(`nlgsim.scheduled_replica`), on the same workloads, fixed replicas, steps run ahead of the queue.

    .venv/bin/python -m benchmarks.sim_replica_speed [--repeat 3] \
        --baseline benchmarks/results/sim_replica_speed_before.json \
        --json benchmarks/results/sim_replica_speed.json --report benchmarks/sim_replica_speed.md

Beside the workloads, one fleet run of the trace protocol (`FLEET`: the oracle's candidates included,
whose under-provisioned fleets run a full batch every step), with the garbage collector's share of it,
and one whole experiment of the scaling report (`REPORT_EXPERIMENT`, wall-clock, as the report runs
it): issue 23's bound is on the time the report takes to render. `--baseline` shows an earlier
results file's ratios beside (the committed one: the previous measurement).

The cluster builds `nlgsim.replica.Replica` by name; until the simulator switches, this script swaps
the name for the duration of a run, as the equality test in tests/sim/test_scheduled_replica.py does.
CPU time of the process (`time.process_time`), best of `--repeat`, the two replicas taking turns: a
loaded machine's stalls count less, and a change in its load falls on both.
Issue 23 lets the simulator switch to the scheduler's replica where it is at most 1.5x slower.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nlgsim.cluster
from benchmarks import harness
from benchmarks.scaling.experiments import experiment
from benchmarks.scaling.runner import plan_of
from nlgsim import cli
from nlgsim.profile import load_profile
from nlgsim.protocol import run_plan
from nlgsim.replica import Replica
from nlgsim.scheduled_replica import ScheduledReplica
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import COMPLEX, SIMPLE, thesis_requests

T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"
H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
#: (name, profile, query, rate per second, requests, replicas): the first two near the replicas'
#: capacity (batches of a few choices), the last beyond it (a full batch of 64 every step, as in an
#: under-provisioned fleet's bursts).
WORKLOADS = [
    ("complex", T4, COMPLEX, 6.0, 3000, 4),
    ("simple", T4, SIMPLE, 12.0, 6000, 4),
    ("simple, full batch", H100, SIMPLE, 60.0, 3000, 1),
]
BUILT = "Replica"  # the name nlgsim.cluster builds each pod's replica by
REPLICAS = {"copy": Replica, "scheduler": ScheduledReplica}
MEASURED_FILES = (
    "nlgsim",
    "triton_backend/scheduler.py",
    "triton_backend/kv_pages.py",
    "triton_backend/sequence.py",
    "triton_backend/length_predictor.py",
)
ALLOWED_SLOWDOWN = 1.5
#: The scaling report's experiment timed whole with each replica: the fleet-scale one at x10, whose runs
#: are mostly the policies' (as in the report), not the oracle's.
REPORT_EXPERIMENT = "trace-conv-h100-x10"
REPORT_WORKERS = 2  # as the report runs
FLEET_NAME = "azure2023_conv x10, scale:0.125, fixed:6, 400 s, 1 window (trace protocol, oracle included)"
FLEET = [
    "run", "--protocol", "trace", "--profile", H100, "--workload", "trace:benchmarks/traces/azure2023_conv.csv",
    "--map-lengths", "scale:0.125", "--scale", "10", "--policy", "fixed:6", "--duration", "400", "--windows", "1",
]  # fmt: skip


def best_seconds(scenario: Scenario, repeat: int) -> dict[str, float]:
    """Each replica's best CPU-s on `scenario`; the two take turns, so a change in the machine's load
    falls on both."""
    best = dict.fromkeys(REPLICAS, float("inf"))
    for _ in range(repeat):
        for label, replica in REPLICAS.items():
            with building(replica):
                start = time.process_time()
                simulate(scenario)
                best[label] = min(best[label], time.process_time() - start)
    return best


@contextlib.contextmanager
def building(replica: type) -> Iterator[None]:
    """The cluster builds `replica` for the pods made meanwhile."""
    built = getattr(nlgsim.cluster, BUILT)
    setattr(nlgsim.cluster, BUILT, replica)
    try:
        yield
    finally:
        setattr(nlgsim.cluster, BUILT, built)


def fleet_seconds(replica: type) -> tuple[float, float]:
    """The fleet run's CPU-s, and how many of them went to the garbage collector's passes."""
    collecting = [0.0, 0.0]  # CPU-s in collections, and when the one under way began

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    gc.callbacks.append(timed)
    try:
        with building(replica):
            start = time.process_time()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                cli.main(FLEET)
            return time.process_time() - start, collecting[0]
    finally:
        gc.callbacks.remove(timed)


def fleet(repeat: int) -> dict[str, Any]:
    """The fleet run's best of `repeat` for each replica, taking turns, with that run's collector time."""
    measured = dict.fromkeys(REPLICAS, (float("inf"), 0.0))
    for _ in range(repeat):
        for label, replica in REPLICAS.items():
            measured[label] = min(measured[label], fleet_seconds(replica))
    return {
        "repeat": repeat,
        "run": FLEET_NAME,
        "cpu_s": {label: seconds for label, (seconds, _) in measured.items()},
        "gc_s": {label: collecting for label, (_, collecting) in measured.items()},
    }


def report_experiment(key: str, workers: int) -> dict[str, Any]:
    """One experiment of the scaling report as `python -m benchmarks.scaling` runs it (its oracle and
    every policy on every window, `workers` processes), wall-clock seconds with each replica. The
    scheduler's goes first: the trace it parses stays cached for the copy's run."""
    plan = plan_of(experiment(key))
    wall = {}
    for label in ("scheduler", "copy"):
        with building(REPLICAS[label]):
            start = time.perf_counter()
            run_plan(plan, workers)
            wall[label] = time.perf_counter() - start
    return {"experiment": key, "workers": workers, "wall_s": wall}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    rows = []
    for name, profile, query, rate, count, replicas in WORKLOADS:
        scenario = Scenario(
            load_profile(profile), thesis_requests(query, rate, count, seed=1), initial_replicas=replicas
        )
        seconds = best_seconds(scenario, args.repeat)
        rows.append(
            {
                "workload": name,
                "profile": profile,
                "rate": rate,
                "requests": count,
                "replicas": replicas,
                "cpu_s": seconds,
            }
        )
    return {
        "machine": harness.machine(),
        "load": [load_before, os.getloadavg()[0]],
        "code": harness.revision(*MEASURED_FILES),
        "date": datetime.date.today().isoformat(),
        "repeat": args.repeat,
        "rows": rows,
        "fleet": fleet(args.repeat),
        "report": report_experiment(REPORT_EXPERIMENT, REPORT_WORKERS),
        "load_after_report": os.getloadavg()[0],
    }


def render(data: dict[str, Any], baseline: dict[str, Any] | None = None) -> str:
    m = data["machine"]
    before = {row["workload"]: row["cpu_s"] for row in baseline["rows"]} if baseline else {}
    lines = [
        "# Simulator speed: the copy of the scheduler against the scheduler itself",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, load {data['load'][0]:.1f} before and "
        f"{data['load'][1]:.1f} after. Measured {data['date']} on {data['code']} with "
        f"`benchmarks/sim_replica_speed.py` (fixed pods, steps run ahead of the queue; CPU time of the "
        f"process, best of {data['repeat']}).",
        "",
        f"Issue 23 lets `nlgsim/replica.py` run the engine's scheduler where that is at most "
        f"{ALLOWED_SLOWDOWN:g}x slower than the copy.",
        "",
        "| workload | profile | copy: requests/CPU-s | scheduler: requests/CPU-s | scheduler's CPU-s / copy's"
        + (f" | the same on {baseline['code']} |" if baseline else " |"),
        "|---|---|---:|---:|---:|" + ("---:|" if baseline else ""),
    ]

    def ratio(seconds: dict[str, float]) -> str:
        return f"{seconds['scheduler'] / seconds['copy']:.2f}x"

    for row in data["rows"]:
        copy, real = row["cpu_s"]["copy"], row["cpu_s"]["scheduler"]
        was = before.get(row["workload"])
        lines.append(
            f"| {row['workload']} x{row['requests']}, {row['rate']:g}/s, {row['replicas']} pods "
            f"| `{row['profile'].rsplit('/', 1)[-1]}` | {row['requests'] / copy:,.0f} "
            f"| {row['requests'] / real:,.0f} | {ratio(row['cpu_s'])} |" + (f" {ratio(was)} |" if was else "")
        )
    fleet = data.get("fleet")
    if fleet:
        seconds = fleet["cpu_s"]
        runs = "measured once" if fleet.get("repeat", 1) == 1 else f"best of {fleet['repeat']}"
        lines += [
            "",
            f"A fleet run, {runs}: {fleet['run']} (`{' '.join(FLEET)}`), {seconds['copy']:.1f} CPU-s with "
            f"the copy, {seconds['scheduler']:.1f} with the scheduler's replica: {ratio(seconds)}.",
        ]
        collecting = fleet.get("gc_s")
        if collecting:
            lines[-1] += (
                f" Of these, the garbage collector's passes took {collecting['copy']:.1f} and "
                f"{collecting['scheduler']:.1f} CPU-s (the scheduler's requests, choices and their lists "
                "are objects it tracks)."
            )
    report = data.get("report")
    if report:
        wall = report["wall_s"]
        lines += [
            "",
            f"The scaling report's `{report['experiment']}` experiment, as `python -m benchmarks.scaling` runs it "
            f"({report['workers']} workers, wall-clock, measured once; load {data['load_after_report']:.1f} after): "
            f"{wall['copy']:.0f} s with the copy, {wall['scheduler']:.0f} s with the scheduler's replica: "
            f"{wall['scheduler'] / wall['copy']:.2f}x.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="an earlier results file, whose ratios are shown beside")
    harness.output_arguments(parser)
    args = parser.parse_args(argv)
    baseline = harness.read_json(args.baseline) if args.baseline else None
    harness.publish(render(harness.results(args, measure), baseline), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
