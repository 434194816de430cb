"""Pods behind a Service: routing, the ReplicaSet's deletion order, draining and replica-seconds."""

from __future__ import annotations

import pytest
from sim_testkit import paper_profile, req

from nlgsim.cluster import Cluster
from nlgsim.replica import RequestState


def cluster(routing: str = "round-robin") -> Cluster:
    return Cluster(paper_profile(startup_s=10.0), routing, lambda s, t: None)


def ready_pods(c: Cluster, n: int, now: float = 0.0):
    pods = [c.create(now, ready_now=True) for _ in range(n)]
    for p in pods:
        c.mark_ready(p, now)
    return pods


def test_round_robin_cycles_over_ready_pods():
    c = cluster()
    ready_pods(c, 3)
    assert [c.route(req(i, 0.0)).index for i in range(6)] == [1, 2, 0, 1, 2, 0]


def test_least_loaded_picks_fewest_in_flight_then_oldest():
    c = cluster("least-loaded")
    a, b, _ = ready_pods(c, 3)
    a.replica.submit(RequestState(req(0, 0.0)))
    b.replica.submit(RequestState(req(1, 0.0)))
    assert c.route(req(2, 0.0)).index == 2
    assert cluster("least-loaded").route(req(3, 0.0)) is None  # no ready pod


def test_new_pods_are_endpoints_only_once_ready():
    c = cluster()
    ready_pods(c, 1)
    pod = c.create(5.0)
    assert pod.ready_at == 15.0
    assert [p.index for p in c.ready] == [0]
    c.mark_ready(pod, 15.0)
    assert [p.index for p in c.ready] == [0, 1]


def test_scale_down_removes_starting_pods_first_then_the_idlest_ready_one():
    c = cluster()
    a, b = ready_pods(c, 2)
    a.replica.submit(RequestState(req(0, 0.0)))
    starting = c.create(1.0)
    assert c.delete(1, 2.0) == [starting]
    assert starting.gone == 2.0  # never ready: gone at once
    assert c.delete(1, 3.0) == [b]  # b has nothing in flight
    assert c.current == 1


def test_a_deleted_busy_pod_leaves_the_service_and_drains():
    c = cluster()
    (a,) = ready_pods(c, 1)
    a.replica.submit(RequestState(req(0, 0.0)))
    c.delete(1, 4.0)
    assert c.ready == [] and a.gone is None
    c.drained(a, 6.0)  # still has a request in flight: not gone
    assert a.gone is None
    a.replica.outstanding = 0
    c.drained(a, 7.0)
    assert a.gone == 7.0


def test_replica_seconds_count_start_up_and_draining():
    c = cluster()
    ready_pods(c, 1)  # 0 .. 100
    p = c.create(20.0)  # starting at 20, deleted at 50
    c.mark_ready(p, 30.0)
    c.delete(1, 50.0)
    assert c.replica_seconds(100.0) == pytest.approx(100 + 30)
    assert [(t, n, r, billed) for t, n, r, billed in c.changes] == [
        (0.0, 1, 1, 1),
        (20.0, 2, 1, 2),
        (30.0, 2, 2, 2),
        (50.0, 1, 1, 1),
    ]
