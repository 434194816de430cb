"""The committed capacity-model report is its results rendered, and its model columns are what
`autoscaler.capacity` computes today for the mixes measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.capacity import choices_per_second
from autoscaler.profile import load_profile
from benchmarks import capacity_model, harness

ROOT = Path(__file__).resolve().parents[2]
DATA = harness.read_json(ROOT / "benchmarks/results/capacity_model.json")


def test_the_committed_report_is_its_results_rendered():
    assert (ROOT / "benchmarks/capacity_model.md").read_text() == capacity_model.render(DATA)


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["name"])
def test_the_results_model_is_todays_model(case):
    profile = load_profile(ROOT / case["profile"])
    args = (profile, case["planned_per_token_s"], case["prompt_tokens"], case["output_tokens"], case["choices"])
    assert case["model_rate"] == pytest.approx(choices_per_second(*args) / case["choices"])
    assert case["model_at_mean_rate"] == pytest.approx(choices_per_second(*args, spread=False) / case["choices"])


def test_the_simulated_rate_reaches_the_target_and_a_little_more_does_not():
    for case in DATA["cases"]:
        probes = case["probes"]
        met = [p["rate"] for p in probes if p["attainment"] >= DATA["slo"]["target"]]
        missed = [p["rate"] for p in probes if p["attainment"] < DATA["slo"]["target"]]
        assert case["carried_rate"] == max(met)
        assert min(missed) > case["carried_rate"]
