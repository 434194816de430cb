"""The committed simulator-speed report is what its results file renders to, and it compares this tree's
simulator with the one at the harness's `BEFORE`, both running the engine's scheduler, on every run the
harness names."""

from __future__ import annotations

from pathlib import Path

from benchmarks import harness, sim_replica_speed, sim_speed_side

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_its_results_rendered():
    data = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed.json")
    assert (ROOT / "benchmarks/sim_replica_speed.md").read_text() == sim_replica_speed.render(data)


def test_the_committed_results_compare_the_before_commit_on_every_run_named():
    data = harness.read_json(ROOT / "benchmarks/results/sim_replica_speed.json")
    assert data["engine_scheduler"] == {"before": True, "after": True}
    assert data["code"]["before"] == sim_replica_speed.BEFORE
    assert [f["name"] for f in data["fleets"]] == list(sim_speed_side.FLEETS)
    assert [f["command"] for f in data["fleets"]] == [command for _, command in sim_speed_side.FLEETS.values()]
    assert data["oracle"]["run"] == sim_speed_side.ORACLE[0]
    for measured in [*data["fleets"], data["oracle"]]:
        assert measured["before"]["requests"] == measured["after"]["requests"] > 0
