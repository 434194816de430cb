"""What one replica carries within a per-token target, modelled from its engine profile alone.

With B choices running, each of k tokens, c choices a request and prompts of p tokens, a step costs
the decode step plus its share of prefill work, s(B) = decode(B, p + k/2) + B * P̄(p) / (c * k), and a
choice's per-token latency is about s(B). The largest B with s(B) within a target gives the load one
replica carries within it: B / (k * s(B)) choices per second. The planner plans with it.

P̄(p) is a prompt's prefill time averaged over the prompt lengths of a mix whose mean is p
(:func:`mean_prefill_s`), not P at the mean: the profile's prefill curve P is flat up to about one
chunk and rises after it, so the long prompts of a mix cost more than its short ones save, and P at the
mean understates what the mix costs (``benchmarks/capacity_model.md`` measures the model against the
simulated replica). All that is known of the lengths is their mean, so they are taken as exponential,
the maximum-entropy distribution of a positive length with a known mean.
"""

from __future__ import annotations

import math

from autoscaler.profile import EngineProfile

#: Mid-quantiles of the exponential distribution of prompt lengths that a mix's mean prefill time
#: averages over: enough that the mean moves by well under 1% with more.
PROMPT_QUANTILES = 32


def exponential_lengths(profile: EngineProfile, mean: float) -> list[int]:
    """Lengths standing for a mix's prompts (or outputs) whose mean is ``mean`` tokens: the mid-quantiles
    of an exponential distribution with that mean, each at least one token and at most the context."""
    return [
        min(max(1, round(-mean * math.log(1 - (i + 0.5) / PROMPT_QUANTILES))), profile.max_context)
        for i in range(PROMPT_QUANTILES)
    ]


def mean_prefill_s(profile: EngineProfile, prompt: float, spread: bool = True) -> float:
    """P̄(p): a request's prefill time in a mix whose mean prompt is ``prompt`` tokens, averaged over
    :func:`exponential_lengths`; with ``spread=False``, P at the mean (every prompt that long)."""
    if not spread:
        return profile.prefill_time_s(max(1, round(prompt)))
    lengths = exponential_lengths(profile, prompt)
    return sum(profile.prefill_time_s(n) for n in lengths) / len(lengths)


def _step(profile: EngineProfile, batch: int, prompt: float, tokens: float, choices: float, prefill: float) -> float:
    return profile.decode_step_s(batch, prompt + tokens / 2) + batch * prefill / (choices * max(tokens, 1.0))


def step_estimate(
    profile: EngineProfile, batch: int, prompt: float, tokens: float, choices: float, spread: bool = True
) -> float:  # fmt: skip
    """s(B): seconds per decode step including the prefill work the batch's turnover brings in."""
    return _step(profile, batch, prompt, tokens, choices, mean_prefill_s(profile, prompt, spread))


def _slo_batch(
    profile: EngineProfile, target_s: float, prompt: float, tokens: float, choices: float, prefill: float
) -> int:
    best = 1
    for b in range(1, profile.max_batch + 1):
        if _step(profile, b, prompt, tokens, choices, prefill) <= target_s:
            best = b
    return best


def slo_batch(
    profile: EngineProfile, target_s: float, prompt: float, tokens: float, choices: float, spread: bool = True
) -> int:  # fmt: skip
    """The largest batch whose step estimate is within ``target_s`` (at least 1)."""
    return _slo_batch(profile, target_s, prompt, tokens, choices, mean_prefill_s(profile, prompt, spread))


def choices_per_second(
    profile: EngineProfile, target_s: float, prompt: float, tokens: float, choices: float, spread: bool = True
) -> float:
    """Choices per second one replica finishes while its per-token latency stays near ``target_s``.

    ``spread=False`` plans every request at the mean prompt (P at the mean), as a planner that
    interpolates its profile at the mean input length does (the Dynamo anchor)."""
    prefill = mean_prefill_s(profile, prompt, spread)
    b = _slo_batch(profile, target_s, prompt, tokens, choices, prefill)
    return b / (max(tokens, 1.0) * _step(profile, b, prompt, tokens, choices, prefill))


def fastest_token_s(profile: EngineProfile) -> float:
    """The fastest token one idle replica makes: a decode step of one sequence at the context the
    profile measured fastest (not always the shortest: on a GPU the contexts of one sequence cost about
    the same, and which is fastest is down to the kernels). No per-token latency, and no window mean of
    one, falls below it."""
    return min(profile.decode_step_s(1, c) for c in profile.decode_context)


def idle_per_token_s(profile: EngineProfile, prompt: float, tokens: float) -> float:
    """Per-token latency of a request of ``prompt`` and ``tokens`` alone on an idle replica: its
    prefill, then one-sequence decode steps, over its tokens."""
    n = max(tokens, 1.0)
    prefill = profile.prefill_time_s(max(1, round(prompt)))
    return (prefill + (n - 1) * profile.decode_step_s(1, prompt + n / 2)) / n
