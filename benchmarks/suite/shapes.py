"""The workload suite, split in two: the one file that says which shape is in which set.

``tune``: the only shapes any default may be chosen on (the planner's ``headroom`` among them). ``test``:
reported apart, first, and never used to choose. Each shape is a set of ``python -m nlgsim run --protocol
trace`` arguments on the measured H100 profile; the suite runs this project's policies at their defaults,
the anchors at theirs and the fixed fleets around the best one on each (:mod:`benchmarks.suite.runner`).

The shapes cover the classes of traffic a fleet meets, each class in both sets with other traces, scales,
jitters or seeds: the Azure traces as recorded and at fleet scale (x10, x30, x100: tens of replicas), their
copies 2 s or 15 s apart, time-warped (``--speed``: swings and bursts twice or half as long), arrivals in
groups at one instant (``--group``), a long-prompt mix (``--map-lengths clip``: prompts at the context,
short outputs, some infeasible even alone) and a day (``--day``: the rate from x3 at night to x30 at noon,
the day's 24 hours passing in ``DAY_S`` of replay, where a fleet fixed for the peak pays for the night).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Split = Literal["tune", "test"]
SPLITS: tuple[Split, ...] = ("test", "tune")

PROFILE = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
TRACES = "benchmarks/traces"
#: GPT-2's 1,024-token context against the traces' prompts of up to 8,192 (benchmarks/traces/README.md).
SCALED = ("--map-lengths", "scale:0.125")
#: Prompts kept as long as the context allows: most at the context, outputs as recorded.
CLIPPED = ("--map-lengths", "clip")
#: A day's 24 hours in two hours of replay: the curve is compressed, not the trace (nlgsim.workload.DayCurve).
DAY_S = 7200
#: Fleet-scale shapes of an hour's trace are cut into this many windows (the trace protocol's default) ...
WINDOWS = 4
#: ... and at x100 half an hour in two windows, the rest of the hour simulating nothing new.
X100 = ("--duration", "1860", "--windows", "2")


@dataclass(frozen=True)
class Shape:
    name: str
    split: Split
    summary: str
    args: tuple[str, ...]
    """After ``python -m nlgsim run --protocol trace --profile PROFILE``, without policies."""
    day: bool = False
    """Judged as a day: at most :data:`DAY_X_FIXED` of the best fixed fleet's GPU-seconds."""


#: On a day the goal is a saving, not a tie: at most this share of the best fixed fleet's GPU-seconds.
DAY_X_FIXED = 0.6


def _trace(name: str, *args: str) -> tuple[str, ...]:
    return ("--workload", f"trace:{TRACES}/azure2023_{name}.csv", *args)


def _scaled(trace: str, scale: int, jitter: float, seed: int, *extra: str) -> tuple[str, ...]:
    copies = ("--scale", str(scale), "--scale-jitter", f"{jitter:g}", "--scale-seed", str(seed)) if scale > 1 else ()
    return (*_trace(trace), *SCALED, *copies, *extra)


SHAPES: tuple[Shape, ...] = (
    # -- tune ------------------------------------------------------------------------------------------
    Shape("conv x1", "tune", "azure2023_conv as recorded", _scaled("conv", 1, 0, 0)),
    Shape("code x1", "tune", "azure2023_code as recorded", _scaled("code", 1, 0, 0)),
    Shape("conv x10", "tune", "copies 2 s apart", _scaled("conv", 10, 2, 0)),
    Shape("code x10", "tune", "copies 2 s apart", _scaled("code", 10, 2, 0)),
    Shape("conv x30", "tune", "copies 2 s apart", _scaled("conv", 30, 2, 0)),
    Shape("code x30", "tune", "copies 15 s apart", _scaled("code", 30, 15, 1)),
    Shape("conv x100", "tune", "copies 15 s apart, the first half hour", _scaled("conv", 100, 15, 1, *X100)),
    Shape("conv x10, slow", "tune", "swings twice as long", _scaled("conv", 10, 2, 2, "--speed", "0.5")),
    Shape("code x10, fast", "tune", "bursts half as long", _scaled("code", 10, 2, 2, "--speed", "2")),
    Shape("conv grouped", "tune", "as recorded, prompts at the context, in groups every 3 s",
          (*_trace("conv"), *CLIPPED, "--group", "3")),  # fmt: skip
    Shape("code long prompts", "tune", "x10, prompts at the context", (*_trace("code"), *CLIPPED, "--scale", "10")),
    Shape("conv day", "tune", f"x3 to x30 over a day in {DAY_S // 3600} h", _scaled(
        "conv", 1, 0, 0, "--day", "3:30", "--day-length", str(DAY_S), "--scale-jitter", "2", "--windows", "1",
    ), day=True),  # fmt: skip
    # -- test ------------------------------------------------------------------------------------------
    Shape("conv x10, 15 s", "test", "copies 15 s apart", _scaled("conv", 10, 15, 7)),
    Shape("code x10, 15 s", "test", "copies 15 s apart", _scaled("code", 10, 15, 7)),
    Shape("conv x30, 15 s", "test", "copies 15 s apart", _scaled("conv", 30, 15, 7)),
    Shape("code x30, 2 s", "test", "copies 2 s apart", _scaled("code", 30, 2, 7)),
    Shape("code x100", "test", "copies 2 s apart, the first half hour", _scaled("code", 100, 2, 3, *X100)),
    Shape("conv x10, fast", "test", "swings half as long", _scaled("conv", 10, 15, 5, "--speed", "2")),
    Shape("code x10, slow", "test", "bursts twice as long", _scaled("code", 10, 15, 5, "--speed", "0.5")),
    Shape("code grouped", "test", "as recorded, in groups every 5 s", _scaled("code", 1, 0, 0, "--group", "5")),
    Shape("conv long prompts", "test", "x10, prompts at the context",
          (*_trace("conv"), *CLIPPED, "--scale", "10", "--scale-jitter", "15", "--scale-seed", "6")),  # fmt: skip
    Shape("code day", "test", f"x3 to x30 over a day in {DAY_S // 3600} h", _scaled(
        "code", 1, 0, 0, "--day", "3:30", "--day-length", str(DAY_S), "--scale-jitter", "15", "--scale-seed", "8",
        "--windows", "1",
    ), day=True),  # fmt: skip
)


def shape(name: str) -> Shape:
    for s in SHAPES:
        if s.name == name:
            return s
    raise ValueError(f"no shape {name!r}: one of {', '.join(s.name for s in SHAPES)}")
