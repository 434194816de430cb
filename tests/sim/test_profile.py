"""Engine profiles: lookups, validation that names every bad key, files, and the committed profiles."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from sim_testkit import paper_profile

from nlgsim.profile import load_profile, profile_from_dict

PROFILES = sorted((Path(__file__).parents[2] / "benchmarks" / "profiles").glob("*.json"))


def grid_profile():
    return replace(
        paper_profile(),
        decode_batch=(1, 4),
        decode_context=(100, 300),
        decode_s=((0.010, 0.020), (0.040, 0.080)),
        prefill_tokens=(10, 110),
        prefill_s=(0.1, 0.3),
    )


@pytest.mark.parametrize(
    ("batch", "ctx", "want"),
    [(1, 100, 0.010), (4, 300, 0.080), (1, 200, 0.015), (2.5, 100, 0.025), (4, 200, 0.060), (8, 100, 0.080)],
    ids=["corner", "far-corner", "mid-context", "mid-batch", "edge", "extrapolated"],
)
def test_decode_interpolates_bilinearly_and_extrapolates_linearly(batch, ctx, want):
    assert grid_profile().decode_step_s(batch, ctx) == pytest.approx(want)  # type: ignore[arg-type]


def test_prefill_interpolates_and_never_goes_below_zero():
    p = grid_profile()
    assert p.prefill_time_s(60) == pytest.approx(0.2)
    assert p.prefill_time_s(210) == pytest.approx(0.5)
    assert p.prefill_time_s(-1000) > 0


def test_validation_reports_every_problem_naming_the_key():
    data = asdict(paper_profile())
    data.update(max_batch=0, source="guessed", decode_batch=[4, 1], prefill_s=[0.1])
    with pytest.raises(ValueError) as err:
        profile_from_dict(data)
    text = str(err.value)
    for key in ("max_batch = 0", "source = 'guessed'", "decode_batch = [4, 1]", "prefill_s has 1 entries"):
        assert key in text


def test_missing_and_unknown_keys(tmp_path):
    data = asdict(paper_profile())
    del data["startup_s"]
    with pytest.raises(ValueError, match="lacks startup_s"):
        profile_from_dict(data)
    data = {**asdict(paper_profile()), "gpu": "t4"}
    with pytest.raises(ValueError, match="unknown keys gpu"):
        profile_from_dict(data)
    with pytest.raises(ValueError, match="nlgsim profile --out"):
        load_profile(tmp_path / "nope.json")


def test_save_and_load_round_trip(tmp_path):
    p = grid_profile()
    p.save(tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == p
    assert json.loads((tmp_path / "p.json").read_text())["decode_s"] == [[0.01, 0.02], [0.04, 0.08]]


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_committed_profiles_load_and_say_what_they_are(path):
    profile = load_profile(path)
    assert profile.source in ("measured", "derived")
    assert profile.hardware and profile.preset and profile.dtype
    if profile.source == "derived":
        assert "derived" in profile.notes.lower()


def test_serving_overhead_is_added_per_step_and_once_per_prompt():
    # paper_profile: decode(b) = 10 ms + 1 ms * b; P(n) = 20 ms + 1 ms * n.
    served = paper_profile().with_overhead(first_token_s=0.030, step_s=0.005)
    assert served.decode_step_s(4, 100) == pytest.approx(0.014 + 0.005)
    assert served.prefill_time_s(100) == pytest.approx(0.120 + 0.030)
    # A 300-token prompt in chunks of 256: the second chunk costs P(300) - P(256), overhead cancelled.
    assert served.prefill_time_s(300) - served.prefill_time_s(256) == pytest.approx(0.044)
    assert paper_profile().with_overhead() == paper_profile()
    # Work per request in the batch (one response each): 2 ms a sequence on top of the step's 5 ms.
    busy = paper_profile().with_overhead(step_s=0.005, per_sequence_s=0.002)
    assert busy.decode_step_s(1, 100) == pytest.approx(0.011 + 0.005 + 0.002)
    assert busy.decode_step_s(4, 100) == pytest.approx(0.014 + 0.005 + 0.008)
    with pytest.raises(ValueError, match="step_s=-0.001"):
        paper_profile().with_overhead(step_s=-0.001)
