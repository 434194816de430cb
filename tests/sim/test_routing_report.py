"""The committed routing report is its results rendered, and its results say what routing does."""

from __future__ import annotations

from pathlib import Path

from benchmarks import harness, routing

ROOT = Path(__file__).resolve().parents[2]
DATA = harness.read_json(ROOT / "benchmarks/results/routing.json")


def test_the_committed_report_is_its_results_rendered():
    assert (ROOT / "benchmarks/routing.md").read_text() == routing.render(DATA)
    assert (ROOT / "benchmarks/figures/routing_pods.png").stat().st_size > 10_000


def test_every_routing_ran_under_each_policy_on_the_same_requests():
    runs = [(r["routing"], r["policy"]) for r in DATA["runs"]]
    assert runs == [(key, policy) for key, _, policy in routing.tasks()]
    assert len({r["requests"] for r in DATA["runs"]}) == 1


def test_kept_channels_reach_no_more_pods_than_there_are_channels():
    connections = int(routing.KEPT.split(":")[1])
    for run in DATA["runs"]:
        assert run["pods_served"] <= run["pods_ready"]
        if run["routing"] == "kept":
            assert run["pods_served"] <= connections
    fixed = routing.run_of(DATA, "kept", routing.POLICIES[1])
    assert fixed["pods_served"] == connections and fixed["busiest_share"] >= 1 / connections


def test_per_request_routings_use_every_ready_pod():
    for key in ("balancer", "round-robin", "short-lived"):
        for policy in routing.POLICIES:
            run = routing.run_of(DATA, key, policy)
            assert run["pods_served"] == run["pods_ready"], (key, policy)
