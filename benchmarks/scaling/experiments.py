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
import nlgsim.protocol_result

ExperimentKey = Literal[
    "thesis-step", "thesis-ramp", "thesis-warm-step", "thesis-cal-ramp",
    "thesis-tuning", "thesis-families", "thesis-cal-tuning", "thesis-cal-families",
    "trace-code-h100", "trace-conv-h100", "trace-conv-t4",
    "trace-code-h100-x10", "trace-conv-h100-x10", "trace-conv-h100-x30", "trace-code-h100-x30",
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
#: The planner's plan fractions (``planner`` alone: the live default), in steps of 0.05 up to 0.9 so that the
#: selection has a setting near wherever the target falls.
PLANNERS = (
    "planner", "planner:0.65", "planner:0.7", "planner:0.75", "planner:0.8", "planner:0.85", "planner:0.9",
    "planner:1",
)  # fmt: skip
#: The policies a user would pick instead, at their projects' documented defaults (nlgsim/anchors.py): a row
#: of every table that compares policies.
ANCHORS = tuple(nlgsim.anchors.ANCHORS)
FAMILIES = (
    "request:1000", "request:1500", "request:2000", "request:3000",
    "pertoken:20", "pertoken:22", "pertoken:25", "pertoken:30",
    *PLANNERS, *ANCHORS, "fixed:3", "fixed:4",
)  # fmt: skip


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


def _trace(
    key: ExperimentKey, title: str, profile: str, trace: str, policies: tuple[str, ...], scale: int = 1
) -> Experiment:
    return Experiment(key, title, (
        "--protocol", "trace", "--profile", profile, "--workload", f"trace:{TRACES}/{trace}.csv",
        "--map-lengths", TRACE_LENGTHS, *(("--scale", str(scale)) if scale > 1 else ()), *_policies(*policies),
    ))  # fmt: skip


#: What every fleet-scale table compares: the project's policies and the anchors at their defaults
#: (nlgsim/anchors.py); each experiment adds the fixed fleets around its best one, so the best fixed
#: fleet in hindsight (the fewest replicas reaching the target) is one of its rows.
FLEET = ("planner", "pertoken:15 w30", *ANCHORS)
#: The lagged oracle (nlgsim/lagged.py) holding each need two, five and ten start-ups of the H100 profile: from
#: letting replicas go between bursts to the planner's burst lookback. A reference of what reacting to exactly
#: measured need reaches, beside the fixed fleets in every fleet-scale table.
LAGGED = ("lagged:120", "lagged:300", "lagged:600")
#: The planner measuring over a longer window than the autoscaler's default: an approach tried on the rows
#: not met, where the noise of what it measures, which its holds keep the highest of, costs replicas.
LONG_WINDOW = "planner w120"
#: The planner over windows shorter and longer than its default, on the rows where the windows were tried:
#: whether a window meets a row alone or with the windows around it says whether the row is met by a
#: setting or by a margin.
WINDOWS = ("planner w30", "planner w90", LONG_WINDOW, "planner w180")


EXPERIMENTS: tuple[Experiment, ...] = (
    _thesis("thesis-step", "Derived T4: 10 req/s from the first second (as the thesis describes it)", T4),
    _thesis("thesis-ramp", f"Derived T4: rising to 10 req/s over {RAMP_S} s", T4, "--ramp", str(RAMP_S)),
    _thesis(
        "thesis-warm-step", f"Derived T4: 10 req/s after {WARMUP_S} s at a quarter of one replica's capacity",
        T4, "--warmup", str(WARMUP_S), "--warmup-rate", "0.25x",
    ),  # fmt: skip
    _thesis("thesis-cal-ramp", f"Calibrated T4: rising to 10 req/s over {RAMP_S} s", T4CAL, "--ramp", str(RAMP_S)),
    _thesis(
        "thesis-tuning", f"Derived T4, rising over {RAMP_S} s: the planner's settings on seeds kept for tuning", T4,
        "--ramp", str(RAMP_S), "--seed", str(TUNING_SEED), *_policies(*PLANNERS),
    ),
    _thesis(
        "thesis-families", f"Derived T4, rising over {RAMP_S} s: each policy family over its settings", T4,
        "--ramp", str(RAMP_S), *_policies(*FAMILIES),
    ),
    _thesis(
        "thesis-cal-tuning", f"Calibrated T4, rising over {RAMP_S} s: the planner's settings on seeds kept for "
        "tuning", T4CAL, "--ramp", str(RAMP_S), "--seed", str(TUNING_SEED), *_policies(*PLANNERS),
    ),
    _thesis(
        "thesis-cal-families", f"Calibrated T4, rising over {RAMP_S} s: each policy family over its settings",
        T4CAL, "--ramp", str(RAMP_S), *_policies(*FAMILIES),
    ),  # fmt: skip
    _trace(
        "trace-code-h100", "azure2023_code on the measured H100", H100, "azure2023_code",
        ("planner", "planner:0.9", "planner s600", *WINDOWS, *_pertoken((10, 15, 25)), "request:2000",
         "request:5000", *ANCHORS, *LAGGED, "fixed:1", "fixed:2", "fixed:3"),
    ),  # fmt: skip
    _trace(
        "trace-conv-h100", "azure2023_conv on the measured H100", H100, "azure2023_conv",
        ("planner", "planner:0.9", "planner s600", LONG_WINDOW, *_pertoken((10, 15, 25)), "request:10000", *ANCHORS,
         *LAGGED, "fixed:1"),
    ),  # fmt: skip
    _trace(
        "trace-conv-t4", "azure2023_conv on the derived T4", T4, "azure2023_conv",
        ("planner", "planner:0.9", "planner s600", *_pertoken((25, 30, 40)), "request:10000", "request:20000",
         *ANCHORS, "fixed:2", "fixed:3", "fixed:4"),
    ),  # fmt: skip
    _trace(
        "trace-code-h100-x10", "azure2023_code x10 on the measured H100", H100, "azure2023_code",
        (*FLEET, *WINDOWS, *LAGGED, *(f"fixed:{n}" for n in range(3, 13))), scale=10,
    ),  # fmt: skip
    _trace(
        "trace-conv-h100-x10", "azure2023_conv x10 on the measured H100", H100, "azure2023_conv",
        (*FLEET, "planner:0.9", *WINDOWS, *LAGGED, *(f"fixed:{n}" for n in range(2, 7))), scale=10,
    ),  # fmt: skip
    _trace(
        "trace-conv-h100-x30", "azure2023_conv x30 on the measured H100", H100, "azure2023_conv",
        (*FLEET, *WINDOWS, *LAGGED, *(f"fixed:{n}" for n in range(4, 13))), scale=30,
    ),  # fmt: skip
    _trace(
        "trace-code-h100-x30", "azure2023_code x30 on the measured H100", H100, "azure2023_code",
        (*FLEET, LONG_WINDOW, *LAGGED, *(f"fixed:{n}" for n in range(16, 29))), scale=30,
    ),  # fmt: skip
)


def experiment(key: str) -> Experiment:
    for e in EXPERIMENTS:
        if e.key == key:
            return e
    raise KeyError(f"no experiment {key!r}; the keys: {', '.join(get_args(ExperimentKey))}")
