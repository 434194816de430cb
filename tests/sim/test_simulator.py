"""Whole runs as timelines: the live autoscaler's code decides, pods start, scale in, and runs repeat."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
from sim_testkit import paper_profile, req

import autoscaler.decide
import nlgsim.simulator
from autoscaler.aggregate import WindowAggregator
from autoscaler.config import RateLimit, ScalerSpec
from autoscaler.loop import Controller
from nlgsim.policy import hpa_policy
from nlgsim.results import SLO, summarize
from nlgsim.simulator import Scenario, Simulation, pod_sample, simulate
from nlgsim.workload import COMPLEX, SIMPLE, thesis_requests

SPEC = ScalerSpec(
    type="pertoken", threshold=20, time_window=30, max_deployment_count=4, stabilization_window=60
)


def loops_at(log, *times):
    by_time = {round(loop.time, 6): loop for loop in log.loops}
    return [(t, by_time[t].current, by_time[t].desired) for t in times]


def test_the_simulator_runs_the_live_autoscalers_code():
    policy = hpa_policy(SPEC)
    # The live decide, then the step every policy's decision takes (autoscaler/imbalance.py).
    assert policy.decide.__wrapped__ is autoscaler.decide.decide
    sim = Simulation(Scenario(paper_profile(), [req(0, 0.0)], policy))
    assert sim.source is not None and type(sim.source.aggregator) is WindowAggregator


def test_the_simulators_only_control_loop_is_the_services_controller():
    """Every round goes through autoscaler.loop.Controller; the simulator holds no copy of one."""
    sim = Simulation(Scenario(paper_profile(), thesis_requests(SIMPLE, 2.0, 200, seed=0), hpa_policy(SPEC)))
    assert type(sim.controller) is Controller
    log = sim.run()
    view = sim.controller.targets.view("sim")
    assert view is not None
    n = len(view["decisions"])  # the controller keeps its last 50
    assert n == min(50, len(log.loops)) and len(log.loops) > 10
    assert [(r.time, r.desired, r.reason) for r in log.loops[-n:]] == [
        (d["time"], d["desired"], d["reason"]) for d in reversed(view["decisions"])
    ]
    source = inspect.getsource(nlgsim.simulator)
    for copy_of_the_round in (".decide(", "with_replicas(", "WindowStats.empty", "rate_limit("):
        assert copy_of_the_round not in source


def test_pod_sample_is_what_the_collector_reads():
    profile = paper_profile()
    log = simulate(Scenario(profile, [req(0, 0.0, 10, 3), req(1, 0.0, 10, 2)], None, initial_replicas=1))
    assert len(log.states) == 2
    sim = Simulation(Scenario(profile, [req(0, 0.0, 10, 3)], None), instruments=True)
    sim.run()
    sample = pod_sample(sim.cluster.pods[0].replica.metrics)
    assert set(sample.histograms) == {"request", "pertoken", "ttft", "itl"}
    assert set(sample.gauges) == {"waiting", "running", "kv_usage"}
    request = sample.histograms["request"]
    assert request.count == 1 and request.buckets[-1] == (float("inf"), 1)
    assert request.buckets[0] == (0.005, 0)  # docs/metrics.md's first latency bucket
    assert sample.histograms["itl"].count == 2


def test_overload_scales_out_when_the_window_first_has_data_and_pods_start_after_their_delay():
    profile = paper_profile(max_batch=4, startup_s=20.0)
    reqs = thesis_requests(SIMPLE, rate=20.0, count=1200, seed=1)  # ~5x what one replica carries
    log = simulate(Scenario(profile, reqs, hpa_policy(SPEC), loop_interval=5.0, scrape_interval=5.0))
    # t=5: one scrape is only a baseline (no data, hold); t=10: per-token latency far above 20 ms.
    first = log.loops[0]
    assert (first.time, first.valid, first.desired) == (5.0, False, 1)
    assert "no data" in first.reason
    assert loops_at(log, 10.0) == [(10.0, 1, 4)]
    assert (10.0, 4, 1, 4) in log.pod_changes  # 3 pods created at 10 s, one ready
    assert (30.0, 4, 4, 4) in log.pod_changes  # ready 20 s later
    new_pods = {s.replica for s in log.states if s.request.arrival < 30.0}
    assert new_pods == {0}  # nobody else got requests before they were ready


def test_scale_in_after_the_load_stops_waits_for_the_stabilization_window():
    profile = paper_profile(max_batch=4, startup_s=5.0)
    burst = thesis_requests(SIMPLE, rate=20.0, count=600, seed=2)  # 30 s of overload
    tail = [replace(r, id=600 + i, arrival=200.0 + i * 2.0) for i, r in enumerate(burst[:60])]  # light load
    spec = replace(SPEC, scale_down=RateLimit(max_pods=4, max_percent=100, period=15))
    log = simulate(Scenario(profile, burst + tail, hpa_policy(spec)))
    peak = max(c[1] for c in log.pod_changes)
    assert peak == 4
    last_up = max(loop.time for loop in log.loops if loop.desired > loop.current)
    first_down = min(loop.time for loop in log.loops if loop.desired < loop.current)
    assert first_down >= last_up + spec.stabilization_window
    assert log.pod_changes[-1][1] == 1


def test_requests_wait_at_the_service_until_the_first_pod_is_ready():
    spec = replace(SPEC, min_deployment_count=1)
    reqs = [req(i, 1.0 + i, 10, 3) for i in range(3)]
    log = simulate(Scenario(paper_profile(startup_s=10.0), reqs, hpa_policy(spec), initial_replicas=0))
    # t=5: no pods, no data: bounds move 0 -> 1; the pod is ready at 15; requests start then.
    assert loops_at(log, 5.0) == [(5.0, 0, 1)]
    assert all(s.admitted == pytest.approx(15.0) for s in log.states)


def test_same_scenario_same_run_bit_for_bit():
    profile = paper_profile(max_batch=8, startup_s=15.0)
    reqs = thesis_requests(COMPLEX, rate=3.0, count=300, seed=7)
    a = simulate(Scenario(profile, reqs, hpa_policy(SPEC), routing="least-loaded"))
    b = simulate(Scenario(profile, reqs, hpa_policy(SPEC), routing="least-loaded"))
    assert [(s.finish, s.replica) for s in a.states] == [(s.finish, s.replica) for s in b.states]
    assert a.pod_changes == b.pod_changes
    assert [loop.reason for loop in a.loops] == [loop.reason for loop in b.loops]
    assert summarize(a, SLO()) == summarize(b, SLO())
    other = simulate(Scenario(profile, thesis_requests(COMPLEX, 3.0, 300, seed=8), hpa_policy(SPEC)))
    assert [s.finish for s in other.states] != [s.finish for s in a.states]


def test_fixed_replicas_make_no_decisions_and_cost_their_lifetime():
    reqs = [req(0, 0.0, 10, 3), req(1, 1.0, 10, 3)]
    log = simulate(Scenario(paper_profile(), reqs, None, initial_replicas=3))
    assert log.loops == []
    assert log.end == pytest.approx(1.052)
    assert log.replica_seconds == pytest.approx(3 * 1.052)


def test_scrapes_less_often_than_the_loop_delay_the_first_decision():
    profile = paper_profile(max_batch=4, startup_s=20.0)
    reqs = thesis_requests(SIMPLE, rate=20.0, count=600, seed=1)
    log = simulate(Scenario(profile, reqs, hpa_policy(SPEC), loop_interval=5.0, scrape_interval=15.0))
    # samples at 15 and 30: the first window with two samples is at the t=30 round.
    assert min(loop.time for loop in log.loops if loop.valid) == 30.0
