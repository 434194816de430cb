"""Run the report's experiments and write their numbers: benchmarks/results/scaling_policies.json.

    python -m benchmarks.scaling.runner [--only KEY ...] [--workers 2]

Each experiment's arguments go through ``nlgsim``'s own parser (``plan_from_args``) and
``run_plan``: the same path as the command the report prints. ``--only`` re-runs some experiments and
keeps the others' numbers; each experiment keeps its own wall time and the load average it started
under. Nothing here formats a table or writes prose.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.capacity import choices_per_second
from benchmarks.scaling.experiments import EXPERIMENTS, PROFILES, Experiment, experiment
from nlgsim.capacity import saturation_rate, step_estimate
from nlgsim.cli import build_parser, plan_from_args
from nlgsim.experiment import planner_config
from nlgsim.profile import load_profile
from nlgsim.protocol import Plan, run_plan, thesis_requests_for
from nlgsim.workload import COMPLEX, SIMPLE, thesis_requests

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "scaling_policies.json"


def plan_of(exp: Experiment) -> Plan:
    """The experiment's plan, exactly as ``python -m nlgsim run`` would make it from its arguments."""
    return plan_from_args(build_parser().parse_args(["run", *exp.args]))


def profile_numbers(path: str) -> dict[str, Any]:
    """What the report's profile table shows, as numbers."""
    p = load_profile(ROOT / path)
    return {
        "path": path,
        "source": p.source,
        "model": f"{p.preset} {p.dtype}",
        "hardware": p.hardware,
        "decode_ms_ctx128": {str(b): 1000 * p.decode_step_s(b, 128) for b in (1, 16, p.max_batch)},
        "prefill_128_ms": 1000 * p.prefill_time_s(128),
        "max_batch": p.max_batch,
        "startup_s": p.startup_s,
        "saturation_simple": saturation_rate(p, thesis_requests(SIMPLE, 1.0, 64, 0)),
        "saturation_complex": saturation_rate(p, thesis_requests(COMPLEX, 1.0, 64, 0)),
    }


def planner_numbers(exp: Experiment) -> dict[str, float]:
    """What the planner plans with on an experiment's first seed: its per-token target, what its
    capacity model says one sequence alone costs a step (a target below it cannot be planned), and the
    requests per second the profile says one replica carries at that target."""
    plan = plan_of(exp)
    profile = load_profile(ROOT / plan.profile)
    requests = thesis_requests_for(plan, plan.first_seed)
    cfg = planner_config(profile, requests, plan.slo, plan.loop_interval, plan.startup_s, plan.scaler.planner)
    choices = requests[0].choices
    one = step_estimate(profile, 1, cfg.prompt_tokens, cfg.output_tokens, choices)
    carried = choices_per_second(profile, cfg.per_token_limit_s, cfg.prompt_tokens, cfg.output_tokens, choices)
    return {"target_ms": 1000 * cfg.per_token_limit_s, "lone_step_ms": 1000 * one, "planned_rps": carried / choices}


def machine() -> dict[str, Any]:
    """The machine the simulations ran on (they are single-threaded Python: its speed sets the wall time)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version()}


def load_average() -> float | None:
    """The 1-minute load average: how much else the shared cores were running."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def run(keys: list[str], workers: int, out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    known = {e.key for e in EXPERIMENTS}
    for section in ("experiments", "wall_s", "load_average_before"):
        # An experiment no longer defined has no table to fill: its numbers go.
        data[section] = {k: v for k, v in data.get(section, {}).items() if k in known}
    kept = [k for k in data["experiments"] if keys and k not in keys]
    if kept and data.get("workers") not in (None, workers):
        # The report states one worker count for every experiment's time.
        raise SystemExit(
            f"--workers {workers}: the {len(kept)} experiments kept from {out.name} ran with {data['workers']}; "
            f"re-run with --workers {data['workers']}, or every experiment (no --only)"
        )
    data["machine"] = machine()
    data["workers"] = workers
    data["profiles"] = [profile_numbers(p) for p in PROFILES]
    data["thesis_planner"] = planner_numbers(experiment("thesis-ramp"))
    for exp in EXPERIMENTS:
        if keys and exp.key not in keys:
            continue
        data["load_average_before"][exp.key] = load_average()
        started = time.perf_counter()
        print(f"{exp.key}: {exp.title}", file=sys.stderr)
        result = run_plan(plan_of(exp), workers, progress=lambda m: print(f"  {m}", file=sys.stderr))
        data["experiments"][exp.key] = result.to_json()
        data["wall_s"][exp.key] = round(time.perf_counter() - started, 1)
        print(f"  {data['wall_s'][exp.key]:.0f} s", file=sys.stderr)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")  # after each: a long run keeps what it finished
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[], help="experiment keys to run (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the experiments name their profiles and traces from the repository root, as the report does
    known = {e.key for e in EXPERIMENTS}
    unknown = [k for k in args.only if k not in known]
    if unknown:
        parser.error(f"unknown experiment(s) {', '.join(unknown)}; the keys: {', '.join(sorted(known))}")
    run(args.only, args.workers, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
