"""The named protocols: seeds and trace windows, what is measured in a window, and one command per table.

No pod a policy started before a measured window is billed in it; first scale-out on a step after a
warm-up is timed from the step; a trace window opens on the oracle's replicas; the CLI prints the
tables of the JSON it writes; the same plan gives the same numbers in one process or two.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sim_testkit import paper_profile

from autoscaler.config import ScalerSpec
from nlgsim.cli import build_parser, main, plan_from_args
from nlgsim.lagged import held_need
from nlgsim.oracle import ORACLE_WARMUP_S
from nlgsim.policy import hpa_policy
from nlgsim.protocol import (
    Plan,
    ProtocolResult,
    RunKey,
    _trace_cached,
    run_one,
    run_plan,
    thesis_requests_for,
    window_length,
)
from nlgsim.protocol_tables import tables
from nlgsim.results import summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.slo import SLO
from nlgsim.workload import SIMPLE, Request, thesis_requests

SLO_TRACE = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "paper.json"
    paper_profile(max_batch=8, startup_s=10.0).save(path)
    return str(path)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    """Six minutes at 2 req/s with a 20 s burst at 12 req/s every two minutes: the oracle needs more there."""
    rng = np.random.default_rng(4)
    rows, t = [], 0.0
    while t < 360:
        burst = 100 <= t % 120 < 120
        t += rng.exponential(1 / (12 if burst else 2))
        rows.append(f"{t:.3f},{int(rng.integers(20, 200))},{int(rng.integers(5, 40))}")
    path = tmp_path_factory.mktemp("trace") / "bursts.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return str(path)


def thesis_plan(profile_file, **changes) -> Plan:
    plan = Plan(
        protocol="thesis", profile=profile_file, workload="simple:2x", policies=("pertoken:20", "fixed:2"),
        slo=SLO(request_s=1.0), scaler=ScalerSpec(min_deployment_count=1, max_deployment_count=4),
        replicates=2, count=300,
    )  # fmt: skip
    return replace(plan, **changes)


def trace_plan(trace_file, profile_file, **changes) -> Plan:
    plan = Plan(
        protocol="trace", profile=profile_file, workload=f"trace:{trace_file}", lengths="clip",
        policies=("pertoken:15 w30", "planner", "fixed:1"), slo=SLO_TRACE,
        scaler=ScalerSpec(min_deployment_count=1, max_deployment_count=8, stabilization_window=60, time_window=30),
        replicates=2,
    )  # fmt: skip
    return replace(plan, **changes)


def test_the_thesis_protocol_runs_every_policy_on_every_seed(profile_file):
    result = run_plan(thesis_plan(profile_file))
    assert [(r.key.policy, r.key.replicate) for r in result.runs] == [
        ("pertoken:20", 0), ("fixed:2", 0), ("pertoken:20", 1), ("fixed:2", 1)
    ]  # fmt: skip
    assert {r.summary.requests for r in result.runs} == {300}
    # Two seeds, two arrival processes: the same fixed replicas see different loads.
    fixed = [r.summary for r in result.runs if r.key.policy == "fixed:2"]
    assert fixed[0].latency_p99_s != fixed[1].latency_p99_s
    text = json.dumps(result.to_json())
    assert json.dumps(ProtocolResult.from_json(json.loads(text)).to_json()) == text


def test_a_round_starts_only_at_control_from_and_the_window_bills_only_its_own_pods():
    # A heavy load from time 0: a policy acting during the warm-up would scale out at once.
    reqs = thesis_requests(SIMPLE, 20.0, 1200, seed=3)
    spec = ScalerSpec(max_deployment_count=8, threshold=15)
    log = simulate(Scenario(paper_profile(), reqs, hpa_policy(spec), initial_replicas=2, control_from=30.0))
    assert log.loops[0].time == 30.0  # its first round, with a window full of the warm-up's scrapes
    assert log.loops[0].desired > log.loops[0].current
    created = [c for c in log.pod_changes if c[0] < 30.0]
    assert max(c[1] for c in created) == 2  # nothing but the initial replicas before the window
    s = summarize(log, SLO(), since=30.0, until=50.0)
    # Billed over [30, 50]: the two initial pods all along, and only what the policy added from 30 on.
    later = [(t, n) for t, _, _, n in log.pod_changes if 30.0 <= t <= 50.0]
    assert s.gpu_seconds >= 2 * 20.0
    assert s.gpu_seconds <= max(n for _, n in later) * 20.0
    assert s.first_scale_s == 0.0  # timed from the window: it acted on its first round


def test_a_step_after_warm_up_is_measured_from_the_step(profile_file):
    plan = thesis_plan(profile_file, workload="simple:3x", warmup_s=60.0, warmup_rate="0.2x", replicates=1)
    reqs = thesis_requests_for(plan, 0)
    light = [r for r in reqs if r.arrival < 60.0]
    assert 0 < len(light) < len(reqs) - 299 and len(reqs) - len(light) == 300
    assert len({r.id for r in reqs}) == len(reqs)
    result = run_plan(plan)
    run = next(r for r in result.runs if r.key.policy == "pertoken:20")
    # Light load for a minute, then 3x one replica: it scales out after the step, timed from it.
    assert 0 <= run.summary.first_scale_s < 30
    assert run.summary.requests == 300  # the warm-up's requests are not scored
    assert run.timeline[0] == (0.0, 1)  # one pod when the step comes


def test_trace_windows_open_on_the_oracles_replicas_and_bill_only_the_window(trace_file, profile_file):
    plan = trace_plan(trace_file, profile_file)
    result = run_plan(plan)
    orc = result.oracle
    assert orc is not None and max(orc.replicas) > min(orc.replicas)  # the bursts need more
    length = window_length(plan, _trace_cached(plan)[-1].arrival)
    assert length % 30 == 0 and length >= 30
    for rep in result.replicates:
        start = ORACLE_WARMUP_S + rep.index * length
        first = int(start // orc.interval_s)
        assert rep.initial == orc.replicas[first]
        assert rep.oracle_gpu_s == pytest.approx(sum(orc.replicas[first : first + int(length // 30)]) * 30)
        assert rep.startup_bound_gpu_s >= rep.oracle_gpu_s
        runs = {r.key.policy: r for r in result.runs if r.key.replicate == rep.index}
        assert runs["fixed:1"].summary.gpu_seconds == pytest.approx(length)  # one pod, the window long
        for policy in ("pertoken:15 w30", "planner"):
            assert runs[policy].timeline[0] == (0.0, rep.initial)
            assert runs[policy].summary.requests == rep.requests


def test_the_oracle_is_never_above_a_policy_that_meets_the_target_in_a_window(trace_file, profile_file):
    plan = trace_plan(trace_file, profile_file, policies=("fixed:2", "fixed:4", "fixed:8"))
    result = run_plan(plan)
    met = 0
    for run in result.runs:
        rep = result.replicates[run.key.replicate]
        if run.summary.intervals_below_target == 0:
            met += 1
            assert run.summary.gpu_seconds >= rep.oracle_gpu_s - 1e-6
    assert met >= 2


def test_the_lagged_oracles_pods_follow_the_oracles_counts_held_on_the_trace_clock(trace_file, profile_file):
    plan = trace_plan(trace_file, profile_file, policies=("lagged:60", "fixed:1"))
    result = run_plan(plan)
    orc = result.oracle
    assert orc is not None
    followed = 0
    for run in result.runs:
        if run.key.policy != "lagged:60":
            continue
        rep = result.replicates[run.key.replicate]
        assert run.timeline[0] == (0.0, rep.initial)
        for t, pods in run.timeline[1:]:
            found = held_need(orc.replicas, orc.interval_s, rep.offset + rep.since + t, 60.0)
            assert found is not None and pods == found[0]
            followed += 1
    assert followed >= 2  # the bursts' counts came and went


def test_one_worker_or_two_give_the_same_numbers(profile_file):
    plan = thesis_plan(profile_file, replicates=2, count=150)
    assert json.dumps(run_plan(plan, workers=2).to_json()) == json.dumps(run_plan(plan, workers=1).to_json())


def test_the_oracles_intervals_spread_over_two_workers_give_the_same_bound(trace_file, profile_file):
    plan = trace_plan(trace_file, profile_file, policies=("fixed:2",))
    one, two = run_plan(plan, workers=1), run_plan(plan, workers=2)
    assert one.oracle is not None and len(set(one.oracle.replicas)) > 1  # intervals that differ
    assert json.dumps(two.to_json()) == json.dumps(one.to_json())


def test_run_protocol_prints_the_tables_of_the_json_it_writes(profile_file, tmp_path, capsys):
    out = tmp_path / "out"
    policies = ("request:1000", "pertoken:20", "pertoken:30", "planner", "planner:0.8")
    args = ["run", "--protocol", "thesis", "--profile", profile_file, "--workload", "simple:2x", "--count", "200",
            "--seeds", "2", *(a for p in policies for a in ("--policy", p)), "--slo-request-ms", "1000",
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    result = ProtocolResult.from_json(json.loads((out / "protocol.json").read_text()))
    shown = tables(result)
    assert len(shown) == 3  # the runs, the thesis's claims, GPU-seconds at equal attainment
    for table in shown:
        assert table in printed
    assert "| pertoken:20" in shown[0] and "first scale-out" in shown[1]
    # Two families over several settings: the front beside the summary and the replicas.
    for name in ("summary.png", "replicas.png", "front.png"):
        assert (out / name).stat().st_size > 5000


def test_the_protocol_sets_what_no_flag_sets_and_refuses_what_does_not_apply(profile_file, capsys):
    parse = build_parser().parse_args
    plan = plan_from_args(parse(["run", "--protocol", "thesis", "--profile", profile_file, "--workload",
                                 "complex:10", "--set", "stabilization_window=60"]))  # fmt: skip
    assert (plan.count, plan.replicates, plan.slo.request_s, plan.slo.attain) == (3840, 10, 2.0, ("request",))
    assert (plan.scaler.max_deployment_count, plan.scaler.stabilization_window) == (4, 60)
    assert "planner" in plan.policies and "fixed:4" in plan.policies
    trace = plan_from_args(parse(["run", "--protocol", "trace", "--profile", profile_file, "--workload",
                                  "trace:x.csv", "--slo-ttft-ms", "500"]))  # fmt: skip
    assert (trace.slo.ttft_s, trace.slo.per_token_s, trace.slo.attain) == (0.5, 0.05, ("ttft", "pertoken"))
    assert (trace.replicates, trace.scaler.max_deployment_count) == (4, 64)
    bad = [
        (["--protocol", "trace", "--workload", "trace:x.csv", "--seeds", "3"], "--seeds does not apply"),
        (["--protocol", "trace", "--workload", "complex:1"], "--protocol trace replays a trace"),
        (["--protocol", "thesis", "--workload", "complex:1", "--windows", "3"], "--windows does not apply"),
        (["--workload", "complex:1", "--seeds", "3"], "go with --protocol"),
    ]
    for extra, message in bad:
        assert main(["run", "--profile", profile_file, *extra]) == 2
        assert message in capsys.readouterr().err


def test_a_run_key_names_its_policy_and_replicate(profile_file):
    result = run_one(thesis_plan(profile_file, count=50), RunKey("pertoken:20 w30", 1), 1)
    assert result.key.text() == "pertoken:20 w30 #1"
    assert result.summary.name == "pertoken:20 w30"


def test_window_requests_cover_the_warm_up_and_the_window_only(trace_file, profile_file):
    from nlgsim.protocol import _window_requests

    plan = trace_plan(trace_file, profile_file)
    reqs, since, until = _window_requests(plan, 1)
    assert since == ORACLE_WARMUP_S and until == ORACLE_WARMUP_S + window_length(plan, _trace_cached(plan)[-1].arrival)
    assert all(0 <= r.arrival < until for r in reqs)
    assert isinstance(reqs[0], Request)


@pytest.mark.parametrize("policy", ["planner-v1", "kpa"])
def test_a_trace_run_of_a_policy_the_figure_does_not_single_out_still_draws_its_pods(
    trace_file, profile_file, tmp_path, policy
):
    out = tmp_path / "out"
    assert main(["run", "--protocol", "trace", "--profile", profile_file, "--workload", f"trace:{trace_file}",
                 "--policy", policy, "--out", str(out)]) == 0  # fmt: skip
    result = ProtocolResult.from_json(json.loads((out / "protocol.json").read_text()))
    assert result.oracle is not None and len(set(result.oracle.replicas)) > 1  # the figure is drawn
    assert (out / "replicas.png").stat().st_size > 5000
