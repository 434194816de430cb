"""Feasibility: each request alone on an idle replica, in closed form and as the simulator serves it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_testkit import paper_profile, req

from nlgsim.feasibility import alone_times, feasibility, infeasible
from nlgsim.profile import linear_profile
from nlgsim.results import summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.slo import SLO

SHAPES = [
    (10, (3,)),
    (10, (1,)),  # one token: finished with the prefill
    (600, (50,)),  # prefilled in three chunks of 256
    (34, (5, 1, 20, 20)),  # choices leave the batch as they finish
    (900, (2, 60)),
]
PROFILES = {
    "paper": paper_profile(max_batch=8),
    # Decode cost grows with context, padded to the longest (the eager engine's).
    "padded": replace(
        linear_profile(step_per_ctx_token_s=2e-5, max_batch=8), extra={"decode_cost_context": "max"}
    ),
}


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES.keys())
def test_alone_times_are_the_simulators_for_a_lone_request(profile):
    requests = [req(i, 0.0, prompt, *tokens) for i, (prompt, tokens) in enumerate(SHAPES)]
    alone = alone_times(profile, requests)
    for i, r in enumerate(requests):
        (state,) = simulate(Scenario(profile, [r], None)).states
        assert alone.ttft[i] == pytest.approx(state.first_token, rel=1e-9)
        assert alone.latency[i] == pytest.approx(state.finish, rel=1e-9)
        assert alone.per_token[i] == pytest.approx(state.per_token, rel=1e-9)


def test_long_prompts_with_short_outputs_are_infeasible_on_paper():
    # P(n) = 20 ms + 1 ms n, decode(1) = 11 ms. Prompt 1,000 and 2 tokens: (1.02 + 0.011) / 2 = 516 ms
    # a token. Prompt 10 and 30 tokens: (0.03 + 29 x 0.011) / 30 = 11.6 ms. Prompt 700 and 30 tokens:
    # (0.72 + 0.319) / 30 = 34.6 ms. Prompt 40 and 1 token: 60 ms.
    requests = [req(0, 0.0, 1000, 2), req(1, 0.0, 10, 30), req(2, 0.0, 700, 30), req(3, 0.0, 40, 1)]
    slo = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))
    assert list(infeasible(paper_profile(), requests, slo)) == [True, False, False, True]
    f = feasibility(paper_profile(), requests, slo)
    assert (f.requests, f.infeasible, f.missing) == (4, 2, {"ttft": 1, "pertoken": 2})
    assert "2 of 4 requests (50.00%) miss the SLO even alone" in f.describe()
    # Which latencies count is the SLO's: on request latency alone, all four are feasible.
    assert not infeasible(paper_profile(), requests, SLO(request_s=2.0)).any()


def test_more_choices_than_the_engine_runs_are_infeasible():
    alone = alone_times(paper_profile(max_batch=2), [req(0, 0.0, 10, 3, 3, 3)])
    assert np.isinf(alone.latency[0])
    assert infeasible(paper_profile(max_batch=2), [req(0, 0.0, 10, 3, 3, 3)], SLO()).all()


def test_a_run_states_attainment_over_the_feasible_requests_and_over_all():
    slo = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"), interval_s=10.0)
    requests = [req(i, 2.0 * i, 10, 30) for i in range(10)] + [req(10, 15.0, 1000, 2)]
    s = summarize(simulate(Scenario(paper_profile(), requests, None)), slo)
    assert (s.requests, s.infeasible) == (11, 1)
    assert s.attainment == pytest.approx(10 / 11)
    assert s.attainment_feasible == 1.0
    assert s.intervals_below_target == 0
    assert s.row()["feasible attain %"] == "100.00"
