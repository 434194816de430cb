"""Steps run ahead of the event queue (Replica.run_ahead) change nothing: runs equal the stepped ones."""

from __future__ import annotations

import pytest
from sim_testkit import paper_profile, req

from autoscaler.config import ScalerSpec
from nlgsim.experiment import build_policy, planner_config
from nlgsim.profile import load_profile
from nlgsim.replica import Replica, RequestState
from nlgsim.simulator import RunLog, Scenario, Simulation
from nlgsim.slo import SLO
from nlgsim.workload import COMPLEX, thesis_requests

SPEC = ScalerSpec(
    type="pertoken", threshold=20, time_window=30, max_deployment_count=8, stabilization_window=60
)
SLO_TRACE = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))


def _run(scenario: Scenario, ahead: bool) -> RunLog:
    return Simulation(scenario, ahead=ahead).run()


def _outcome(log: RunLog) -> tuple[object, ...]:
    states = [
        (s.request.id, s.replica, s.admitted, s.first_token, s.finish, s.per_token) for s in log.states
    ]
    loops = [(r.time, r.current, r.desired, r.reason, sorted(r.values.items())) for r in log.loops]
    return states, log.pod_changes, loops, log.end, log.replica_seconds


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded", "per-connection:3:4"])
@pytest.mark.parametrize(
    ("profile", "rate"),
    [
        ("benchmarks/profiles/cpu-gpt2-fp32.json", 3.0),  # pads decode to the longest context
        ("benchmarks/profiles/h100-gpt2-xl-fp16.json", 40.0),  # the mean context
        ("benchmarks/profiles/t4-gpt2-xl-fp16-derived.json", 6.0),
    ],
    ids=["cpu-max-context", "h100-mean-context", "t4"],
)
@pytest.mark.parametrize("policy", ["pertoken:20", "planner", "fixed:2"])
def test_running_steps_ahead_gives_the_stepped_run_bit_for_bit(profile, rate, routing, policy):
    engine = load_profile(profile)
    requests = thesis_requests(COMPLEX, rate, 300, seed=3, ramp_s=5.0)
    cfg = planner_config(engine, requests, SLO_TRACE, 5.0, None)
    built, initial = build_policy(policy, SPEC, cfg)
    scenario = Scenario(engine, requests, built, initial_replicas=initial, routing=routing, startup_s=8.0)
    ahead, stepped = _run(scenario, True), _run(scenario, False)
    assert _outcome(ahead) == _outcome(stepped)
    assert all(s.finish > 0 for s in ahead.states)


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded"])
def test_replicas_far_behind_run_ahead_past_requests_that_only_queue(routing):
    """Two fixed replicas given far more than they carry: a full batch and a queue that does not empty, so
    a request arriving only queues behind its head and the decoding steps run past it. The run is the
    stepped one."""
    engine = load_profile("benchmarks/profiles/h100-gpt2-xl-fp16.json")
    scenario = Scenario(engine, thesis_requests(COMPLEX, 300.0, 900, seed=5), None, initial_replicas=2, routing=routing)
    ahead, stepped = _run(scenario, True), _run(scenario, False)
    assert _outcome(ahead) == _outcome(stepped)
    last = ahead.states[-1]
    assert last.admitted - last.request.arrival > 1.0  # queued behind the others for a while


def test_a_replica_says_when_its_queues_head_waits_for_a_choice_to_end():
    replica = Replica(0, paper_profile(max_batch=4), lambda s, t: None)
    for i in range(3):  # two choices each: the third does not fit beside the first two
        replica.submit(RequestState(req(i, 0.0, 10, 50, 50)))
    now = replica.start(0.0)  # the first two prefill
    assert not replica.admits_nobody
    replica.finish(now)
    replica.start(now)  # they decode, the third waits
    assert replica.admits_nobody


def test_steps_ahead_stop_at_the_next_request_to_the_pod_and_at_a_choice_finishing():
    """One pod decoding a long choice: a second request must join the batch at the step after it
    arrives, and the first choice's end must come out of the queue, as in the stepped run."""
    profile = paper_profile(max_batch=8)
    requests = [req(0, 0.0, 10, 200), req(1, 0.5, 10, 50), req(2, 0.9, 10, 3)]
    scenario = Scenario(profile, requests, None, initial_replicas=1)
    ahead, stepped = _run(scenario, True), _run(scenario, False)
    assert _outcome(ahead) == _outcome(stepped)
    first, second, third = ahead.states
    assert 0.5 < second.admitted < 0.5 + 0.02  # admitted at the first step boundary after 0.5 s
    assert third.finish < second.finish < first.finish
