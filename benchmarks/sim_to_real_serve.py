"""The served half of the sim-to-real check (:mod:`benchmarks.sim_to_real`), alone: start tritonserver
with a profile's engine, replay prepared requests and the calibration probes, and record when every
response came back.

It imports only the server's launcher and the load generator, so it runs on a GPU machine that has
neither the simulator's nor the autoscaler's packages (after ``. scripts/gpu_bundle_env.sh``):

    python -m benchmarks.sim_to_real --profile P.json --plan plan.json       # here: the requests
    python -m benchmarks.sim_to_real_serve plan.json served.json [0-7 8-15]  # there: the replay
    python -m benchmarks.sim_to_real --profile P.json --served served.json   # here: the comparison

The optional CPU lists pin the server (it inherits them at its start) and then the load generator apart,
on a machine with cores to spare. Times are the client's ``time.perf_counter()`` readings; only their
differences are used.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nlgsim.replay import Measured, replay
from nlgsim.workload import Request

# The parts of a plan and of a served record, in the order the server sees them.
PARTS = ("warmup", "before", "batch_before", "window", "after", "batch_after")


def request_to_json(r: Request) -> list[Any]:
    return [r.id, r.arrival, r.prompt_tokens, list(r.output_tokens)]


def request_from_json(row: Sequence[Any]) -> Request:
    return Request(int(row[0]), float(row[1]), int(row[2]), tuple(int(n) for n in row[3]))


def measured_to_json(m: Measured) -> dict[str, Any]:
    return {"id": m.request.id, "sent": m.sent, "first": m.first, "last": m.last, "tokens": m.tokens,
            "input_tokens": m.input_tokens}  # fmt: skip


def measured_from_json(row: Mapping[str, Any], requests: Mapping[int, Request]) -> Measured:
    return Measured(requests[int(row["id"])], float(row["sent"]), float(row["first"]), float(row["last"]),
                    [int(n) for n in row["tokens"]], int(row["input_tokens"]))  # fmt: skip


def lone(url: str, requests: Sequence[Request]) -> list[Measured]:
    """Each request alone on the server, one after another."""
    return [replay(url, [r])[0] for r in requests]


def cpu_list(text: str) -> set[int]:
    """``0-7,12`` as a set of CPUs."""
    cpus: set[int] = set()
    for item in text.split(","):
        low, _, high = item.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def serve(
    env: Mapping[str, str], parts: Mapping[str, Sequence[Request]], cpus: tuple[set[int], set[int]] | None = None
) -> dict[str, Any]:
    """Start tritonserver with ``env`` and send each of :data:`PARTS` in turn: the warm-up, lone probes
    (``before``/``after``) one at a time, the rest at their arrival times. Returns the measured parts
    (lists of :class:`Measured`), the start-up in seconds and the machine's load average around the window."""
    from triton_backend.launch import TritonServer

    if cpus:
        os.sched_setaffinity(0, cpus[0])
    t = time.perf_counter()
    with TritonServer(env=dict(env), ready_timeout=600) as server:
        startup = time.perf_counter() - t
        if cpus:
            os.sched_setaffinity(0, cpus[1])
        got: dict[str, Any] = {}
        load = []
        for part in PARTS:
            if part == "before":
                time.sleep(2.0)  # the warm-up's last responses settle
                load.append(os.getloadavg()[0])
            send = lone if part in ("before", "after") else replay
            got[part] = send(server.grpc_url, parts[part])
        load.append(os.getloadavg()[0])
    return {**got, "startup_s": startup, "load_average_before_after": load}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    plan = json.loads(Path(args[0]).read_text())
    parts = {p: [request_from_json(r) for r in plan["parts"][p]] for p in PARTS}
    served = serve(plan["env"], parts, (cpu_list(args[2]), cpu_list(args[3])) if len(args) == 4 else None)
    hardware = f"a {os.cpu_count()}-core CPU"
    try:
        import torch

        if torch.cuda.is_available():
            hardware = f"an {torch.cuda.get_device_name(0)}"  # the engine takes the GPU where there is one
    except ImportError:
        pass
    record = {
        "plan": plan,
        "hardware": hardware,
        "startup_s": served["startup_s"],
        "load_average_before_after": served["load_average_before_after"],
        "cpus": args[2:],
        "parts": {p: [measured_to_json(m) for m in served[p]] for p in PARTS},
    }
    Path(args[1]).write_text(json.dumps(record))
    print(f"served {sum(len(v) for v in parts.values())} requests on {hardware}; wrote {args[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
