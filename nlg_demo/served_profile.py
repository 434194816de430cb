"""The planner's engine profile for the demo: the engine's own timing plus what serving adds, here, now.

The engine part comes from a profile file: the one shipped beside this module (``SHIPPED``, the tiny
instance the demo serves, measured in-process by ``python -m nlgsim profile`` with the command in its
``notes``), one the user names, or one measured on this machine before the demo starts
(:func:`measure_engine_profile`, ``nlg-demo --profile-first``). On the tiny model the engine's step is
the smaller part of what a client waits for: tritonserver, the Python stub and the gRPC stream add
more per step than the forward pass costs, and how much depends on the machine and its load at the
time. So the demo times a few lone requests on the live server and adds the difference
(:func:`fit_overhead`, the method of ``benchmarks/sim_to_real.py``) and the server's measured start-up
to the profile (:func:`served_profile`); the planner plans with that.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

from autoscaler.capacity import choices_per_second
from autoscaler.config import PlannerSpec
from autoscaler.planner import planner_config
from autoscaler.profile import EngineProfile
from nlg_demo.load import LoadRecord, Mix

SHIPPED: Final = Path(__file__).with_name("tiny-cpu-profile.json")
#: Sweeps over the grid when measuring: the minimum over many survives other work on a shared machine.
PROFILE_REPS: Final = 15


def profile_command(preset: str, max_num_seqs: int, out: Path, reps: int = PROFILE_REPS) -> list[str]:
    """The command that measures an engine profile of the instance the demo serves."""
    return [
        sys.executable, "-m", "nlgsim", "profile", "--preset", preset,
        "--max-num-seqs", str(max_num_seqs), "--reps", str(reps), "--out", str(out),
    ]  # fmt: skip


def measure_engine_profile(
    preset: str, max_num_seqs: int, out: Path, project_root: Path, reps: int = PROFILE_REPS
) -> Path:
    """Runs :func:`profile_command` from the project's checkout (``nlgsim`` lives there); its progress
    goes to stderr."""
    out.parent.mkdir(parents=True, exist_ok=True)
    command = profile_command(preset, max_num_seqs, out.resolve(), reps)
    done = subprocess.run(command, cwd=project_root, check=False)
    if done.returncode != 0:
        raise SystemExit(f"nlg-demo: measuring the engine profile failed (exit {done.returncode}); see above")
    return out


def mismatches(profile: EngineProfile, preset: str, max_num_seqs: int) -> list[str]:
    """How ``profile`` differs from the instance the demo serves (empty: it describes that instance)."""
    found = []
    if profile.preset != preset:
        found.append(f"preset {profile.preset!r}, the demo serves {preset!r}")
    if profile.max_batch != max_num_seqs:
        found.append(f"max_batch {profile.max_batch}, the demo runs --max-num-seqs {max_num_seqs}")
    return found


@dataclass(frozen=True)
class Overhead:
    """Seconds serving adds to the engine: on each prompt, on each decode step, per sequence in a step."""

    first_token_s: float
    step_s: float
    per_sequence_s: float


def _prompt_tokens(record: LoadRecord) -> int:
    return max(record.prompt_tokens, 1)


def fit_overhead(profile: EngineProfile, lone: Sequence[LoadRecord]) -> Overhead:
    """Serving overhead from requests that each ran alone on the server.

    A lone request of ``c`` choices decodes as a batch of ``c``; after its first response, each of its
    ``max_tokens - 1`` steps took the engine ``decode_step_s(c, context)``, and the rest of the time
    between responses is serving. Its medians per batch size, fitted to ``step_s + per_sequence_s x c``
    over the smallest and the largest batch, give the decode overhead; the first response after the
    prefill the profile predicts gives ``first_token_s``. Negative gaps (a profile slower than this
    machine) count as 0. Raises ``ValueError`` without a complete lone request to fit.
    """
    usable = [r for r in lone if r.complete and r.first is not None and r.end is not None and r.max_tokens > 1]
    if not usable:
        raise ValueError("no complete lone request to measure the serving overhead from")
    gaps: dict[int, list[float]] = {}
    first_gaps = []
    for r in usable:
        assert r.first is not None and r.end is not None  # filtered above; for the type checker
        context = _prompt_tokens(r) + r.max_tokens / 2
        per_step = (r.end - r.first) / (r.max_tokens - 1)
        gaps.setdefault(r.choices, []).append(per_step - profile.decode_step_s(r.choices, context))
        first_gaps.append(r.first - r.start - profile.prefill_time_s(_prompt_tokens(r)))
    small, large = min(gaps), max(gaps)
    gap_small, gap_large = statistics.median(gaps[small]), statistics.median(gaps[large])
    per_sequence = max((gap_large - gap_small) / (large - small), 0.0) if large > small else 0.0
    return Overhead(
        first_token_s=max(statistics.median(first_gaps), 0.0),
        step_s=max(gap_small - per_sequence * small, 0.0),
        per_sequence_s=per_sequence,
    )


def served_profile(engine: EngineProfile, overhead: Overhead, startup_s: float, engine_path: Path) -> EngineProfile:
    """``engine`` plus the serving overhead and this server's start-up: what one served instance does."""
    served = engine.with_overhead(
        first_token_s=overhead.first_token_s, step_s=overhead.step_s, per_sequence_s=overhead.per_sequence_s
    )
    return replace(
        served,
        source="derived",
        startup_s=round(startup_s, 3),
        notes=(
            f"nlg-demo: {engine_path} (engine, {engine.hardware}) plus the serving overhead and start-up "
            "measured on the live tritonserver with lone requests (nlg_demo/served_profile.py)."
        ),
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={
            "engine_profile": str(engine_path),
            "engine_measured_at": engine.measured_at,
            "serving_overhead_s": {
                "first_token": round(overhead.first_token_s, 6),
                "step": round(overhead.step_s, 6),
                "per_sequence": round(overhead.per_sequence_s, 6),
            },
            "startup_measured_as": "tritonserver start to ready, this run",
        },
    )


def calibrated(
    served: EngineProfile, per_replica: float, spec: PlannerSpec, mix: Mix
) -> tuple[EngineProfile, float]:
    """``served`` with the decode-step overhead at which the planner counts ``per_replica`` choices per
    second for one replica of the load's ``mix`` (the capacity measured here, where instances share the
    cores), and that overhead in seconds. A profile that already counts no more is returned as it is, with 0."""
    target_s = planner_config(spec, served).per_token_limit_s

    def planned(extra_s: float) -> float:
        profile = served.with_overhead(step_s=extra_s)
        return choices_per_second(profile, target_s, mix.prompt_tokens, mix.output_tokens, mix.choices)

    if planned(0.0) <= per_replica:
        return served, 0.0
    low, high = 0.0, target_s
    while planned(high) > per_replica:  # at a step as long as the target, a replica carries little
        low, high = high, 2 * high
    for _ in range(40):  # the capacity falls as the step grows: bisect to well under a microsecond
        middle = (low + high) / 2
        low, high = (middle, high) if planned(middle) > per_replica else (low, middle)
    extra = served.with_overhead(step_s=high)
    return replace(extra, extra={**served.extra, "calibrated_step_s": round(high, 6)}), high
