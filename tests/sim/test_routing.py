"""Routing: per request (round-robin, least-loaded) and per connection (a Service's kube-proxy)."""

from __future__ import annotations

import pytest
from sim_testkit import paper_profile, req

from nlgsim.cluster import Cluster
from nlgsim.routing import Routing, parse_routing
from nlgsim.simulator import Scenario, simulate


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("round-robin", Routing("round-robin")),
        ("least-loaded", Routing("least-loaded")),
        ("per-connection:4", Routing("per-connection", 4, 0)),
        ("per-connection:256:8", Routing("per-connection", 256, 8)),
    ],
)
def test_routing_names(text, parsed):
    assert parse_routing(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["ipvs", "round-robin:2", "per-connection", "per-connection:0", "per-connection:4:0", "per-connection:x",
     "per-connection:1:2:3", "per-connection:-1"],
)  # fmt: skip
def test_bad_routing_names_are_refused_with_the_forms_allowed(text):
    with pytest.raises(ValueError, match="must be round-robin, least-loaded, per-connection:N or per-connection:N:K"):
        parse_routing(text)


def ready_cluster(routing: str, pods: int) -> Cluster:
    c = Cluster(paper_profile(startup_s=10.0), routing, lambda s, t: None)
    for _ in range(pods):
        c.mark_ready(c.create(0.0, ready_now=True), 0.0)
    return c


def test_kept_connections_stay_on_the_pods_they_reached_when_they_opened():
    c = ready_cluster("per-connection:2", 4)
    first = [c.route(req(i, 0.0)).index for i in range(8)]
    # Connection 0 carries the even requests, 1 the odd ones; each opened round-robin (kube-proxy).
    assert first == [1, 2, 1, 2, 1, 2, 1, 2]
    added = c.create(1.0)
    c.mark_ready(added, 11.0)
    assert {c.route(req(i, 12.0)).index for i in range(8, 40)} == {1, 2}, "a kept connection never moves"


def test_a_connection_whose_pod_left_opens_again_on_a_ready_pod():
    c = ready_cluster("per-connection:1", 3)
    pinned = c.route(req(0, 0.0))
    c.delete(1, 1.0)  # the idlest: all idle, so the newest ready pod goes
    if pinned.deleted is None:
        c.ready.remove(pinned)  # the pod leaves the Service (its readiness failed)
        pinned.ready = False
    moved = c.route(req(1, 2.0))
    assert moved is not pinned and moved.ready and moved.deleted is None
    assert c.route(req(2, 3.0)) is moved


def test_short_lived_connections_reach_pods_added_later():
    c = ready_cluster("per-connection:2:3", 2)
    [c.route(req(i, 0.0)) for i in range(6)]
    added = c.create(1.0)
    c.mark_ready(added, 11.0)
    later = [c.route(req(i, 12.0)).index for i in range(6, 30)]
    assert added.index in later
    # Each connection keeps its pod for 3 requests: connection 0 carries requests 6, 8, 10 together.
    assert later[0] == later[2] == later[4]


def test_a_fleet_behind_a_service_with_few_kept_connections_uses_as_many_pods():
    requests = [req(i, (i // 60) * 5.0, 10, 5) for i in range(240)]  # bursts of 60 at once
    profile = paper_profile(startup_s=10.0)

    def pods_used(routing: str) -> int:
        log = simulate(Scenario(profile, requests, None, initial_replicas=6, routing=routing))
        return len({s.replica for s in log.states})

    assert pods_used("per-connection:2") == 2
    assert pods_used("per-connection:2:1") == 6
    assert pods_used("least-loaded") == 6
    assert pods_used("round-robin") == 6
