"""A mix's prefill cost in the capacity model: P averaged over the prompt lengths of the mix, not P at
their mean, whose error grows with the bend in the profile's prefill curve."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.capacity import PROMPT_QUANTILES, choices_per_second, exponential_lengths, mean_prefill_s
from autoscaler.profile import load_profile

ROOT = Path(__file__).parents[2]
H100 = load_profile(ROOT / "benchmarks" / "profiles" / "h100-gpt2-xl-fp16.json")


def curve(tokens: tuple[int, ...], seconds: tuple[float, ...], context: int = 100_000):
    return replace(H100, prefill_tokens=tokens, prefill_s=seconds, max_context=context)


def test_the_lengths_are_an_exponentials_quantiles_with_the_mean_clipped_to_the_context():
    lengths = exponential_lengths(curve((1, 2), (0.1, 0.2)), 300)
    assert len(lengths) == PROMPT_QUANTILES and lengths == sorted(lengths)
    assert sum(lengths) / len(lengths) == pytest.approx(300, rel=0.03)
    assert max(exponential_lengths(H100, 300)) == H100.max_context
    assert min(exponential_lengths(H100, 0.2)) == 1


def test_a_straight_prefill_curve_costs_what_the_mean_prompt_costs():
    straight = curve((1, 10_000), (0.001, 10.0))  # 1 ms a token
    assert mean_prefill_s(straight, 300) == pytest.approx(straight.prefill_time_s(300), rel=0.03)
    flat = curve((1, 10_000), (0.02, 0.02))
    assert mean_prefill_s(flat, 300) == pytest.approx(0.02)


def test_a_curve_flat_for_one_chunk_then_rising_costs_more_than_the_mean_prompt():
    # 20 ms up to 256 tokens, then 0.08 ms a token: for exponential lengths of mean m the exact mean is
    # 20 ms + 0.08 ms * m * exp(-256 / m).
    bent = curve((1, 256, 10_256), (0.020, 0.020, 0.820))
    exact = 0.020 + 0.00008 * 256 * math.exp(-1)
    assert mean_prefill_s(bent, 256) == pytest.approx(exact, rel=0.02)
    assert mean_prefill_s(bent, 256) > 1.3 * bent.prefill_time_s(256)
    assert mean_prefill_s(bent, 256, spread=False) == bent.prefill_time_s(256)


def test_the_spread_lowers_what_a_replica_carries_of_a_prefill_heavy_mix():
    # The H100's curve bends at one chunk: code-like mixes (long prompts, short outputs) lose the most.
    short_outputs = choices_per_second(H100, 0.03, 256, 28, 1) / choices_per_second(
        H100, 0.03, 256, 28, 1, spread=False
    )
    long_outputs = choices_per_second(H100, 0.03, 144, 211, 1) / choices_per_second(
        H100, 0.03, 144, 211, 1, spread=False
    )
    assert short_outputs < long_outputs <= 1.0
    assert short_outputs < 0.85
