"""The planner as the simulator runs it (the live one, :mod:`autoscaler.planner`): the capacity model on a
profile, and runs through the simulator: bursts shorter than a start-up, and misses that more replicas do not
fix in a steady load that arrives in groups."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from sim_testkit import paper_profile

from autoscaler.capacity import mean_prefill_s
from autoscaler.config import ScalerSpec
from nlgsim.capacity import choices_per_second, saturation_rate, slo_batch, step_estimate
from nlgsim.planner import PlannerConfig, planner_policy
from nlgsim.policy import Policy
from nlgsim.profile import load_profile
from nlgsim.results import SLO, summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import SIMPLE, Request, grouped, thesis_requests

PROFILE = paper_profile(max_batch=16, startup_s=20.0)
TRACE_SLO = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))
CFG = PlannerConfig(
    profile=PROFILE, slo=TRACE_SLO, lead_s=25.0, prompt_tokens=34, output_tokens=30, long_output_tokens=34,
)  # fmt: skip
SPEC = ScalerSpec(max_deployment_count=10, stabilization_window=60)


def test_capacity_model_on_paper():
    # Every prompt 34 tokens (spread=False): s(B) = 10 ms + B ms + B * P(34) / (1 * 30) with
    # P(34) = 54 ms: s(4) = 21.2 ms, s(3) = 18.4 ms.
    assert step_estimate(PROFILE, 3, 34, 30, 1, spread=False) == pytest.approx(0.010 + 0.003 + 3 * 0.054 / 30)
    assert slo_batch(PROFILE, 0.02, 34, 30, 1, spread=False) == 3
    assert choices_per_second(PROFILE, 0.02, 34, 30, 1, spread=False) == pytest.approx(3 / (30 * 0.0184))
    # Prompts of mean 34 (the default): P is linear, so their mean prefill is P at about 34 tokens.
    spread = step_estimate(PROFILE, 3, 34, 30, 1)
    assert spread == pytest.approx(0.010 + 0.003 + 3 * mean_prefill_s(PROFILE, 34) / 30)
    assert spread == pytest.approx(0.0184, rel=0.01)


def test_saturation_rate_of_one_replica():
    rate = saturation_rate(PROFILE, thesis_requests(SIMPLE, 1.0, 64, seed=0))
    # A request: 30 tokens in steps of 16 at 26 ms (49 ms of engine time) and a 54 ms prefill.
    assert rate == pytest.approx(1 / (30 * 0.026 / 16 + 0.054), rel=0.03)


def test_the_planner_is_a_policy_with_the_live_signature_and_runs_in_the_simulator():
    policy = planner_policy(SPEC, CFG)
    assert isinstance(policy, Policy)
    reqs = [
        *thesis_requests(SIMPLE, 2.0, 60, seed=1),
        *(Request(1000 + i, 30.0 + i * 0.02, 34, (30,)) for i in range(1500)),  # a 30 s burst of 50/s
    ]
    log = simulate(Scenario(PROFILE, sorted(reqs, key=lambda r: r.arrival), policy))
    s = summarize(log, SLO())
    assert s.max_replicas > 1
    assert s.requests == len(reqs)


def ready_at(log, t: float) -> int:
    """Ready pods at ``t`` on the run's clock."""
    return [ready for when, _, ready, _ in log.pod_changes if when <= t][-1]


def test_bursts_shorter_than_a_start_up_find_the_pods_the_first_one_asked_for():
    """Timeline: 10 s bursts of 40/s every 200 s, 0.5/s between, pods starting in 20 s, scale-down free to
    remove every pod after 30 s of stabilization. The first burst asks for pods that come after it; the
    burst floor keeps them, and those its misses taught the planner to add, through the gaps (the planner
    remembers ten start-ups, 250 s), so every later burst opens on more than one."""
    gap = 200.0
    bursts = [Request(0, b * gap + 60 + (i % 400) * 0.025, 34, (30,)) for b in range(4) for i in range(400)]
    calm = [Request(0, i * 2.0, 34, (30,)) for i in range(420)]
    reqs = [replace(r, id=i) for i, r in enumerate(sorted([*bursts, *calm], key=lambda r: r.arrival))]
    spec = replace(SPEC, stabilization_window=30, scale_down=replace(SPEC.scale_down, select="max", period=5))
    log = simulate(Scenario(PROFILE, reqs, planner_policy(spec, CFG), loop_interval=5.0))
    first = max(ready for when, _, ready, _ in log.pod_changes if when <= gap)
    opening = [ready_at(log, b * gap + 59) for b in (1, 2, 3)]
    assert first >= 2
    assert min(opening) >= first, opening


H100 = load_profile("benchmarks/profiles/h100-gpt2-xl-fp16.json")
#: One request in 200 cannot meet the SLO even alone: a 1,000-token prompt takes 56 ms to its only token.
INFEASIBLE_EVERY = 200


def steady_groups(rate: float, seconds: float, every_s: float, seed: int = 3) -> list[Request]:
    """Poisson arrivals of prompts and outputs of 64-192 tokens gathered in groups at one instant every
    ``every_s`` s, one request in :data:`INFEASIBLE_EVERY` a 1,000-token prompt with a one-token output."""
    rng = random.Random(seed)
    reqs: list[Request] = []
    t = rng.expovariate(rate)
    while t < seconds:
        i = len(reqs)
        lengths = (1000, 1) if i % INFEASIBLE_EVERY == 7 else (rng.randint(64, 192), rng.randint(64, 192))
        reqs.append(Request(i, t, lengths[0], (lengths[1],)))
        t += rng.expovariate(rate)
    return grouped(reqs, every_s)


def attained(reqs: list[Request], replicas: int) -> float:
    return summarize(simulate(Scenario(H100, reqs, None, initial_replicas=replicas)), TRACE_SLO).attainment_feasible


def test_misses_more_replicas_do_not_fix_do_not_ratchet_the_fleet():
    """A steady load that k replicas carry at the target, 0.5% of it infeasible even alone, arriving in groups
    at one instant every 2 s, the planner starting at k with the autoscaler's defaults: it never goes above
    k + 1, ends at k, and whenever a step up did not help it is back at k within one stabilization window."""
    reqs = steady_groups(rate=45.0, seconds=1200.0, every_s=2.0)
    assert sum(r.output_tokens == (1,) for r in reqs) / len(reqs) == pytest.approx(1 / INFEASIBLE_EVERY, rel=0.05)
    k = next(n for n in range(1, 10) if attained(reqs, n) >= TRACE_SLO.target)
    assert k >= 2 and attained(reqs, k - 1) < TRACE_SLO.target
    cfg = PlannerConfig(profile=H100, slo=TRACE_SLO, lead_s=H100.startup_s + 5.0)
    spec = ScalerSpec(max_deployment_count=10)
    log = simulate(Scenario(H100, reqs, planner_policy(spec, cfg), initial_replicas=k, loop_interval=5.0))
    counts = [desired for _, _, _, desired in log.pod_changes]
    assert max(counts) <= k + 1
    assert log.loops[-1].desired == k
    for judged in (r.time for r in log.loops if "did not raise attainment" in r.reason):
        back = next(r.time for r in log.loops if r.time >= judged and r.desired == k)
        assert back - judged <= spec.stabilization_window + spec.scale_down.period
