"""The lagged oracle (``lagged:H``): a reference for what scaling on exactly measured need can reach.

No metric tells a scaler how many replicas an interval needed; the oracle (:mod:`nlgsim.oracle`)
knows, by simulating each interval's requests. ``lagged:H`` is a scaler that is told that count, but
only once the interval is over, as any measurement is: each round it asks for the most replicas the
oracle found needed over the intervals that ended within the last ``H`` seconds, and the pods it adds
serve one start-up later, as every policy's do. It has no error of measurement or model, so where no
hold meets a goal, measuring the need better does not either: what is left is the start-up against
the load's changes (bursts shorter than a start-up, whole replicas), or predicting them. It reads the
oracle, which no deployed scaler can, so it is a reference row of the report, never a policy of this
project, never on a table's front and never the cheapest at the target.

It reads the oracle on the trace's clock, so a window opens with the needs of the minutes before it in
hand, which a policy starting on the window's warm-up has not seen: that history is in its favour.

``H`` is how long a need is held: a short one lets replicas go between bursts and meets the next burst
a start-up late; a long one holds the peak through the gaps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from autoscaler.decide import Decision, bounds
from nlgsim.policy import Policy

NAME = "lagged"


@dataclass(frozen=True)
class OracleCounts:
    """What ``lagged:H`` replays: the oracle's replicas for each interval of ``interval_s`` from trace
    time 0, and the trace time of the run's time 0."""

    needed: tuple[int, ...]
    interval_s: float
    offset: float = 0.0


@dataclass(frozen=True)
class LaggedState:
    replicas: int

    @classmethod
    def initial(cls, replicas: int, now: float) -> LaggedState:
        return cls(replicas)

    def with_replicas(self, replicas: int) -> LaggedState:
        return replace(self, replicas=replicas)


def held_need(needed: Sequence[int], interval_s: float, t: float, hold_s: float) -> tuple[int, int] | None:
    """The most replicas ``needed`` (one count per interval of ``interval_s`` from trace time 0) over the
    intervals that ended in ``(t - hold_s, t]``, and the index of the latest interval holding it; None
    before the first interval has ended."""
    last = min(math.floor(t / interval_s + 1e-9), len(needed)) - 1
    if last < 0:
        return None
    first = max(math.floor((t - hold_s) / interval_s + 1e-9), 0)
    first = min(first, last)
    window = range(first, last + 1)
    most = max(needed[i] for i in window)
    return most, max(i for i in window if needed[i] == most)


def lagged_policy(spec: ScalerSpec, name: str, hold_s: float, oracle: OracleCounts) -> Policy:
    """``lagged:H``: each round the most replicas ``oracle`` needed over the last ``hold_s`` seconds' intervals."""
    counts, interval_s, offset = oracle.needed, oracle.interval_s, oracle.offset

    def decide(window: WindowStats, spec: ScalerSpec, state: LaggedState, now: float) -> tuple[Decision, LaggedState]:
        current = state.replicas
        found = held_need(counts, interval_s, offset + now, hold_s)
        if found is None:
            return Decision(current, current, True, f"no interval over yet: holding {current}"), state
        most, index = found
        desired = bounds(most, spec)
        reason = (
            f"the oracle needed {most} in the interval from {index * interval_s:g} s, the most of those ended "
            f"within {hold_s:g} s: {current} -> {desired}"
        )
        return Decision(desired, current, True, reason, {"needed": float(most)}), LaggedState(desired)

    return Policy(name, spec, decide, LaggedState.initial)
