"""What one replica can carry: measured by simulation, and modelled from the profile alone.

``saturation_rate`` is the throughput of one replica with an endless queue (requests per second),
the unit in which workload rates are stated ("2.4x one replica's capacity").

``step_estimate``, ``slo_batch`` and ``choices_per_second`` are the closed-form model the planner
plans with; they live in :mod:`autoscaler.capacity` (the live planner's) and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.capacity import choices_per_second, slo_batch, step_estimate
from nlgsim.profile import EngineProfile
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import Request

__all__ = ["choices_per_second", "saturation_rate", "slo_batch", "step_estimate"]


def saturation_rate(profile: EngineProfile, sample: Sequence[Request], count: int = 400) -> float:
    """Requests per second one replica completes with a full queue of requests like ``sample``.

    ``count`` requests (``sample`` repeated in order) all arrive at time 0; the rate is measured between
    the 20% and the 80% completion marks, away from the start (an empty batch) and the tail (a draining one).
    """
    if not sample:
        raise ValueError("saturation_rate needs at least one sample request")
    backlog = [replace(sample[i % len(sample)], id=i, arrival=0.0) for i in range(count)]
    log = simulate(Scenario(profile, backlog, policy=None, initial_replicas=1))
    finish = sorted(s.finish for s in log.states)
    lo, hi = int(0.2 * count), int(0.8 * count)
    return (hi - lo) / (finish[hi] - finish[lo])
