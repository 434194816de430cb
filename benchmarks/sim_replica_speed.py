"""Requests simulated per CPU-second: the simulator with its own replica (`nlgsim.replica`, a copy of
the engine's admission and batching) and with the one that runs the engine's scheduler
(`nlgsim.scheduled_replica`), on the same workloads, fixed replicas, steps run ahead of the queue.

    .venv/bin/python -m benchmarks.sim_replica_speed [--repeat 3]

The cluster builds `nlgsim.replica.Replica` by name; until the simulator switches, this script swaps
the name for the duration of a run, as the equality test in tests/sim/test_scheduled_replica.py does.
CPU time of the process (`time.process_time`), best of `--repeat`: a loaded machine's stalls count less.
"""

from __future__ import annotations

import argparse
import os
import time

import nlgsim.cluster
from benchmarks import harness
from nlgsim.profile import load_profile
from nlgsim.replica import Replica
from nlgsim.scheduled_replica import ScheduledReplica
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import COMPLEX, SIMPLE, thesis_requests

PROFILE = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"
#: (name, query, rate per second, requests, replicas): each near the replicas' capacity.
WORKLOADS = [("complex", COMPLEX, 6.0, 3000, 4), ("simple", SIMPLE, 12.0, 6000, 4)]
BUILT = "Replica"  # the name nlgsim.cluster builds each pod's replica by
REPLICAS = {"copy (nlgsim.replica)": Replica, "scheduler (nlgsim.scheduled_replica)": ScheduledReplica}


def best_seconds(scenario: Scenario, replica: type, repeat: int) -> float:
    built = getattr(nlgsim.cluster, BUILT)
    setattr(nlgsim.cluster, BUILT, replica)
    try:
        best = float("inf")
        for _ in range(repeat):
            start = time.process_time()
            simulate(scenario)
            best = min(best, time.process_time() - start)
        return best
    finally:
        setattr(nlgsim.cluster, BUILT, built)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{harness.cpu_model()}, {os.cpu_count()} cores, load {load:.1f}; {harness.revision()}; {PROFILE}")
    print("| workload | replica | requests/CPU-s | CPU-s |")
    print("|---|---|---:|---:|")
    for name, query, rate, count, replicas in WORKLOADS:
        scenario = Scenario(
            load_profile(PROFILE), thesis_requests(query, rate, count, seed=1), initial_replicas=replicas
        )
        for label, replica in REPLICAS.items():
            seconds = best_seconds(scenario, replica, args.repeat)
            print(
                f"| {name} x{count}, {rate:g}/s, {replicas} pods | {label} | {count / seconds:,.0f} | {seconds:.2f} |"
            )


if __name__ == "__main__":
    main()
