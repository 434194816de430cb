"""The committed simulator-speed report is what its results file renders to, and it compares the
simulator that ran its own copy of the scheduler with the one that runs the engine's."""

from __future__ import annotations

from pathlib import Path

from benchmarks import harness, sim_replica_speed

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_its_results_rendered():
    data = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed.json")
    assert (ROOT / "benchmarks/sim_replica_speed.md").read_text() == sim_replica_speed.render(data)


def test_the_committed_results_compare_the_copy_with_the_engines_scheduler():
    data = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed.json")
    assert data["engine_scheduler"] == {"before": False, "after": True}
    assert data["code"]["before"] == sim_replica_speed.BEFORE
