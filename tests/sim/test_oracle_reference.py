"""The oracle's shortcuts give what the straightforward search gives, bit for bit: each count of replicas
simulated whole (every replica in one run, every engine step through the event queue, the pods' metrics
kept), nothing given up on, from the fewest up to the first that meets the target. Its shortcuts: the
replicas of a round-robin fleet run one at a time, a count is given up on once it is known to fall short,
and a count far too few is known to without a run (nlgsim.overload)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_testkit import conv_fleet, paper_profile

from nlgsim.oracle import _Candidates, _intervals, oracle
from nlgsim.profile import EngineProfile
from nlgsim.results import request_table, violations
from nlgsim.simulator import Scenario, Simulation
from nlgsim.slo import SLO
from nlgsim.workload import Request

TRACE_SLO = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))


def conv_x10() -> tuple[EngineProfile, list[Request]]:
    return conv_fleet(150)


def bursts() -> tuple[EngineProfile, list[Request]]:
    """Prompts of 50-900 tokens and outputs of 1-60 on the paper profile, 3 a second with a burst of 10."""
    rng = np.random.default_rng(11)
    out: list[Request] = []
    t = 0.0
    while t < 150:
        t += rng.exponential(1 / (10 if 70 <= t < 90 else 3))
        out.append(Request(len(out), t, int(rng.integers(50, 901)), (int(rng.integers(1, 61)),)))
    return paper_profile(max_batch=16), out


def straightforward(profile, requests, slo, routing, floor=1, cap=64):
    """Each interval's fewest replicas meeting the target and that count's attainment, every count simulated
    whole; (floor, the cap's attainment) where none does."""
    _, _, tasks = _intervals(profile, requests, slo, 60.0, routing, floor, cap)
    answer: list[int] = []
    attained: list[float] = []
    for task in tasks:
        if task is None:
            answer.append(floor)
            attained.append(math.nan)
            continue
        total = max(int(task.scored.sum()), 1)
        for n in range(floor, cap + 1):
            scenario = Scenario(profile, task.requests, None, initial_replicas=n, routing=routing)
            log = Simulation(scenario, ahead=False, instruments=True).run()
            got = 1.0 - int((slo.missed(violations(request_table(log), slo)) & task.scored).sum()) / total
            if got >= slo.target:
                break
        else:
            n = floor
        answer.append(n)
        attained.append(got)
    return tuple(answer), tuple(attained)


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded"])
@pytest.mark.parametrize("workload", [conv_x10, bursts], ids=["conv-x10", "bursts"])
def test_the_oracle_is_the_straightforward_search_bit_for_bit(workload, routing):
    profile, requests = workload()
    got = oracle(profile, requests, TRACE_SLO, routing=routing)
    answer, attained = straightforward(profile, requests, TRACE_SLO, routing)
    assert got.replicas == answer
    assert [a if not math.isnan(a) else "nan" for a in got.attainment] == [
        a if not math.isnan(a) else "nan" for a in attained
    ]
    assert max(answer) >= 2  # counts below the answer were searched


@pytest.mark.parametrize("workload", [conv_x10, bursts], ids=["conv-x10", "bursts"])
def test_some_count_is_known_to_fall_short_without_a_run(workload):
    """Where one replica takes what several are needed for, the bound alone rules it out: the shortcut the
    test above checks is taken."""
    profile, requests = workload()
    _, _, tasks = _intervals(profile, requests, TRACE_SLO, 60.0, "round-robin", 1, 64)
    ruled_out = 0
    for task in tasks:
        if task is None:
            continue
        candidates = _Candidates(profile, task.requests, task.scored, TRACE_SLO, "round-robin")
        certain = int(candidates._bound.misses().sum())
        ruled_out += 1.0 - certain / candidates.total < TRACE_SLO.target
    assert ruled_out >= 1
