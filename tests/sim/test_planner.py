"""The planner as the simulator runs it (the live one, :mod:`autoscaler.planner`): capacity from the
profile, demand ahead by the lead time, tail guards, and a run through the simulator."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sim_testkit import paper_profile

from autoscaler.aggregate import LatencyStats, WindowStats
from autoscaler.capacity import mean_prefill_s
from autoscaler.config import ScalerSpec
from nlgsim.capacity import choices_per_second, saturation_rate, slo_batch, step_estimate
from nlgsim.planner import (
    PlannerConfig,
    PlannerState,
    learned_floor,
    planner_decide,
    planner_policy,
    remember_miss,
    trend,
)
from nlgsim.policy import Policy
from nlgsim.results import SLO, summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import SIMPLE, Request, thesis_requests

PROFILE = paper_profile(max_batch=16, startup_s=20.0)
CFG = PlannerConfig(
    profile=PROFILE,
    per_token_target_s=0.02,
    slo=SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken")),
    prompt_tokens=34,
    output_tokens=30,
    long_output_tokens=34,
    lead_s=25.0,
)
SPEC = ScalerSpec(max_deployment_count=10, stabilization_window=60)


def window(
    started_per_s: float, tokens: float = 30, span: float = 30, waiting: float = 0, p99_tok=0.01, pods=1,
    p99_itl=0.02,
):  # fmt: skip
    started = started_per_s * span
    stats = {
        "ttft": LatencyStats(started, 0.05, 0.05, 0.05, 0.1),
        "pertoken": LatencyStats(started, 0.01, 0.01, 0.01, p99_tok),
        "request": LatencyStats(started, 0.3, 0.3, 0.3, 0.4),
        "itl": LatencyStats(started * (tokens - 1), 0.01, 0.01, 0.01, p99_itl),
    }
    return WindowStats(latencies=stats, gauges={"waiting": waiting, "running": 1}, pods=pods, span=span)


class Planner:
    def __init__(self, replicas: int, cfg: PlannerConfig = CFG, spec: ScalerSpec = SPEC) -> None:
        self.state, self.cfg, self.spec = PlannerState(replicas), cfg, spec

    def at(self, now: float, win: WindowStats) -> int:
        decision, self.state = planner_decide(win, self.spec, self.state, now, self.cfg)
        return decision.desired


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


def test_steady_demand_gives_demand_over_capacity_per_replica():
    per_replica = choices_per_second(PROFILE, 0.02, 34, 30, 1) * CFG.headroom
    p = Planner(replicas=1)
    assert p.at(0, window(started_per_s=10)) == math.ceil(10 / per_replica)


def test_rising_demand_is_met_a_lead_time_ahead():
    flat, rising = Planner(1), Planner(1)
    # Rounds 15 s apart: the history spans half the 60 s trend window, enough for a slope.
    for t, rate in [(0, 5), (15, 5), (30, 5)]:
        flat.at(t, window(rate))
    for t, rate in [(0, 5), (15, 7.5), (30, 10)]:
        got = rising.at(t, window(rate))
    per_replica = choices_per_second(PROFILE, 0.02, 34, 30, 1) * CFG.headroom
    # The window's average (10) stands for its middle, 15 s ago: slope 1/6 per s over those 15 s and the
    # 25 s lead plans for 16.7 choices/s, not the 10 seen now.
    assert got == math.ceil((10 + (5 / 30) * (25 + 15)) / per_replica)
    assert got > math.ceil(10 / per_replica)


def test_backlog_in_the_queues_counts_as_demand():
    p = Planner(1)
    assert p.at(0, window(5, waiting=200)) > Planner(1).at(0, window(5))


def test_a_tail_over_its_slo_with_slow_steps_adds_a_replica_even_if_the_model_says_enough():
    p = Planner(3)
    assert p.at(0, window(0.5, p99_itl=0.06, p99_tok=0.08, pods=3)) == 4
    # The fourth pod is starting (3 report): help is on its way, no fifth yet.
    assert p.at(5, window(0.5, p99_itl=0.06, p99_tok=0.08, pods=3)) == 4


def test_a_tail_made_before_a_scale_up_asks_for_no_more_until_the_new_count_served_a_whole_window():
    slow = {"p99_itl": 0.06, "p99_tok": 0.08}
    p = Planner(3)
    assert p.at(0, window(0.5, pods=3, **slow)) == 4
    assert p.at(5, window(0.5, pods=3, **slow)) == 4  # the fourth is starting
    # Four serve from 10 s on, but until 35 s the 30 s window still holds rounds where three served.
    assert [p.at(t, window(0.5, pods=4, **slow)) for t in range(10, 35, 5)] == [4] * 5
    assert {n for _, _, n in p.state.misses} == {4}  # three served those tails: four needed, not five
    assert p.at(35, window(0.5, pods=4, **slow)) == 5  # now the tail is the four's
    assert p.state.misses[-1][::2] == (35, 5)


def test_requests_waiting_now_make_a_tail_the_new_counts_but_only_the_fewest_are_remembered_short():
    slow = {"p99_itl": 0.06, "p99_tok": 0.08}
    p = Planner(3)
    assert p.at(0, window(0.5, pods=3, **slow)) == 4
    assert p.at(5, window(0.5, pods=3, **slow)) == 4
    # Four serve, and requests still wait: the backlog is the four's, so one more now.
    assert p.at(10, window(0.5, pods=4, waiting=3, **slow)) == 5
    assert p.state.misses[-1][::2] == (10, 4)  # but the window proves only that three fell short


def test_requests_waiting_alone_are_not_load_for_the_tail():
    decision, _ = planner_decide(window(0.5, waiting=2, p99_tok=0.08, pods=3), SPEC, PlannerState(3), 0.0, CFG)
    assert "over SLO, not load" in decision.reason


def test_a_tail_over_its_slo_without_load_adds_nothing():
    decision, _ = planner_decide(window(0.5, p99_tok=0.08, pods=3), SPEC, PlannerState(3), 0.0, CFG)
    assert decision.desired == 2  # demand needs one; the scale-down removes one pod a minute
    assert "over SLO, not load" in decision.reason


def test_no_pods_reporting_holds():
    decision, state = planner_decide(WindowStats.empty(), SPEC, PlannerState(2), 0.0, CFG)
    assert (decision.desired, decision.valid) == (2, False)
    assert "no data" in decision.reason


def test_scale_down_waits_for_the_stabilization_window_and_bounds_apply():
    # select: max removes 100% at once (the default, min, removes one pod a minute); a burst level that
    # remembers 30 s has forgotten the high demand by 61 s
    p = Planner(
        6, cfg=replace(CFG, burst_lookback_s=30),
        spec=replace(SPEC, min_deployment_count=2, scale_down=replace(SPEC.scale_down, select="max")),
    )  # fmt: skip
    high = p.at(0, window(30))
    assert high >= 6
    assert p.at(30, window(0.1)) == high  # within the 60 s window of a high proposal
    assert p.at(61, window(0.1)) == 2  # then down to what demand needs, floored by min_deployment_count


def test_trend_is_a_least_squares_slope():
    assert trend(((0, 1.0), (1, 3.0), (2, 5.0))) == pytest.approx(2.0)
    assert trend(((0, 1.0), (1, 3.0))) == 0.0


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
    """Timeline: 10 s bursts of 40/s every 200 s, 0.5/s between, pods starting in 20 s, scale-down
    free to remove every pod after 30 s of stabilization. The first burst asks for pods that come
    after it; the planner keeps them through the gaps (its burst level looks back 250 s), so every
    later burst opens on them; a burst level that forgets after one start-up lets them go."""
    gap = 200.0
    bursts = [Request(0, b * gap + 60 + (i % 400) * 0.025, 34, (30,)) for b in range(4) for i in range(400)]
    calm = [Request(0, i * 2.0, 34, (30,)) for i in range(420)]
    reqs = [replace(r, id=i) for i, r in enumerate(sorted([*bursts, *calm], key=lambda r: r.arrival))]
    spec = replace(SPEC, stabilization_window=30, scale_down=replace(SPEC.scale_down, select="max", period=5))
    opening, first = {}, {}
    for name, cfg in (("kept", CFG), ("forgotten", replace(CFG, burst_lookback_s=CFG.lead_s))):
        log = simulate(Scenario(PROFILE, reqs, planner_policy(spec, cfg), loop_interval=5.0))
        opening[name] = [ready_at(log, b * gap + 59) for b in (1, 2, 3)]
        first[name] = max(ready for when, _, ready, _ in log.pod_changes if when <= gap)
    assert first["kept"] == first["forgotten"] > 2  # the first burst finds one pod either way
    assert opening["forgotten"] == [1, 1, 1]
    assert min(opening["kept"]) >= 2, opening


def test_a_miss_is_remembered_as_one_replica_more_than_served_it_for_the_burst_lookback():
    kept = remember_miss((), 100.0, CFG, work=2.5, serving=3, load=True)
    assert kept == ((100.0, 2.5, 4),)
    assert remember_miss(kept, 110.0, CFG, work=1.0, serving=3, load=False) == kept  # no load, no miss
    assert remember_miss(kept, 110.0, CFG, work=1.0, serving=0, load=True) == kept  # nothing served it
    assert remember_miss(kept, 100.0 + CFG.lookback_s, CFG, work=1.0, serving=1, load=False) == ()


def test_a_learned_floor_applies_at_the_work_it_was_seen_at_and_above_only():
    misses = ((0.0, 2.0, 4), (10.0, 5.0, 7))
    assert learned_floor(misses, 1.9) == (0, 0.0)
    assert learned_floor(misses, 2.0) == (4, 2.0)
    assert learned_floor(misses, 4.9) == (4, 2.0)
    assert learned_floor(misses, 6.0) == (7, 5.0)


def test_the_next_burst_opens_on_the_replicas_a_remembered_miss_needed():
    per_replica = choices_per_second(PROFILE, 0.02, 34, 30, 1)
    burst = window(2 * per_replica, pods=2)  # two replicas' worth, a healthy tail: the model asks for 3
    plain, _ = planner_decide(burst, SPEC, PlannerState(2), 100.0, CFG)
    seen = PlannerState(2, misses=((40.0, 1.9, 5),))  # four served 1.9 replicas' worth and missed the SLO
    learned, state = planner_decide(burst, SPEC, seen, 100.0, CFG)
    assert plain.desired == 3
    assert learned.desired == 5
    assert "5 learned: the SLO missed at 1.9 replicas' worth on 4" in learned.reason
    assert learned.values["learned_replicas"] == 5
    heavier = PlannerState(2, misses=((40.0, 2.5, 5),))  # seen at more work than now: holds nothing now
    assert planner_decide(burst, SPEC, heavier, 100.0, CFG)[0].desired == 3
    later = 40.0 + CFG.lookback_s  # forgotten after the burst lookback
    assert planner_decide(burst, SPEC, seen, later, CFG)[0].desired == 3


def test_a_tail_over_its_slo_with_load_is_remembered_with_the_replicas_that_served_it():
    _, state = planner_decide(window(0.5, p99_itl=0.06, p99_tok=0.08, pods=3), SPEC, PlannerState(3), 7.0, CFG)
    ((when, work, needed),) = state.misses
    assert (when, needed) == (7.0, 4)
    assert work == pytest.approx(0.5 / choices_per_second(PROFILE, 0.02, 34, 30, 1))
    _, calm = planner_decide(window(0.5, p99_tok=0.08, pods=3), SPEC, PlannerState(3), 7.0, CFG)
    assert calm.misses == ()  # over SLO but not load: nothing learned
