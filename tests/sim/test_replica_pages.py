"""The replica's KV pages, which the engine's scheduler keeps: where the cache is smaller than
``max_batch`` full contexts, admission waits for pages; and steps run ahead of the queue give the
stepped run, pages and all."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sim_testkit import paper_profile

from nlgsim.profile import EngineProfile
from nlgsim.replica import Replica, RequestState
from nlgsim.workload import COMPLEX, Request, thesis_requests


def drive(replica: Replica, requests: list[Request], ahead: bool = False) -> tuple[dict[int, RequestState], list[int]]:
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


def served(profile: EngineProfile, requests: list[Request]) -> tuple[dict[int, RequestState], list[int]]:
    return drive(Replica(0, profile, lambda s, t: None), requests)


def times(states: dict[int, RequestState]) -> list[float]:
    """Admission, first token, finish and per-token latency of each request, in id order."""
    return [t for _, s in sorted(states.items()) for t in (s.admitted, s.first_token, s.finish, s.per_token)]


def test_a_small_cache_holds_admission_back_to_what_its_pages_hold():
    # 40 pages of 16 tokens: a complex request reserves 4 choices x 9 pages (82 + 64 tokens), so one
    # runs at a time; the default cache (room for max_batch full contexts) runs four (16 choices) at once.
    profile = paper_profile(max_batch=16)
    requests = thesis_requests(COMPLEX, 8.0, 60, seed=3)
    roomy, roomy_running = served(profile, requests)
    small, small_running = served(replace(profile, kv_pages=40), requests)
    assert (max(roomy_running), max(small_running)) == (4, 1)
    assert all(s.finish > 0 for s in small.values())
    # Served one at a time, the first two finish sooner (their steps decode 4 choices, 14 ms, not 16,
    # 26 ms) and every later one waits for those before it: it finishes later.
    sooner = [i for i in sorted(small) if small[i].finish < roomy[i].finish - 1e-9]
    later = [i for i in sorted(small) if small[i].finish > roomy[i].finish + 1e-9]
    assert (sooner, later) == ([0, 1], list(range(2, len(requests))))


@pytest.mark.parametrize("kv_pages", [0, 40], ids=["default-cache", "40-pages"])
def test_steps_run_ahead_give_the_stepped_run_bit_for_bit(kv_pages: int):
    profile = replace(paper_profile(max_batch=16, chunk=32), kv_pages=kv_pages)
    requests = thesis_requests(COMPLEX, 8.0, 150, seed=4)
    runs = [drive(Replica(0, profile, lambda s, t: None), requests, ahead) for ahead in (False, True)]
    (stepped, _), (ahead, _) = runs
    assert times(ahead) == times(stepped)  # equal floats, not approximately
