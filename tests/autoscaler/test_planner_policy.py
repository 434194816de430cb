"""The planner as the service runs it: config, mix from the pods' counters, the tail guard, the loop."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from autoscaler_testkit import FakeClock, KubeEmulator, PodMetrics, write_profile
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler import cli
from autoscaler.actuate.kubernetes import DeploymentScaler
from autoscaler.aggregate import LatencyStats, PodSample, WindowAggregator, WindowStats
from autoscaler.capacity import choices_per_second, step_estimate
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.collect.exposition import parse_exposition
from autoscaler.config import ConfigError, PlannerSpec, RateLimit, ScalerSpec, parse_config, parse_registration
from autoscaler.loop import Controller
from autoscaler.planner import (
    Mix,
    PlannerState,
    burst_level,
    erlang_c,
    load_evidence,
    planner_config,
    planner_decide,
    queue_replicas,
    queue_scale_in_hold,
    running_batch,
    scale_in_hold,
    significant_slope,
    trend,
    trend_span_s,
    wait_budget_s,
)
from autoscaler.policy import build_policy
from autoscaler.profile import load_profile
from autoscaler.telemetry import Telemetry


@pytest.fixture
def profile_path(tmp_path):
    return write_profile(tmp_path / "profile.json")


def spec_for(profile_path, **planner) -> ScalerSpec:
    return ScalerSpec(
        type="planner", max_deployment_count=8, time_window=30, stabilization_window=60,
        planner=PlannerSpec(profile=str(profile_path), **planner),
    )  # fmt: skip


def window(
    started_per_s: float, *, pertoken_p99: float = 0.01, ttft_p99: float = 0.1, waiting: float = 0,
    kv_usage: float = 0.1, pods: int = 1, prompt: float = 32, output: float = 32, span: float = 30,
    instances: int | None = None,
) -> WindowStats:  # fmt: skip
    """A window in which ``started_per_s`` one-choice requests a second started and finished."""
    n = started_per_s * span
    stats = {
        "ttft": LatencyStats(n, ttft_p99 / 2, ttft_p99 / 2, ttft_p99 / 2, ttft_p99),
        "pertoken": LatencyStats(n, 0.01, 0.01, 0.01, pertoken_p99),
        "request": LatencyStats(n, 0.5, 0.5, 0.5, 1.0),
    }
    counters = {"finished": n, "prompt_tokens": n * prompt, "generation_tokens": n * output}
    gauges = {"waiting": waiting, "running": 1.0, "kv_usage": kv_usage}
    if instances is not None:
        gauges["instances"] = instances
    return WindowStats(latencies=stats, gauges=gauges, pods=pods, span=span, counters=counters)


class Planner:
    """The planner's decide on a fake timeline; the replicas follow its decisions at once."""

    def __init__(self, spec: ScalerSpec, replicas: int) -> None:
        self.policy = build_policy(spec)
        self.spec, self.state = spec, self.policy.initial(replicas, 0.0)
        self.reasons: list[str] = []

    def at(self, now: float, win: WindowStats) -> int:
        decision, self.state = self.policy.decide(win, self.spec, self.state, now)
        self.reasons.append(decision.reason)
        self.values = decision.values
        return decision.desired


# -- one code, in the autoscaler's image (what it may import: pyproject.toml's [tool.importlinter]) ---


def test_the_simulators_planner_is_the_live_one():
    import autoscaler.capacity
    import autoscaler.planner
    import autoscaler.policy
    import autoscaler.profile
    import nlgsim.capacity
    import nlgsim.planner
    import nlgsim.policy
    import nlgsim.profile
    import nlgsim.slo

    assert nlgsim.planner.planner_decide is autoscaler.planner.planner_decide
    assert nlgsim.planner.planner_policy is autoscaler.policy.planner_policy
    assert nlgsim.policy.Policy is autoscaler.policy.Policy
    assert nlgsim.capacity.choices_per_second is autoscaler.capacity.choices_per_second
    assert nlgsim.profile.EngineProfile is autoscaler.profile.EngineProfile
    assert issubclass(nlgsim.slo.SLO, autoscaler.planner.SLO)


# -- configuration ---------------------------------------------------------------------------------


def test_a_planner_config_is_accepted_by_check(tmp_path, profile_path, capsys):
    config = tmp_path / "autoscaler.yaml"
    config.write_text(json.dumps({"scaler": {"type": "planner", "planner": {"profile": str(profile_path)}}}))
    assert cli.main(["--config", str(config), "--check"]) == 0
    assert "ok" in capsys.readouterr().out


def test_the_committed_profiles_are_planner_profiles():
    for name in ("cpu-gpt2-fp32", "h100-gpt2-xl-fp16"):
        spec = ScalerSpec(type="planner", planner=PlannerSpec(profile=f"benchmarks/profiles/{name}.json"))
        assert spec.validate() == []


def test_a_bad_planner_config_names_every_error_at_once(tmp_path, capsys):
    config = tmp_path / "autoscaler.yaml"
    planner = {"profile": str(tmp_path / "missing.json"), "slo_percentile": 1.5, "ttft_slo": -1, "drain_time": 0}
    config.write_text(json.dumps({"scaler": {"type": "planner", "planner": planner}}))
    assert cli.main(["--config", str(config), "--check"]) == 2
    err = capsys.readouterr().err
    for key in ("planner.profile", "planner.slo_percentile", "planner.ttft_slo", "planner.drain_time"):
        assert f"scaler.{key}" in err
    assert "not found" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"max_batch": 4}, "lacks hardware"),
        ("[1, 2]", "top level is list"),
        ("{not json", "is not JSON"),
        ({"decode_batch": [4, 1]}, "decode_batch = [4, 1], must be strictly increasing"),
    ],
    ids=["lacks-fields", "not-an-object", "not-json", "bad-grid"],
)
def test_a_profile_that_cannot_be_planned_with_is_named(tmp_path, profile_path, profile, message):
    bad = tmp_path / "bad.json"
    if isinstance(profile, dict) and "decode_batch" in profile:
        profile = {**json.loads(profile_path.read_text()), **profile}
    bad.write_text(profile if isinstance(profile, str) else json.dumps(profile))
    with pytest.raises(ConfigError) as e:
        parse_config({"scaler": {"type": "planner", "planner": {"profile": str(bad)}}})
    assert any(err.startswith("scaler.planner.profile") and message in err for err in e.value.errors), e.value.errors


def test_a_planner_needs_a_profile_but_other_types_do_not():
    with pytest.raises(ConfigError) as e:
        parse_config({"scaler": {"type": "planner"}})
    assert any("scaler.planner.profile = '': required" in err for err in e.value.errors)
    assert parse_config({"scaler": {"type": "pertoken"}}).scaler.planner == PlannerSpec()


def test_the_api_refuses_a_planner_whose_profile_is_a_server_file(profile_path):
    with pytest.raises(ConfigError) as e:
        parse_registration({"model_id": "gpt2", "scaler": {"type": "planner", "planner": {"profile": "/etc/passwd"}}})
    assert e.value.errors == ["scaler.type = 'planner': set it in the config file, not through the API"]


# -- the pods' counters ---------------------------------------------------------------------------


def test_counters_are_read_from_exposition_summed_over_finish_reasons():
    pod = PodMetrics()
    try:
        pod.serve_requests(3, prompt=10, output=4, ttft_s=0.1, pertoken_s=0.01, reason="stop")
        pod.serve_requests(2, prompt=10, output=4, ttft_s=0.1, pertoken_s=0.01, reason="length")
        sample = parse_exposition(generate_latest(pod.registry).decode(), "gpt2")
    finally:
        pod.stop()
    assert sample.counters == {"prompt_tokens": 50, "generation_tokens": 20, "finished": 5}
    assert parse_exposition(generate_latest(pod.registry).decode(), "other").counters == {}


def test_instances_are_the_model_info_series_of_the_model_summed():
    # As tritonserver's /metrics shows the model's info metric: one series per instance, value 1.
    page = "\n".join(
        f'nlg_model_info{{model="{model}",version="1",model_instance="{model}_{i}",preset="gpt2",'
        f'weights="random",dtype="float32",device="cpu"}} 1'
        for model, count in (("gpt2", 3), ("other", 2))
        for i in range(count)
    )
    assert parse_exposition(page, "gpt2").gauges["instances"] == 3
    assert "instances" not in parse_exposition(page.replace("nlg_model_info", "nlg_other_info"), "gpt2").gauges


@pytest.mark.parametrize(
    ("values", "want"),
    [((10, 30, 60), 50), ((10, 30, 5), 25), ((10,), None), ((10, math.nan, 40), 30)],
    ids=["rising", "restart-counts-from-zero", "baseline-only", "nan-ignored"],
)
def test_a_counter_increase_over_the_window(values, want):
    agg = WindowAggregator(time_window=60, stale_after=10)
    for t, v in enumerate(values):
        agg.record(float(t), {"pod": PodSample(counters={"finished": v})})
    assert agg.window(float(len(values))).counters.get("finished") == want


# -- sizing and the mix ----------------------------------------------------------------------------


@pytest.mark.parametrize("headroom", [None, 1.0, 0.6])
def test_replicas_are_demand_over_what_one_replica_carries_at_the_slo(profile_path, headroom):
    """A replica is planned at ``headroom`` (0.85 by default) of what it carries at the planned per-token latency."""
    spec = spec_for(profile_path) if headroom is None else spec_for(profile_path, headroom=headroom)
    per_replica = choices_per_second(load_profile(profile_path), 0.6 * 0.050, 32, 32, 1) * (headroom or 0.85)
    p = Planner(spec, 1)
    count = p.at(0, window(20))
    assert p.values["throughput_replicas"] == math.ceil(20 / per_replica)
    assert count == max(p.values["throughput_replicas"], p.values["queue_replicas"])


def test_the_mix_is_measured_from_the_pods_counters_and_kept_through_quiet_windows(profile_path):
    p = Planner(spec_for(profile_path, prompt_tokens=10, output_tokens=10), 1)
    p.at(0, window(5, prompt=400, output=20))
    assert (p.values["prompt_tokens"], p.values["output_tokens"]) == (400, 20)
    quiet = WindowStats(latencies={}, gauges={"waiting": 0, "running": 0}, pods=1, span=30)
    p.at(10, quiet)
    assert (p.values["prompt_tokens"], p.values["output_tokens"]) == (400, 20)


def test_longer_prompts_measured_need_more_replicas(profile_path):
    short = Planner(spec_for(profile_path), 1).at(0, window(20, prompt=32))
    long = Planner(spec_for(profile_path), 1).at(0, window(20, prompt=600))
    assert long > short


def test_a_linear_ramp_is_forecast_one_start_up_ahead_of_now_not_of_the_windows_middle(profile_path):
    """Demand rises by 0.5 choices/s each second; a 30 s window's average is the demand of 15 s ago.

    The plan is the demand one lead time after *now*: the forecast reaches over half a window more
    than the lead, or the pods for a ramp come half a window late.
    """
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    p = Planner(spec, 1)
    for t in range(30, 120, 5):
        p.at(t, window(0.5 * (t - 15), span=30))
        if t - 30 >= cfg.trend_window_s / 2:  # the demand seen spans half the trend window: a trend
            assert p.values["planned"] == pytest.approx(0.5 * (t + cfg.lead_s)), t
        else:  # too short a history for a slope: demand as measured
            assert p.values["planned"] == pytest.approx(p.values["demand"]), t
    steady = Planner(spec, 1)
    for t in range(30, 120, 5):
        steady.at(t, window(20, span=30))
    assert steady.values["planned"] == pytest.approx(20)  # no trend, nothing added


def test_the_trend_is_fitted_over_at_least_two_windows(profile_path):
    cfg = planner_config(spec_for(profile_path).planner, load_profile(profile_path))
    assert trend_span_s(cfg, 10) == trend_span_s(cfg, cfg.trend_window_s / 2) == cfg.trend_window_s
    assert trend_span_s(cfg, 120) == 240


def test_a_burst_that_long_windows_average_in_is_not_taken_for_a_trend(profile_path):
    """Twenty choices a second, forty for 30 s of it. A 120 s window takes the burst in over 30 s, so
    the windows of a 60 s trend window, each sharing most of its requests with the others, rise together
    on a line with no scatter to test the slope against: fitted there, the burst's half-replica step
    read as a slope the lead multiplies into 15% more than the work. Fitted over two windows' spans,
    the step is a step, and the forecast stays within 1% of the work."""

    def rate(second: int) -> float:
        return 40.0 if 300 <= second < 330 else 20.0

    p = Planner(spec_for(profile_path), 4)
    for t in range(120, 600, 5):
        p.at(t, window(sum(rate(s) for s in range(t - 120, t)) / 120, span=120, pods=4))
        work = p.values["demand"] / p.values["per_replica"]
        assert p.values["forecast"] <= 1.01 * work, t


def test_a_ramp_measured_over_long_windows_keeps_its_trend(profile_path):
    """Demand rises by 0.5 choices/s each second; a 120 s window's average is that of 60 s ago. Once
    the work seen spans half of two windows, the forecast is the demand one start-up after now."""
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    p = Planner(spec, 1)
    for t in range(120, 400, 5):
        p.at(t, window(0.5 * (t - 60), span=120))
        if t - 120 >= trend_span_s(cfg, 120) / 2:
            assert p.values["planned"] == pytest.approx(0.5 * (t + cfg.lead_s)), t
        else:
            assert p.values["planned"] == pytest.approx(p.values["demand"]), t


def test_noise_just_after_a_start_is_not_taken_for_a_trend(profile_path):
    """Three rounds after a (re)start, demand 4.4, 4.8, 5.1: a slope that the lead would multiply into
    twice the demand. Until the history spans half the trend window the plan is the demand seen."""
    p = Planner(spec_for(profile_path), 3)
    for t, demand in ((0, 4.4), (5, 4.8), (10, 5.1)):
        p.at(t, window(demand, span=30, pods=3))
    assert p.values["planned"] == pytest.approx(5.1)


def test_before_any_request_finished_the_configured_mix_stands_in(profile_path):
    spec = spec_for(profile_path, prompt_tokens=77, output_tokens=33)
    state = PlannerState(1)
    empty = WindowStats(latencies={}, gauges={"waiting": 0.0, "running": 0.0}, pods=1, span=30)
    decision, state = planner_decide(empty, spec, state, 0.0, planner_config(spec.planner, load_profile(profile_path)))
    assert (decision.values["prompt_tokens"], decision.values["output_tokens"]) == (77, 33)
    assert decision.desired == 1  # nothing demanded: the floor


# -- the tail guard --------------------------------------------------------------------------------


def test_a_tail_over_the_slo_without_load_never_ratchets(profile_path):
    """Long prompts, short outputs: p99 per-token misses the SLO even on idle replicas; one request
    waits at each scrape (in a burst some always do), none waited long.

    Ten minutes of it: the planner never adds a pod and scales in to what demand needs.
    """
    spec = spec_for(profile_path)
    p = Planner(spec, 6)
    seen = [
        p.at(t, window(1, prompt=900, output=3, pertoken_p99=0.2, waiting=1, pods=p.state.replicas))
        for t in range(0, 600, 5)
    ]
    needed = max(p.values["throughput_replicas"], p.values["queue_replicas"])
    assert needed < 6
    assert max(seen) <= 6 and seen[-1] == needed
    assert all("over SLO, not load" in r for r in p.reasons)


def test_a_tail_over_the_slo_of_requests_that_waited_adds_a_pod_then_scales_in(profile_path):
    """TTFT p99 1.5 s, longer than the longest prompt takes alone (1.04 s): requests waited. The misses
    are remembered: at that demand, four replicas, until the burst lookback has passed; then one."""
    spec = spec_for(profile_path)
    lookback = planner_config(spec.planner, load_profile(profile_path)).lookback_s
    p = Planner(spec, 2)
    assert p.at(0, window(1, pertoken_p99=0.2, ttft_p99=1.5, pods=2)) == 3
    assert "with load (TTFT p99 1.5e+03 ms over the longest prompt's 1.04e+03 ms alone)" in p.reasons[-1]
    assert p.at(5, window(1, pertoken_p99=0.2, ttft_p99=1.5, pods=2)) == 3  # the third pod is starting
    assert "3 learned: the SLO missed at" in p.reasons[-1]
    # The 30 s window still holds the round at 5 s, when two served: its tail is theirs.
    assert p.at(30, window(1, pertoken_p99=0.2, ttft_p99=1.5, pods=3)) == 3
    assert p.at(36, window(1, pertoken_p99=0.2, ttft_p99=1.5, pods=3)) == 4  # three served all of it
    remembered = [p.at(t, window(1, pods=p.state.replicas)) for t in range(41, int(30 + lookback), 5)]
    assert set(remembered) == {4}
    assert "4 learned: the SLO missed at" in p.reasons[-1]
    calm = [p.at(t, window(1, pods=p.state.replicas)) for t in range(int(30 + lookback), int(30 + lookback) + 400, 5)]
    assert calm[-1] == 1
    assert "learned" not in p.reasons[-1]


def test_slow_steps_count_as_load_and_one_request_waiting_does_not(profile_path):
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    calm = window(1, waiting=1)
    assert load_evidence(calm, cfg, 1, 10) == []
    slow_steps = replace(calm, latencies={**calm.latencies, "itl": LatencyStats(100, 0.03, 0.03, 0.05, 0.08)})
    assert load_evidence(slow_steps, cfg, 1, 10) == ["inter-token p99 80 ms over 50 ms"]
    queued = replace(calm, latencies={**calm.latencies, "queue": LatencyStats(30, 0.5, 0.5, 1.5, 2.0)})
    assert load_evidence(queued, cfg, 1, 10) == ["queue time p99 2e+03 ms"]


def test_instances_in_one_pod_count_as_replicas_for_the_tail(profile_path):
    """The Triton actuator: one pod, its instances the replicas. The tail of requests that waited adds
    a third instance, waits while it loads and for a window served by three, then adds a fourth, as it
    would pods."""
    p = Planner(spec_for(profile_path), 2)
    waited = {"pertoken_p99": 0.2, "ttft_p99": 1.5, "pods": 1}
    assert p.at(0, window(1, **waited, instances=2)) == 3
    assert p.at(5, window(1, **waited, instances=2)) == 3  # the third is loading
    assert p.at(30, window(1, **waited, instances=3)) == 3  # the window holds the round at 5 s
    assert p.at(36, window(1, **waited, instances=3)) == 4
    assert "with load (TTFT p99" in p.reasons[-1]


def test_demand_per_replica_is_over_the_instances_serving(profile_path):
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    capacity = choices_per_second(cfg.profile, cfg.per_token_target_s, 32, 32, 1)
    busy = window(2.5 * capacity, pods=1, instances=3)  # under one instance's capacity each
    assert load_evidence(busy, cfg, 2.5 * capacity, capacity) == []
    assert load_evidence(replace(busy, gauges={**busy.gauges, "instances": 2}), cfg, 2.5 * capacity, capacity)


def test_a_nearly_full_kv_cache_counts_as_load(profile_path):
    p = Planner(spec_for(profile_path), 2)
    assert p.at(0, window(1, pertoken_p99=0.2, kv_usage=0.95, pods=2)) == 3
    assert "KV cache 95% used" in p.reasons[-1]


def test_a_ttft_tail_without_load_is_reported_not_scaled(profile_path):
    """TTFT p99 0.9 s against a 0.5 s SLO, within what the longest prompt takes alone (1.04 s): the
    prompts that miss would miss on an idle replica."""
    p = Planner(spec_for(profile_path, ttft_slo=500), 2)
    assert p.at(0, window(1, ttft_p99=0.9, pods=2)) <= 2
    assert "ttft_p99 900 ms > 500 ms: over SLO, not load" in p.reasons[-1]


# -- the live loop ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_controller_scales_out_and_in_with_the_planner(profile_path):
    """A real pod /metrics server, the direct source, kmock's Deployment and a fake clock."""
    clock = FakeClock()
    spec = ScalerSpec(
        type="planner", max_deployment_count=6, time_window=10, stabilization_window=20,
        scale_down=RateLimit(max_pods=1, max_percent=0, period=5),
        planner=PlannerSpec(profile=str(profile_path), startup=5),
    )  # fmt: skip
    pod = PodMetrics()
    try:
        with KubeEmulator() as cluster:
            cluster.add_deployment("triton", replicas=1)
            registry = CollectorRegistry()
            source = DirectSource(StaticTargets([pod.target]), timeout=2.0, stale_after=3.0)
            actuator = DeploymentScaler(k8s.AppsV1Api(cluster.client()), "default")
            ctl = Controller(source, actuator, Telemetry(registry), source_kind="direct", clock=clock)
            ctl.targets.set_config_target("gpt2", spec, "triton")
            ctl.run_once()
            for _ in range(8):  # 15 requests a second of 64-token prompts
                pod.serve_requests(15, prompt=64, output=32, ttft_s=0.2, pertoken_s=0.02)
                clock.advance(1)
                ctl.run_once()
            out = cluster.replicas("triton")
            view = ctl.targets.view("gpt2")
            assert view is not None
            assert view["metrics"]["prompt_tokens"] == pytest.approx(64)
            cfg = planner_config(spec.planner, load_profile(profile_path))
            per_replica = choices_per_second(cfg.profile, cfg.per_token_target_s, 64, 32, 1) * cfg.headroom
            assert out >= math.ceil(15 / per_replica) > 1
            target = {"model": "gpt2", "signal": "pertoken_p99"}
            assert registry.get_sample_value("nlg_autoscaler_signal_target", target) == 50
            for _ in range(15):  # the load stops
                clock.advance(1)
                ctl.run_once()
            assert cluster.replicas("triton") == out  # inside the 20 s stabilization window
            for _ in range(90):  # the burst level remembers ten start-ups (50 s) of demand
                clock.advance(1)
                ctl.run_once()
            assert cluster.replicas("triton") == 1
            assert "demand 0/s" in ctl.targets.view("gpt2")["decisions"][0]["reason"]
    finally:
        pod.stop()


# -- bursts: the level one start-up can bring, the TTFT queue, scale-in between bursts ---------------


def test_the_burst_level_is_a_quantile_of_each_start_up_slots_peak_not_the_mean():
    """Ten 60 s slots; in each a 10 s burst of 50/s among rounds of 2/s (one slot's burst 200/s)."""
    history = tuple((float(t), 50.0 if t % 60 == 30 else 2.0) for t in range(5, 600, 5)) + ((590.0, 200.0),)
    assert burst_level(history, 600, 60, 600, 0.9) == 50  # the outlying slot is the one left out
    assert burst_level(history, 600, 60, 600, 1.0) == 200
    assert burst_level(history, 600, 60, 120, 0.9) == 200  # two slots: the quantile is their peak
    assert burst_level((), 600, 60, 600, 0.9) == 0


@pytest.mark.parametrize(
    ("servers", "offered", "want"),
    [(1, 0.5, 0.5), (2, 1.0, 1 / 3), (3, 0.0, 0.0), (2, 2.0, 1.0), (10, 5.0, 0.0361)],
    ids=["m-m-1-is-rho", "two-servers", "no-load", "saturated", "ten-servers"],
)
def test_erlang_c_waiting_probability(servers, offered, want):
    assert erlang_c(servers, offered) == pytest.approx(want, abs=1e-4)


def test_the_ttft_queue_needs_more_replicas_as_prompts_grow_and_none_without_load(profile_path):
    cfg = planner_config(PlannerSpec(profile=str(profile_path), ttft_slo=1000), load_profile(profile_path))
    short, long = Mix(32, 32, 1.0), Mix(600, 32, 1.0)
    assert queue_replicas(cfg, 0.0, short, 64) == 0
    assert 0 < queue_replicas(cfg, 20.0, short, 64) <= queue_replicas(cfg, 20.0, long, 64)
    assert queue_replicas(cfg, 20.0, long, 64) < queue_replicas(cfg, 40.0, long, 64)
    assert queue_replicas(cfg, 1e6, long, 64) == 64  # capped at the bound it may use


def test_a_count_set_by_the_ttft_queue_says_so(profile_path):
    """Prompts whose prefill takes 0.92 s of a 1 s TTFT: little time to wait, so the queue of
    prefills, not the tokens to carry, decides the count."""
    p = Planner(spec_for(profile_path, ttft_slo=1000), 1)
    p.at(0, window(2, prompt=900, output=64))
    assert "by TTFT queue" in p.reasons[-1]
    assert p.values["queue_replicas"] > p.values["throughput_replicas"]


def test_short_outputs_may_wait_less_for_their_first_token(profile_path):
    """Per-token latency is the whole latency over the tokens: an output of a few tokens must get its
    first within little more than the per-token limit times its tokens, far less than the TTFT limit."""
    cfg = planner_config(PlannerSpec(profile=str(profile_path), ttft_slo=1000), load_profile(profile_path))
    assert wait_budget_s(cfg.slo, 1, 0.02) == pytest.approx(0.05)
    assert wait_budget_s(cfg.slo, 4, 0.02) == pytest.approx(4 * 0.05 - 3 * 0.02)
    assert wait_budget_s(cfg.slo, 400, 0.02) == pytest.approx(1.0)
    short, long = Mix(64, 4, 1.0), Mix(64, 400, 1.0)
    assert queue_replicas(cfg, 20.0, short, 64) > queue_replicas(cfg, 20.0, long, 64)
    # With only the TTFT limit named, the output does not change what a request may wait.
    ttft_only = replace(cfg, slo=replace(cfg.slo, attain=("ttft",)))
    assert queue_replicas(ttft_only, 20.0, short, 64) == queue_replicas(ttft_only, 20.0, Mix(64, 400, 1.0), 64)


def test_a_replica_runs_the_batch_its_share_of_the_load_makes(profile_path):
    """Little's law: the sequences running are the rate times how long each decodes, at the steps that
    batch makes; one at a trickle, the most the per-token target allows under a flood."""
    cfg = planner_config(PlannerSpec(profile=str(profile_path), ttft_slo=1000), load_profile(profile_path))
    mix = Mix(64, 100, 1.0)
    batches = [running_batch(cfg, rate, mix, 16) for rate in (0.01, 1.0, 5.0, 1e6)]
    assert batches[0] == 1 and batches[-1] == 16
    assert batches == sorted(batches)
    middle = batches[1]
    step = step_estimate(cfg.profile, middle, mix.prompt_tokens, mix.output_tokens, mix.choices)
    assert 1 < middle < 16
    assert middle == math.ceil(1.0 * mix.output_tokens * step)  # a fixed point of the law


def test_short_outputs_slowed_by_a_full_batch_ask_for_replicas_not_for_none(profile_path):
    """Feasible alone, a short output may have no wait to spare behind a full batch's slow steps: that
    is a miss to plan replicas against (more replicas, smaller batches), not an infeasible request."""
    cfg = planner_config(PlannerSpec(profile=str(profile_path), ttft_slo=1000), load_profile(profile_path))
    counts = [queue_replicas(cfg, rate, Mix(64, 4, 1.0), 64) for rate in (1.0, 20.0, 60.0, 200.0)]
    assert all(c >= 1 for c in counts)
    assert counts == sorted(counts)


def test_a_mix_that_misses_the_slo_even_alone_needs_no_queue(profile_path):
    """One-token outputs after prompts whose prefill alone is over the per-token limit: infeasible,
    as the SLO's attainment counts them, so no count of replicas is asked for them."""
    cfg = planner_config(PlannerSpec(profile=str(profile_path), ttft_slo=1000), load_profile(profile_path))
    assert queue_replicas(cfg, 20.0, Mix(900, 1, 1.0), 64) == 0


def test_bursts_shorter_than_a_start_up_are_planned_for_between_them(profile_path):
    """10 s bursts of 40/s every 90 s, 1/s between: the rounds between bursts plan for the burst."""
    p = Planner(spec_for(profile_path, startup=60), 1)
    counts = []
    for t in range(0, 600, 5):
        rate = 40 if t % 90 < 10 else 1
        counts.append(p.at(t, window(rate, span=10, pods=p.state.replicas)))
    burst_need = p.values["throughput_replicas"]
    assert min(counts[-30:]) >= burst_need > 1
    assert "(burst)" in p.reasons[-1]


def test_scale_in_waits_for_the_gap_between_bursts_learned_from_them(profile_path):
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    # Work in replicas' worth: 3.5 for ten seconds of every hundred, a tenth of one otherwise.
    bursts = tuple((float(t), 3.5 if t % 100 < 10 else 0.1) for t in range(0, 400, 5))
    hold = scale_in_hold(bursts, 400, cfg, 4)
    assert "next burst due within 100 s (4 bursts seen)" in hold
    assert scale_in_hold(bursts, 400 + 100, cfg, 4) == ""  # a whole gap without one
    # Four replicas carry 3.5 replicas' worth running full, but not at the headroom; five do.
    assert cfg.headroom * 4 < 3.5 < cfg.headroom * 5
    assert "work over 3.4 replicas' worth (4 at 0.85)" in scale_in_hold(bursts, 400, cfg, 5)
    assert scale_in_hold(bursts, 400, cfg, 6) == ""
    one = ((0.0, 3.5), (5.0, 0.1))
    assert f"due within {cfg.lead_s:.0f} s (1 bursts seen)" in scale_in_hold(one, cfg.lead_s / 2, cfg, 4)
    assert scale_in_hold(one, 30, cfg, 1) == ""


def test_a_trend_counts_only_the_rise_its_scatter_does_not_explain():
    ramp = tuple((float(t), 0.05 * t) for t in range(0, 65, 5))
    assert significant_slope(ramp, span=30) == pytest.approx(0.05)  # on a line: all of it
    # A flat load of 4.5 replicas' worth measured with +-10% uniform noise (one draw), rounds 5 s apart
    # over 30 s windows: its least-squares slope times one start-up is most of a replica; counting the
    # windows' overlap, the slope is within its error.
    drawn = (4.21, 4.08, 4.19, 4.45, 4.34, 4.45, 4.5, 4.69, 4.57, 4.92, 4.9, 4.86, 4.52)
    noisy = tuple((5.0 * i, v) for i, v in enumerate(drawn))
    assert trend(noisy) * 80 > 0.9
    assert significant_slope(noisy, span=30) == 0.0
    assert significant_slope(tuple((t, -v) for t, v in ramp), span=30) == 0.0  # falling: no rise


def test_a_rate_that_falls_as_outputs_lengthen_is_not_less_load_nor_more(profile_path):
    """Eight requests a second of 200 tokens, then four of 400: about the same work. The burst level
    remembers the first phase as work, not as a rate that the second phase's longer outputs would turn
    into twice the replicas."""
    spec = spec_for(profile_path, burst_lookback=600)
    p = Planner(spec, 1)
    for t in range(30, 300, 5):
        p.at(t, window(8, output=200, span=30, pods=p.state.replicas))
    short = p.state.replicas
    for t in range(300, 420, 5):
        p.at(t, window(4, output=400, span=30, pods=p.state.replicas))
    assert short <= p.state.replicas <= short + 1
    assert p.values["demand"] == pytest.approx(4)


def test_the_burst_settings_are_validated_every_error_at_once():
    errors = PlannerSpec(profile="x", burst_quantile=0, burst_lookback=-1).validate()
    assert any("scaler.planner.burst_quantile = 0: must be in (0, 1]" in e for e in errors)
    assert any(e.startswith("scaler.planner.burst_lookback = -1") for e in errors)
    assert any(e.startswith("scaler.planner.profile") for e in errors)


def test_the_burst_lookback_defaults_to_ten_start_ups(profile_path):
    profile = load_profile(profile_path)
    cfg = planner_config(PlannerSpec(profile=str(profile_path), startup=45), profile)
    assert cfg.lookback_s == 450
    assert planner_config(PlannerSpec(profile=str(profile_path), burst_lookback=120), profile).lookback_s == 120


def test_a_target_first_seen_is_not_scaled_in_before_a_stabilization_window(profile_path):
    """As with HPA's rules: after a start, a restart or a new leader, the planner keeps the replicas it finds
    for one stabilization window (60 s here) before the demand it measures may take them away."""
    planner = Planner(spec_for(profile_path), 4)
    assert planner.at(0, window(1)) == 4
    assert planner.at(65, window(1)) < 4


def test_scale_in_waits_while_one_replica_fewer_would_not_meet_the_ttft_queue_at_its_share(profile_path):
    """A replica stays while the TTFT queue at N/(N-1) of the rate needs all N: near the count the queue
    asks for, a replica let go on one round is asked back on the next."""
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    mix = Mix(64, 4, 1.0)  # short outputs: their first token has little wait to spare
    rates = [0.5 * k for k in range(1, 400)]
    # The highest rate one replica fewer carries, and the same rate with room to spare.
    edge = max(r for r in rates if queue_replicas(cfg, r, mix, 64) == 2)
    assert queue_replicas(cfg, edge * 3 / 2, mix, 64) >= 3
    assert "TTFT queue at 3/2 of the planned rate needs" in queue_scale_in_hold(cfg, edge, mix, 3, 64)
    clear = max(r for r in rates if queue_replicas(cfg, r * 3 / 2, mix, 64) <= 2)
    assert queue_replicas(cfg, clear, mix, 64) <= 2
    assert queue_scale_in_hold(cfg, clear, mix, 3, 64) == ""
    assert queue_scale_in_hold(cfg, edge, mix, 1, 64) == ""  # one replica always stays
    assert queue_scale_in_hold(cfg, 0.0, mix, 3, 64) == ""


def test_the_planner_holds_a_replica_the_ttft_queue_would_ask_back(profile_path):
    spec = spec_for(profile_path)
    cfg = planner_config(spec.planner, load_profile(profile_path))
    mix = Mix(64, 4, 1.0)
    rates = [0.5 * k for k in range(1, 400)]
    edge = max(r for r in rates if queue_replicas(cfg, r, mix, 64) == 2)
    p = Planner(spec, 3)
    for t in range(0, 300, 5):
        got = p.at(t, window(edge, prompt=64, output=4, pods=p.state.replicas))
    assert got == 3
    assert "held: the TTFT queue at 3/2" in p.reasons[-1]
