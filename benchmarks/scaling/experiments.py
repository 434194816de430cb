"""What the report runs, as data: each table is one ``python -m nlgsim run --protocol ...`` command.

An :class:`Experiment` is its key (:data:`ExperimentKey`), a title, and the arguments after
``python -m nlgsim run``; the runner parses those with the CLI's own parser, so the command the report
prints above a table is the one that made it. A run inside an experiment is a
:class:`nlgsim.protocol_result.RunKey` (policy, seed or window), here under :class:`RunKey`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import nlgsim.anchors
import nlgsim.planner_v1
import nlgsim.protocol
import nlgsim.protocol_result
from autoscaler.config import PlannerSpec

ExperimentKey = Literal[
    "thesis-step", "thesis-ramp", "thesis-warm-step", "thesis-cal-ramp",
    "thesis-tuning", "thesis-families", "thesis-cal-tuning", "thesis-cal-families",
    "trace-code-h100", "trace-conv-h100", "trace-conv-t4",
]  # fmt: skip

T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-derived.json"
T4CAL = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"
H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
CPU = "benchmarks/profiles/cpu-gpt2-fp32.json"
PROFILES = (T4, T4CAL, CPU, H100)
TRACES = "benchmarks/traces"
#: How the traces' prompts (up to 8,192 tokens) are fitted into GPT-2's 1,024: scaled by 1/8, the ratio
#: of GPT-2's window to the 8,192 tokens the traces' prompts fit in.
TRACE_LENGTHS = "scale:0.125"
RAMP_S = 200
WARMUP_S = 120
#: The planner's settings are chosen on these seeds and judged on seeds 0-9, which they never saw.
TUNING_SEED = 100
#: The planner's headrooms (``planner`` alone: the live default, ``scaler.planner.headroom``), in steps of
#: 0.05 from 0.3 to all of the capacity learned, so that the selection has a setting near wherever the
#: target falls (on the thesis's ramp, well below the default).
PLANNERS = ("planner", *(f"planner:{h / 100:g}" for h in range(30, 101, 5) if h / 100 != PlannerSpec.headroom))
#: The planner before attainment became its feedback (nlgsim/planner_v1.py), at the settings it shipped
#: with: a row beside ``planner`` wherever the planner is one, old against new.
PLANNER_V1 = nlgsim.planner_v1.NAME
#: The planner with no headroom (all of the capacity learned): what the default's margin buys, on the traces.
NO_HEADROOM = "planner:1"
#: The policies a user would pick instead, at their projects' documented defaults (nlgsim/anchors.py): a row
#: of every table that compares policies.
ANCHORS = tuple(nlgsim.anchors.ANCHORS)
FAMILIES = (
    "request:1000", "request:1500", "request:2000", "request:3000",
    "pertoken:20", "pertoken:22", "pertoken:25", "pertoken:30",
    *PLANNERS, PLANNER_V1, *ANCHORS, "fixed:3", "fixed:4",
)  # fmt: skip
#: The thesis protocol's own policies with ``planner-v1`` beside ``planner``.
THESIS_POLICIES = tuple(
    name for p in nlgsim.protocol.PROTOCOLS["thesis"].policies for name in ((p, PLANNER_V1) if p == "planner" else (p,))
)


def _policies(*names: str) -> tuple[str, ...]:
    return tuple(arg for name in names for arg in ("--policy", name))


def _pertoken(thresholds: tuple[int, ...], windows: tuple[int, ...] = (30, 60)) -> tuple[str, ...]:
    return tuple(f"pertoken:{t} w{w}" for w in windows for t in thresholds)


@dataclass(frozen=True)
class Experiment:
    key: ExperimentKey
    title: str
    args: tuple[str, ...]
    """After ``python -m nlgsim run``."""

    def command(self) -> str:
        """The shell command, one option a line."""
        parts = ["python -m nlgsim run"]
        args = list(self.args)
        while args:
            flag = args.pop(0)
            value = args.pop(0) if args and not args[0].startswith("--") else None
            if value is None:
                parts.append(flag)
            else:
                parts.append(f"{flag} {_quote(value)}")
        return " \\\n    ".join(parts)


def _quote(value: str) -> str:
    return f'"{value}"' if " " in value else value


@dataclass(frozen=True)
class RunKey:
    """One run of the report: an experiment's policy on one seed or window."""

    experiment: ExperimentKey
    run: nlgsim.protocol_result.RunKey

    def text(self) -> str:
        return f"{self.experiment}: {self.run.text()}"


def _thesis(key: ExperimentKey, title: str, profile: str, *extra: str) -> Experiment:
    return Experiment(key, title, ("--protocol", "thesis", "--profile", profile, "--workload", "complex:10", *extra))


def _trace(key: ExperimentKey, title: str, profile: str, trace: str, policies: tuple[str, ...]) -> Experiment:
    return Experiment(key, title, (
        "--protocol", "trace", "--profile", profile, "--workload", f"trace:{TRACES}/{trace}.csv",
        "--map-lengths", TRACE_LENGTHS, *_policies(*policies),
    ))  # fmt: skip


EXPERIMENTS: tuple[Experiment, ...] = (
    _thesis(
        "thesis-step", "Derived T4: 10 req/s from the first second (as the thesis describes it)", T4,
        *_policies(*THESIS_POLICIES),
    ),
    _thesis(
        "thesis-ramp", f"Derived T4: rising to 10 req/s over {RAMP_S} s", T4, "--ramp", str(RAMP_S),
        *_policies(*THESIS_POLICIES),
    ),
    _thesis(
        "thesis-warm-step", f"Derived T4: 10 req/s after {WARMUP_S} s at a quarter of one replica's capacity",
        T4, "--warmup", str(WARMUP_S), "--warmup-rate", "0.25x", *_policies(*THESIS_POLICIES),
    ),  # fmt: skip
    _thesis(
        "thesis-cal-ramp", f"Calibrated T4: rising to 10 req/s over {RAMP_S} s", T4CAL, "--ramp", str(RAMP_S),
        *_policies(*THESIS_POLICIES),
    ),
    _thesis(
        "thesis-tuning", f"Derived T4, rising over {RAMP_S} s: the planner's settings on seeds kept for tuning", T4,
        "--ramp", str(RAMP_S), "--seed", str(TUNING_SEED), *_policies(*PLANNERS, PLANNER_V1),
    ),
    _thesis(
        "thesis-families", f"Derived T4, rising over {RAMP_S} s: each policy family over its settings", T4,
        "--ramp", str(RAMP_S), *_policies(*FAMILIES),
    ),
    _thesis(
        "thesis-cal-tuning", f"Calibrated T4, rising over {RAMP_S} s: the planner's settings on seeds kept for "
        "tuning", T4CAL, "--ramp", str(RAMP_S), "--seed", str(TUNING_SEED), *_policies(*PLANNERS, PLANNER_V1),
    ),
    _thesis(
        "thesis-cal-families", f"Calibrated T4, rising over {RAMP_S} s: each policy family over its settings",
        T4CAL, "--ramp", str(RAMP_S), *_policies(*FAMILIES),
    ),  # fmt: skip
    _trace(
        "trace-code-h100", "azure2023_code on the measured H100", H100, "azure2023_code",
        ("planner", PLANNER_V1, NO_HEADROOM, *_pertoken((10, 15, 25)), "request:2000", "request:5000", *ANCHORS,
         "fixed:1", "fixed:2", "fixed:3"),
    ),  # fmt: skip
    _trace(
        "trace-conv-h100", "azure2023_conv on the measured H100", H100, "azure2023_conv",
        ("planner", PLANNER_V1, NO_HEADROOM, *_pertoken((10, 15, 25)), "request:10000", *ANCHORS, "fixed:1"),
    ),  # fmt: skip
    _trace(
        "trace-conv-t4", "azure2023_conv on the derived T4", T4, "azure2023_conv",
        ("planner", PLANNER_V1, NO_HEADROOM, *_pertoken((25, 30, 40)), "request:10000", "request:20000",
         *ANCHORS, "fixed:2", "fixed:3", "fixed:4"),
    ),  # fmt: skip
)


def experiment(key: str) -> Experiment:
    for e in EXPERIMENTS:
        if e.key == key:
            return e
    raise KeyError(f"no experiment {key!r}; the keys: {', '.join(get_args(ExperimentKey))}")
