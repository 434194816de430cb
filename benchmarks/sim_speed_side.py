"""One side of `benchmarks.sim_replica_speed`: times the simulator of the source tree it is given, so that
a tree checked out at an earlier commit runs the same measurement as this one.

    python benchmarks/sim_speed_side.py TREE workloads|fleet|report|whole_report

prints one JSON object. It is run as a script, from TREE, with TREE first on the path: everything it
imports is TREE's. It uses only what both sides have (`nlgsim.simulator.simulate`, `nlgsim.cli.main`,
`nlgsim.protocol.run_plan`, the scaling report's experiments and its runner's `run`), and says whether its
replica runs the engine's scheduler, and from where it was imported, so the report says what ran.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import json
import os
import sys
import tempfile
import time
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
FLEET_NAME = "azure2023_conv x10, scale:0.125, fixed:6, 400 s, 1 window (trace protocol, oracle included)"
FLEET = [
    "run", "--protocol", "trace", "--profile", H100, "--workload", "trace:benchmarks/traces/azure2023_conv.csv",
    "--map-lengths", "scale:0.125", "--scale", "10", "--policy", "fixed:6", "--duration", "400", "--windows", "1",
]  # fmt: skip
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


def fleet() -> dict[str, Any]:
    """The fleet run's CPU-s, and how many of them went to the garbage collector's passes."""
    from nlgsim import cli

    collecting = [0.0, 0.0]  # CPU-s in collections, and when the one under way began

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    gc.callbacks.append(timed)
    try:
        start = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(FLEET)
        return {"cpu_s": time.process_time() - start, "gc_s": collecting[0]}
    finally:
        gc.callbacks.remove(timed)


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


ITEMS = {"workloads": workloads, "fleet": fleet, "report": report, "whole_report": whole_report}


def main() -> None:
    tree, item = sys.argv[1], sys.argv[2]
    sys.path.insert(0, tree)
    os.chdir(tree)
    import nlgsim.replica

    result = ITEMS[item]()
    # Whether this side's replica runs the engine's scheduler, or its own copy of admission and batching.
    result["engine_scheduler"] = "Scheduler(" in inspect.getsource(nlgsim.replica)
    result["source"] = os.path.relpath(nlgsim.replica.__file__ or "", tree)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
