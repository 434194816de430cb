"""What one replica carries within a per-token target, modelled from its engine profile alone.

With B choices running, each of k tokens, c choices a request and prompts of p tokens, a step costs
the decode step plus its share of prefill work, s(B) = decode(B, p + k/2) + B * P(p) / (c * k), and a
choice's per-token latency is about s(B). The largest B with s(B) within a target gives the load one
replica carries within it: B / (k * s(B)) choices per second. The planner plans with it.
"""

from __future__ import annotations

from autoscaler.profile import EngineProfile


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


def fastest_token_s(profile: EngineProfile) -> float:
    """The fastest token one idle replica makes: a decode step of one sequence at the shortest context
    the profile measured. No per-token latency, and no window mean of one, falls below it."""
    return profile.decode_step_s(1, profile.decode_context[0])


def idle_per_token_s(profile: EngineProfile, prompt: float, tokens: float) -> float:
    """Per-token latency of a request of ``prompt`` and ``tokens`` alone on an idle replica: its
    prefill, then one-sequence decode steps, over its tokens."""
    n = max(tokens, 1.0)
    prefill = profile.prefill_time_s(max(1, round(prompt)))
    return (prefill + (n - 1) * profile.decode_step_s(1, prompt + n / 2)) / n
