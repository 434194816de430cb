"""One side of `benchmarks.sim_replica_speed`: times the simulator of the source tree it is given, so that
a tree checked out at an earlier commit runs the same measurement as this one.

    python benchmarks/sim_speed_side.py TREE workloads|fleet NAME|oracle|report|whole_report

prints one JSON object. It is run as a script, from TREE, with TREE first on the path: everything it
imports is TREE's. It uses only what both sides have (`nlgsim.simulator.simulate`, `nlgsim.cli.main`,
`nlgsim.oracle.oracle`, `nlgsim.protocol.run_plan`, the scaling report's experiments and its runner's
`run`), and says whether its replica runs the engine's scheduler, and from where it was imported, so the
report says what ran.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"
#: (name, profile, query, rate per second, requests, replicas): the first two near the replicas'
#: capacity (batches of a few choices), the last beyond it (a full batch of 64 every step, as in an
#: under-provisioned fleet's bursts).
WORKLOADS = [
    ("complex", T4, "complex", 6.0, 3000, 4),
    ("simple", T4, "simple", 12.0, 6000, 4),
    ("simple, full batch", H100, "simple", 60.0, 3000, 1),
]
CONV = "trace:benchmarks/traces/azure2023_conv.csv"
X10 = ["--map-lengths", "scale:0.125", "--scale", "10", "--scale-jitter", "15", "--scale-seed", "7"]
X100 = ["--map-lengths", "scale:0.125", "--scale", "100", "--scale-jitter", "15", "--scale-seed", "7"]
#: name -> (what it is, the command line): runs of the simulator's command line, timed whole (the oracle,
#: parsing the trace and starting Python included) as a user pays for them.
FLEETS = {
    "x10": (
        "azure2023_conv x10, fixed:2, the whole trace in 4 windows (trace protocol, oracle included)",
        ["run", "--protocol", "trace", "--profile", H100, "--workload", CONV, *X10, "--policy", "fixed:2"],
    ),
    "x100": (
        "azure2023_conv x100, fixed:20, 300 s in 1 window (trace protocol, oracle included)",
        ["run", "--protocol", "trace", "--profile", H100, "--workload", CONV, *X100, "--duration", "300",
         "--windows", "1", "--policy", "fixed:20"],
    ),
    "planner-x10": (
        "azure2023_conv x10, 600 s, one run of the planner (its rounds and scrapes; no oracle)",
        ["run", "--profile", H100, "--workload", CONV, *X10, "--duration", "600", "--policy", "planner"],
    ),
}  # fmt: skip
#: The oracle alone (nlgsim.oracle.oracle) on the x100 run's requests: what it is, and --duration.
ORACLE = ("azure2023_conv x100, 300 s: the trace protocol's oracle alone", 300.0)
#: The scaling report's experiment timed whole, as the report runs it: a trace's windows with the oracle,
#: on the profile that needs several replicas (an experiment both sides define).
REPORT_EXPERIMENT = "trace-conv-t4"
REPORT_WORKERS = 2


def workloads() -> dict[str, Any]:
    """CPU-s of each workload on fixed pods, steps run ahead of the queue."""
    from nlgsim import workload
    from nlgsim.profile import load_profile
    from nlgsim.simulator import Scenario, simulate

    seconds = []
    for _, profile, query, rate, count, replicas in WORKLOADS:
        kind = {"simple": workload.SIMPLE, "complex": workload.COMPLEX}[query]
        scenario = Scenario(
            load_profile(profile), workload.thesis_requests(kind, rate, count, seed=1), initial_replicas=replicas
        )
        start = time.process_time()
        simulate(scenario)
        seconds.append(time.process_time() - start)
    return {"cpu_s": seconds}


def fleet(name: str) -> dict[str, Any]:
    """A run of `FLEETS`: its CPU-s, how many of them went to the garbage collector's passes, and the
    requests of its workload (as the command prints them)."""
    from nlgsim import cli

    collecting = [0.0, 0.0]  # CPU-s in collections, and when the one under way began

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    printed = io.StringIO()
    gc.callbacks.append(timed)
    try:
        start = time.process_time()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            cli.main(FLEETS[name][1])
        cpu = time.process_time() - start
    finally:
        gc.callbacks.remove(timed)
    found = re.search(r"(\d+) requests over", printed.getvalue())
    return {"cpu_s": cpu, "gc_s": collecting[0], "requests": int(found.group(1)) if found else 0}


def oracle() -> dict[str, Any]:
    """`ORACLE`: the CPU-s of the oracle alone over the trace protocol's SLO and bounds, and its requests."""
    from nlgsim.experiment import parse_workload
    from nlgsim.oracle import oracle
    from nlgsim.profile import load_profile
    from nlgsim.protocol import PROTOCOLS
    from nlgsim.workload import FleetScale

    profile = load_profile(H100)
    scale = FleetScale(100, 15.0, 7)  # as X100 says
    requests = parse_workload(CONV, profile, duration=ORACLE[1], lengths="scale:0.125", scale=scale).requests
    protocol = PROTOCOLS["trace"]
    bounds = protocol.scaler
    start = time.process_time()
    oracle(
        profile, requests, protocol.slo, min_replicas=int(bounds["min_deployment_count"]),
        max_replicas=int(bounds["max_deployment_count"]),
    )  # fmt: skip
    return {"cpu_s": time.process_time() - start, "requests": len(requests)}


def report() -> dict[str, Any]:
    """The report's experiment as `python -m benchmarks.scaling` runs it, wall-clock seconds."""
    from benchmarks.scaling.experiments import experiment
    from benchmarks.scaling.runner import plan_of
    from nlgsim.protocol import run_plan

    plan = plan_of(experiment(REPORT_EXPERIMENT))
    start = time.perf_counter()
    run_plan(plan, REPORT_WORKERS)
    return {"wall_s": time.perf_counter() - start, "load_after": os.getloadavg()[0]}


def whole_report() -> dict[str, Any]:
    """Every experiment of the scaling report, as `python -m benchmarks.scaling` runs them, its results
    written to a temporary file: wall-clock seconds in all and per experiment."""
    from benchmarks.scaling.runner import run

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()):
        start = time.perf_counter()
        data = run([], REPORT_WORKERS, Path(tmp) / "results.json")
        wall = time.perf_counter() - start
    return {"wall_s": wall, "experiments": data["wall_s"], "load_after": os.getloadavg()[0]}


ITEMS: dict[str, Callable[..., dict[str, Any]]] = {
    "workloads": workloads, "fleet": fleet, "oracle": oracle, "report": report, "whole_report": whole_report,
}  # fmt: skip


def main() -> None:
    tree, item, *args = sys.argv[1:]
    sys.path.insert(0, tree)
    os.chdir(tree)
    import nlgsim.replica

    result = ITEMS[item](*args)
    # Whether this side's replica runs the engine's scheduler, or its own copy of admission and batching.
    result["engine_scheduler"] = "Scheduler(" in inspect.getsource(nlgsim.replica)
    result["source"] = os.path.relpath(nlgsim.replica.__file__ or "", tree)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
