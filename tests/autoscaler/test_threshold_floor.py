"""A per-token threshold below what one idle replica gives: said by --check and in every decision."""

from __future__ import annotations

from pathlib import Path

import pytest
from autoscaler_testkit import window

from autoscaler.capacity import fastest_token_s, idle_per_token_s
from autoscaler.cli import main
from autoscaler.config import ScalerSpec
from autoscaler.decide import PolicyState
from autoscaler.policy import floor_note, hpa_policy
from autoscaler.profile import load_profile

ROOT = Path(__file__).parents[2]
H100 = ROOT / "benchmarks" / "profiles" / "h100-gpt2-xl-fp16.json"
# The measured profile's fastest one-sequence step, as the notes print it.
FASTEST_MS = f"{min(load_profile(H100).decode_s[0]) * 1000:.3g} ms"


def _mix(prompt: float, tokens: float, finished: float = 10.0):
    win = window(pertoken_ms=30)
    counters = {"finished": finished, "prompt_tokens": prompt * finished, "generation_tokens": tokens * finished}
    return type(win)(win.latencies, win.gauges, win.pods, win.span, counters)


def test_the_floor_is_the_profiles_one_sequence_decode_and_an_idle_requests_latency():
    profile = load_profile(H100)
    assert fastest_token_s(profile) == min(profile.decode_s[0]) and profile.decode_batch[0] == 1
    # A long prompt with 2 tokens: the prefill dominates its per-token latency.
    short = idle_per_token_s(profile, 1000, 2)
    assert short == pytest.approx((profile.prefill_time_s(1000) + profile.decode_step_s(1, 1001)) / 2)
    assert short > idle_per_token_s(profile, 100, 200) > fastest_token_s(profile)


@pytest.mark.parametrize(
    ("threshold", "mix", "says"),
    [
        (1.0, None, f"is below {FASTEST_MS}, the fastest token one idle replica makes"),
        (25.0, (1000, 2), "the per-token latency of this window's mean request (1000 prompt, 2 output tokens)"),
        (25.0, (100, 200), None),
        (25.0, None, None),
    ],
    ids=["below-any-token", "below-this-mix", "above-this-mix", "no-mix-yet"],
)
def test_floor_note(threshold, mix, says):
    note = floor_note(threshold, load_profile(H100), _mix(*mix) if mix else window(pertoken_ms=30))
    assert (note is None) if says is None else (says in (note or "")), note


def test_a_pertoken_decision_says_when_its_threshold_is_out_of_reach():
    spec = ScalerSpec(type="pertoken", threshold=10, max_deployment_count=8)
    policy = hpa_policy(spec, profile=load_profile(H100))
    decision, _ = policy.decide(_mix(1000, 2), spec, PolicyState.initial(2, 0.0), 0.0)
    assert "warning: threshold 10 ms is below" in decision.reason
    assert decision.desired > 2  # it says so; the HPA rule still acts
    plain, _ = hpa_policy(spec).decide(_mix(1000, 2), spec, PolicyState.initial(2, 0.0), 0.0)
    assert "warning" not in plain.reason and plain.desired == decision.desired


def test_check_warns_of_a_threshold_below_the_fastest_token(tmp_path, capsys):
    path = tmp_path / "autoscaler.yaml"
    path.write_text(f"scaler:\n  type: pertoken\n  threshold: 1\n  planner:\n    profile: {H100}\n")
    assert main(["--config", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    assert f"scaler.threshold: warning: threshold 1 ms is below {FASTEST_MS}" in out
    path.write_text(f"scaler:\n  type: pertoken\n  threshold: 25\n  planner:\n    profile: {H100}\n")
    assert main(["--config", str(path), "--check"]) == 0
    assert "warning" not in capsys.readouterr().out
