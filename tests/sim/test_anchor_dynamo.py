"""The ``dynamo`` anchor at Dynamo's documented defaults, as timelines: the throughput bound every 180 s,
the +-1 load decisions every 5 s above it, and no new step while the last one is still starting."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.aggregate import LatencyStats, WindowStats
from autoscaler.capacity import choices_per_second
from autoscaler.config import ScalerSpec
from nlgsim import anchor_dynamo
from nlgsim.anchor_dynamo import DynamoState, DynamoTargets, dynamo_decide, load_step
from nlgsim.anchors import ANCHORS
from nlgsim.cli import build_parser
from nlgsim.experiment import build_policy, planner_config
from nlgsim.profile import load_profile
from nlgsim.simulator import Scenario, simulate
from nlgsim.slo import SLO
from nlgsim.workload import COMPLEX, thesis_requests

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "benchmarks" / "profiles" / "h100-gpt2-xl-fp16.json")
TARGETS = DynamoTargets(PROFILE, ttft_s=0.5, itl_s=0.05, prompt_tokens=500, output_tokens=200)
SPEC = ScalerSpec(max_deployment_count=64)


def win(pods: int, running: float, waiting: float = 0.0, per_s: float = 1.0) -> WindowStats:
    """A 30 s window: ``per_s`` requests a second got their first token; no request finished in it."""
    started = LatencyStats(per_s * 30, 0.1, 0.1, 0.1, 0.1)
    return WindowStats({"ttft": started}, {"running": running, "waiting": waiting}, pods, 30.0)


def test_the_defaults_are_the_documented_ones():
    assert (anchor_dynamo.DYNAMO_THROUGHPUT_INTERVAL_S, anchor_dynamo.DYNAMO_LOAD_INTERVAL_S) == (180, 5)
    assert anchor_dynamo.DYNAMO_SCALE_DOWN_SENSITIVITY == 0.8
    assert (anchor_dynamo.DYNAMO_MIN_ENDPOINT, anchor_dynamo.DYNAMO_TTFT_S) == (1, 0.5)


@pytest.mark.parametrize(
    ("itl_s", "n", "running", "waiting", "step", "said"),
    [
        (0.05, 1, 64, 30, 1, "over, +1"),  # 31 prompts to prefill before the next first token: TTFT > 500 ms
        (0.012, 2, 64, 0, 1, "over, +1"),  # a full batch of 64: a step over a 12 ms ITL target
        (0.05, 1, 2, 0, 0, "within"),  # one engine never goes below min_endpoint
        (0.05, 3, 2, 0, -1, "-1"),  # on 2 engines, 3 running each: far within 80% of both targets
        (0.02, 2, 50, 0, 0, "ITL"),  # 100 on one engine of a 64-batch: a step over 80% of a 20 ms ITL target
        (0.05, 2, 1, 12, 0, "queued TTFT"),  # 24 queued prompts on one engine: over 80% of the TTFT budget
    ],
    ids=["ttft-over", "itl-over", "one-engine", "down", "down-refused-itl", "down-refused-ttft"],
)
def test_the_load_mode_steps_by_one_on_the_estimates_of_the_mean_engine(itl_s, n, running, waiting, step, said):
    got, reason = load_step(replace(TARGETS, itl_s=itl_s), n, running, waiting, 500, 200)
    assert got == step and said in reason, reason


def test_the_throughput_bound_is_the_predicted_rate_over_one_engines_capacity_and_lifts_at_once():
    capacity = choices_per_second(PROFILE, 0.05, 500, 200, 1.0)
    state = DynamoState.initial(1, 0.0)
    for t in range(0, 180, 5):  # 50 requests a second, the engine idle: no throughput decision yet
        d, state = dynamo_decide(win(1, 1, per_s=50), SPEC, state, float(t), TARGETS)
        assert d.desired == 1, (t, d.reason)
    d, state = dynamo_decide(win(1, 1, per_s=50), SPEC, state, 180.0, TARGETS)
    want = -(-50 // capacity)
    assert d.desired == want > 2 and f"bound {want:.0f}" in d.reason  # the constant predictor: 50/s again
    d, state = dynamo_decide(win(1, 1, per_s=50), SPEC, state, 185.0, TARGETS)
    assert d.desired == want and "scaling in progress" in d.reason  # the new pods are starting
    d, state = dynamo_decide(win(want, 1, per_s=0), SPEC, state, 190.0, TARGETS)
    assert d.desired == want and "-1" in d.reason  # the load mode would go down; the bound holds it
    for t in range(195, 365, 5):
        d, state = dynamo_decide(win(want, 1, per_s=0), SPEC, state, float(t), TARGETS)
    assert "bound 1" in d.reason and d.desired == want - 1  # an idle interval: the bound falls to 1


def test_a_saturated_fleets_demand_counts_the_growth_of_its_queue():
    capacity = choices_per_second(PROFILE, 0.05, 500, 200, 1.0)
    state = DynamoState.initial(1, 0.0)
    _, state = dynamo_decide(win(1, 64, 0, per_s=capacity), SPEC, state, 0.0, TARGETS)
    # Only what one engine carries starts; the rest queues: 10 a second more over the interval.
    d, _ = dynamo_decide(win(1, 64, 1800, per_s=capacity), SPEC, state, 180.0, TARGETS)
    assert d.values["demand"] == pytest.approx(capacity + 10)
    assert "bound 2" in d.reason


def test_between_load_decisions_it_holds_and_without_data_it_says_so():
    state = DynamoState.initial(2, 0.0)
    d, state = dynamo_decide(win(2, 64, 200), SPEC, state, 0.0, TARGETS)
    assert d.desired == 3
    d, state = dynamo_decide(win(3, 64, 200), SPEC, state, 2.0, TARGETS)
    assert d.desired == 3 and "next load decision at 5" in d.reason
    d, _ = dynamo_decide(WindowStats.empty(), SPEC, state, 5.0, TARGETS)
    assert (d.desired, d.valid) == (3, False)


def test_its_targets_are_the_slos_ttft_where_named_else_dynamos_and_the_per_token_allowance():
    requests = thesis_requests(COMPLEX, 10.0, 200, seed=1)
    cfg = planner_config(PROFILE, requests, SLO(), 5.0, None)
    assert anchor_dynamo.dynamo_targets(cfg).ttft_s == 0.5
    assert anchor_dynamo.dynamo_targets(cfg).itl_s == SLO().per_token_allowed(cfg.long_output_tokens)
    named = planner_config(PROFILE, requests, SLO(ttft_s=1.0, attain=("ttft", "pertoken")), 5.0, None)
    assert (anchor_dynamo.dynamo_targets(named).ttft_s, anchor_dynamo.dynamo_targets(named).itl_s) == (1.0, 0.05)


def test_the_cli_takes_dynamo_as_an_anchor_and_needs_the_planners_settings():
    cfg = planner_config(PROFILE, thesis_requests(COMPLEX, 10.0, 200, seed=1), SLO(), 5.0, None)
    policy, initial = build_policy("dynamo", ScalerSpec(max_deployment_count=8), cfg)
    assert policy is not None and (policy.name, initial) == ("dynamo", 1)
    with pytest.raises(ValueError, match="needs the planner's settings"):
        build_policy("dynamo", ScalerSpec())
    with pytest.raises(ValueError, match="an anchor: kpa, keda-waiting, dynamo"):
        build_policy("dynamo:3", ScalerSpec(), cfg)
    assert "an anchor: kpa, keda-waiting, dynamo" in " ".join(_run_help().split())


def _run_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["run"].format_help()  # type: ignore[attr-defined]


def test_the_simulator_docs_list_every_anchor():
    text = (ROOT / "docs" / "simulator.md").read_text()
    assert set(re.findall(r"^\| `([\w-]+)` \| anchor: ", text, re.M)) == set(ANCHORS)


def test_the_simulator_runs_it_through_the_live_controller():
    requests = thesis_requests(COMPLEX, 60.0, 3000, seed=1)
    cfg = planner_config(PROFILE, requests, SLO(), 5.0, 10.0)
    policy, initial = build_policy("dynamo", ScalerSpec(max_deployment_count=8), cfg)
    assert policy is not None
    log = simulate(Scenario(PROFILE, requests, policy, initial, startup_s=10))
    assert all(s.finish > 0 for s in log.states)
    assert max(c[1] for c in log.pod_changes) > 1 and all(r.reason for r in log.loops)
