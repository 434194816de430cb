"""The replica that runs the engine's scheduler against the simulator's own copy of it
(``nlgsim.replica``), on the same workloads, driven the way the simulator drives a replica.

Where KV pages do not bind (the profiles' default cache: room for ``max_batch`` full contexts), the
two agree to the float on every request's first token and finish, and on the pod's series. Where the
cache is smaller, they part: the real scheduler admits a request only when the free pages, less what
the running ones still have reserved, cover its prompt and predicted output; the copy models no pages
and runs ``max_batch`` choices whatever the cache holds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sim_testkit import paper_profile

import nlgsim.cluster
from autoscaler.config import ScalerSpec
from nlgsim.experiment import build_policy, planner_config
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.replica import Replica, RequestState
from nlgsim.scheduled_replica import ScheduledReplica
from nlgsim.simulator import RunLog, Scenario, Simulation
from nlgsim.slo import SLO
from nlgsim.workload import COMPLEX, SIMPLE, QueryType, Request, thesis_requests

Either = Replica | ScheduledReplica
SPEC = ScalerSpec(type="pertoken", threshold=20, time_window=30, max_deployment_count=8, stabilization_window=60)
SLO_TRACE = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))


def drive(replica: Either, requests: list[Request], ahead: bool = False) -> tuple[dict[int, RequestState], list[float]]:
    """Steps back to back while there is work, arrivals between steps (the simulator's order); with
    `ahead`, runs the steps before the next arrival through `decode_ahead`, as the simulator does.
    Returns each request's state and the requests running after each step that went through `finish`."""
    states = {r.id: RequestState(r) for r in requests}
    pending = sorted(states.values(), key=lambda s: (s.request.arrival, s.request.id))
    now, i, running = 0.0, 0, []
    while i < len(pending) or replica.has_work():
        if not replica.has_work():
            now = max(now, pending[i].request.arrival)
        while i < len(pending) and pending[i].request.arrival <= now:
            replica.submit(pending[i])
            i += 1
        now = replica.start(now)
        if ahead:
            now = replica.decode_ahead(now, pending[i].request.arrival if i < len(pending) else math.inf)
        replica.finish(now)
        running.append(replica.metrics.requests_running)
    return states, running


def both(profile: EngineProfile, requests: list[Request]) -> tuple[tuple[dict[int, RequestState], list[float]], ...]:
    done: list[RequestState] = []
    copy = Replica(0, profile, lambda s, t: done.append(s))
    real = ScheduledReplica(0, profile, lambda s, t: done.append(s))
    return drive(copy, requests), drive(real, requests)


def times(states: dict[int, RequestState]) -> list[float]:
    """Admission, first token, finish and per-token latency of each request, in id order."""
    return [t for _, s in sorted(states.items()) for t in (s.admitted, s.first_token, s.finish, s.per_token)]


@pytest.mark.parametrize(
    ("query", "rate", "max_batch", "chunk"),
    [
        (SIMPLE, 20.0, 8, 256),  # queueing: the batch is full most of the time
        (COMPLEX, 8.0, 16, 256),  # four choices a request, of different lengths
        (COMPLEX, 8.0, 16, 32),  # prompts of 82 tokens in chunks of 32, beside the decode batch
    ],
    ids=["simple-queued", "complex", "complex-chunked"],
)
def test_where_pages_do_not_bind_both_give_the_same_times(query: QueryType, rate: float, max_batch: int, chunk: int):
    profile = paper_profile(max_batch=max_batch, chunk=chunk)
    requests = thesis_requests(query, rate, 200, seed=3)
    (copy, _), (real, _) = both(profile, requests)
    assert all(s.finish > 0 for s in real.values())
    assert times(real) == pytest.approx(times(copy), abs=1e-9)


def test_where_pages_do_not_bind_the_pod_reports_the_same_series():
    profile = paper_profile(max_batch=16)
    requests = thesis_requests(COMPLEX, 8.0, 100, seed=5)
    series = []
    for replica in (Replica(0, profile, lambda s, t: None), ScheduledReplica(0, profile, lambda s, t: None)):
        drive(replica, requests)
        m = replica.metrics
        series.append(
            (
                m.prompt_tokens,
                m.generation_tokens,
                m.requests_finished,
                m.time_to_first_token.counts,
                m.inter_token_latency.counts,
                pytest.approx(m.inter_token_latency.total),
                m.time_per_output_token.counts,
                m.request_latency.counts,
            )
        )
    assert series[1] == series[0]


def test_a_small_cache_holds_admission_back_where_the_copy_runs_a_full_batch():
    # 40 pages of 16 tokens: a complex request reserves 4 choices x 9 pages (82 + 64 tokens), so one
    # runs at a time; the copy, which has no pages, runs four (16 choices) at once.
    profile = replace(paper_profile(max_batch=16), kv_pages=40)
    requests = thesis_requests(COMPLEX, 8.0, 60, seed=3)
    (copy, copy_running), (real, real_running) = both(profile, requests)
    assert (max(copy_running), max(real_running)) == (4, 1)
    assert all(s.finish > 0 for s in real.values())
    # Served one at a time, the first two finish sooner (their steps decode 4 choices, 14 ms, not the
    # copy's 16, 26 ms) and every later one waits for those before it: it finishes later.
    sooner = [i for i in sorted(real) if real[i].finish < copy[i].finish - 1e-9]
    later = [i for i in sorted(real) if real[i].finish > copy[i].finish + 1e-9]
    assert (sooner, later) == ([0, 1], list(range(2, len(requests))))


def test_a_request_with_more_choices_than_the_batch_is_refused_naming_it():
    replica = ScheduledReplica(0, paper_profile(max_batch=2), lambda s, t: None)
    with pytest.raises(ValueError, match="request 7: n: 4 is above this instance's max_num_seqs"):
        replica.submit(RequestState(Request(7, 0.0, 10, (3, 3, 3, 3))))


@pytest.mark.parametrize("kv_pages", [0, 40], ids=["default-cache", "40-pages"])
def test_steps_run_ahead_give_the_stepped_run_bit_for_bit(kv_pages: int):
    profile = replace(paper_profile(max_batch=16, chunk=32), kv_pages=kv_pages)
    requests = thesis_requests(COMPLEX, 8.0, 150, seed=4)
    runs = [drive(ScheduledReplica(0, profile, lambda s, t: None), requests, ahead) for ahead in (False, True)]
    (stepped, _), (ahead, _) = runs
    assert times(ahead) == times(stepped)  # equal floats, not approximately


def outcome(log: RunLog) -> tuple[object, ...]:
    states = [(s.request.id, s.replica, s.admitted, s.first_token, s.finish, s.per_token) for s in log.states]
    loops = [(r.time, r.current, r.desired, r.reason) for r in log.loops]
    return states, log.pod_changes, loops, log.end


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded"])
@pytest.mark.parametrize(
    ("profile", "rate"),
    [
        ("benchmarks/profiles/cpu-gpt2-fp32.json", 3.0),  # pads decode to the longest context
        ("benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json", 6.0),
    ],
    ids=["cpu-max-context", "t4"],
)
def test_the_simulator_with_the_schedulers_replica_runs_as_with_the_copy(profile, rate, routing, monkeypatch):
    """The whole simulator, the autoscaler's rounds (pertoken:20) and pods starting included, with the
    cluster's replicas swapped for the scheduler's (what switching ``nlgsim.replica`` would do): the
    same run as with the copy, with steps run ahead of the queue and without."""
    engine = load_profile(profile)
    requests = thesis_requests(COMPLEX, rate, 300, seed=3, ramp_s=5.0)
    built, initial = build_policy("pertoken:20", SPEC, planner_config(engine, requests, SLO_TRACE, 5.0, None))
    scenario = Scenario(engine, requests, built, initial_replicas=initial, routing=routing, startup_s=8.0)
    copy = outcome(Simulation(scenario).run())
    assert len(copy[1]) > 1  # the autoscaler changed the pods
    monkeypatch.setattr(nlgsim.cluster, "Replica", ScheduledReplica)
    for ahead in (True, False):
        assert outcome(Simulation(scenario, ahead=ahead).run()) == copy
