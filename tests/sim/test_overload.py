"""The first-token bound of nlgsim.overload against runs: no request's first token comes before its bound,
every miss it claims is a miss, and it claims nothing where the replica could preempt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_testkit import conv_fleet, paper_profile

from nlgsim.overload import FirstTokenBound
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.results import request_table, violations
from nlgsim.simulator import Scenario, simulate
from nlgsim.slo import SLO
from nlgsim.workload import COMPLEX, Request, thesis_requests

TRACE_SLO = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))
H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"


def conv_x10() -> tuple[EngineProfile, list[Request]]:
    return conv_fleet(60)


def long_prompts() -> tuple[EngineProfile, list[Request]]:
    """Prompts of 50-980 tokens (prefilled in chunks of 256) and outputs of 1-40, 30 a second."""
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(1 / 30, 1500))
    requests = [
        Request(i, float(t), int(rng.integers(50, 981)), (int(rng.integers(1, 41)),)) for i, t in enumerate(arrivals)
    ]
    return paper_profile(max_batch=16), requests


def complex_choices() -> tuple[EngineProfile, list[Request]]:
    """Four choices a request, on the calibrated T4."""
    return load_profile(T4), thesis_requests(COMPLEX, 30.0, 1200, seed=2)


def one_replicas_share(profile: EngineProfile, requests: list[Request], replicas: int, slo: SLO):
    """The bound over every request and the run of the first replica's share (every n-th request, round-robin),
    alone: its bounds, first tokens, scored misses claimed and scored misses that happened."""
    ranked = sorted(requests, key=lambda r: (r.arrival, r.id))
    scored = np.array([r.arrival >= ranked[-1].arrival / 3 for r in ranked])  # the first third warms up
    bound = FirstTokenBound(profile, ranked, scored, slo)
    share = ranked[0::replicas]
    log = simulate(Scenario(profile, share, None, initial_replicas=1))
    table = request_table(log)
    missed = slo.missed(violations(table, slo)) & scored[0::replicas]
    return bound, table.arrival + table.ttft, bound.misses(0, replicas), missed


@pytest.mark.parametrize(
    ("workload", "replicas"),
    [(conv_x10, 1), (conv_x10, 2), (conv_x10, 3), (long_prompts, 1), (long_prompts, 2), (complex_choices, 1),
     (complex_choices, 2)],
    ids=["conv-x10-1", "conv-x10-2", "conv-x10-3", "long-prompts-1", "long-prompts-2", "complex-1", "complex-2"],
)  # fmt: skip
def test_no_first_token_comes_before_its_bound_and_every_claimed_miss_is_one(workload, replicas):
    profile, requests = workload()
    bound, first_tokens, claimed, missed = one_replicas_share(profile, requests, replicas, TRACE_SLO)
    assert bound.holds
    assert (first_tokens >= bound.first_tokens(0, replicas)).all()
    assert not (claimed & ~missed).any()


@pytest.mark.parametrize("workload", [conv_x10, long_prompts, complex_choices], ids=["conv-x10", "long", "complex"])
def test_one_replica_where_several_are_needed_is_known_to_fall_short_without_a_run(workload):
    profile, requests = workload()
    bound, _, claimed, _ = one_replicas_share(profile, requests, 1, TRACE_SLO)
    assert claimed.sum() > (1 - TRACE_SLO.target) * bound.scored.sum()


def test_each_limit_the_slo_names_is_bounded():
    profile, requests = conv_x10()
    for attain in ("ttft", "pertoken", "request"):
        slo = SLO(request_s=2.0, ttft_s=1.0, per_token_s=0.05, attain=(attain,))
        _, _, claimed, missed = one_replicas_share(profile, requests, 1, slo)
        assert not (claimed & ~missed).any()
        assert claimed.any(), attain


def test_where_the_replica_could_preempt_the_bound_claims_nothing():
    profile, requests = conv_x10()
    small = replace(profile, kv_pages=profile.total_pages // 2)  # a full batch of long choices does not fit
    ranked = sorted(requests, key=lambda r: (r.arrival, r.id))
    bound = FirstTokenBound(small, ranked, np.ones(len(ranked), dtype=bool), TRACE_SLO)
    assert not bound.holds and not bound.misses().any()
    too_many = [replace(ranked[0], output_tokens=(5,) * (profile.max_batch + 1)), *ranked[1:]]
    assert not FirstTokenBound(profile, too_many, np.ones(len(ranked), dtype=bool), TRACE_SLO).holds
