"""What one replica can carry: measured by simulation, and modelled from the profile alone.

``saturation_rate`` is the throughput of one replica with an endless queue (requests per second),
the unit in which workload rates are stated ("2.4x one replica's capacity").

``slo_batch`` and ``choices_per_second`` are the closed-form model the project's policy plans with:
with B choices running, each of k tokens, c choices a request and prompts of p tokens, a step costs
the decode step plus its share of prefill work, s(B) = decode(B, p + k/2) + B * P(p) / (c * k), and a
choice's per-token latency is about s(B). The largest B with s(B) within a target gives the load one
replica carries within it: B / (k * s(B)) choices per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from nlgsim.profile import EngineProfile
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import Request


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


def step_estimate(profile: EngineProfile, batch: int, prompt: float, tokens: float, choices: float) -> float:
    """s(B): seconds per decode step including the prefill work the batch's turnover brings in."""
    decode = profile.decode_step_s(batch, prompt + tokens / 2)
    return decode + batch * profile.prefill_time_s(max(1, round(prompt))) / (choices * max(tokens, 1.0))


def slo_batch(profile: EngineProfile, target_s: float, prompt: float, tokens: float, choices: float) -> int:
    """The largest batch whose step estimate is within ``target_s`` (at least 1)."""
    best = 1
    for b in range(1, profile.max_batch + 1):
        if step_estimate(profile, b, prompt, tokens, choices) <= target_s:
            best = b
    return best


def choices_per_second(
    profile: EngineProfile, target_s: float, prompt: float, tokens: float, choices: float
) -> float:
    """Choices per second one replica finishes while its per-token latency stays near ``target_s``."""
    b = slo_batch(profile, target_s, prompt, tokens, choices)
    return b / (max(tokens, 1.0) * step_estimate(profile, b, prompt, tokens, choices))
