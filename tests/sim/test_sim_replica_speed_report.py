"""The committed simulator-speed report is what its results file renders to."""

from __future__ import annotations

from pathlib import Path

from benchmarks import harness, sim_replica_speed

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_its_results_rendered():
    data = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed.json")
    baseline = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed_before.json")
    assert (ROOT / "benchmarks/sim_replica_speed.md").read_text() == sim_replica_speed.render(data, baseline)
