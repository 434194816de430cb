"""The what-if CLI end to end on small workloads, the sweep's Pareto front, and text specs."""

from __future__ import annotations

import json

import pytest
from sim_testkit import paper_profile

from autoscaler.config import ConfigError, ScalerSpec
from nlgsim.cli import main
from nlgsim.experiment import build_policy, parse_workload, planner_config, scaler_spec
from nlgsim.results import SLO
from nlgsim.sweep import grid, pareto_front


@pytest.fixture
def profile_file(tmp_path):
    path = tmp_path / "profile.json"
    paper_profile(max_batch=8, startup_s=10.0).save(path)
    return path


@pytest.mark.parametrize(
    ("points", "want"),
    [
        ([(10, 0.5), (20, 0.1), (30, 0.0)], [0, 1, 2]),  # a clean trade-off: all on the front
        ([(10, 0.5), (20, 0.6), (30, 0.0)], [0, 2]),  # the middle one costs more and misses more
        ([(10, 0.1), (10, 0.1)], [0]),  # duplicates: the first stays
        ([(10, 0.1), (10, 0.2)], [0]),  # same cost, more misses
    ],
    ids=["trade-off", "dominated", "duplicate", "same-cost"],
)
def test_pareto_front(points, want):
    assert pareto_front(points) == want


def test_grid_covers_every_combination():
    specs = grid(ScalerSpec(), ["pertoken", "request"], {"pertoken": [20, 30], "request": [2000]}, [30, 60])
    assert [(s.type, s.threshold, s.time_window) for s in specs] == [
        ("pertoken", 20, 30),
        ("pertoken", 20, 60),
        ("pertoken", 30, 30),
        ("pertoken", 30, 60),
        ("request", 2000, 30),
        ("request", 2000, 60),
    ]


def test_scaler_spec_from_yaml_and_overrides():
    spec = scaler_spec(
        {"scaler": {"type": "request", "threshold": 1500}}, ["time_window=30", "scale_up.max_pods=2"]
    )
    assert (spec.type, spec.threshold, spec.time_window, spec.scale_up.max_pods) == ("request", 1500, 30, 2)
    with pytest.raises(ConfigError, match="scaler.threshold"):
        scaler_spec({}, ["threshold=-1"])


@pytest.mark.parametrize("bad", ["pertoken", "fixed:0", "magic:3", "planner"])
def test_policy_text_errors(bad):
    with pytest.raises(ValueError, match="--policy"):
        build_policy(bad, ScalerSpec(), None)


def test_relative_rates_are_stated_against_one_replicas_capacity():
    w = parse_workload("simple:2x", paper_profile(max_batch=8), count=100)
    assert "2.00x one replica's saturation rate" in w.description
    assert len(w.requests) == 100


def test_run_writes_a_table_a_summary_and_figures(profile_file, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "--profile",
            str(profile_file),
            "--workload",
            "simple:2.5x",
            "--count",
            "600",
            "--policy",
            "request:2000",
            "--policy",
            "pertoken:20",
            "--policy",
            "planner",
            "--policy",
            "fixed:2",
            "--set",
            "max_deployment_count=4",
            "--oracle",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "| request:2000" in text and "| planner" in text and "GPU-s / oracle" in text
    summary = json.loads((out / "summary.json").read_text())
    assert [r["name"] for r in summary["runs"]] == ["request:2000", "pertoken:20", "planner", "fixed:2"]
    assert summary["oracle_gpu_seconds"] > 0
    # Paying each pod's start-up can only cost more than the oracle's free pods.
    assert summary["startup_bound_gpu_seconds"] >= summary["oracle_gpu_seconds"]
    assert "GPU-s / start-up bound" in text
    for png in ("replicas.png", "latency.png", "tradeoff.png"):
        assert (out / png).stat().st_size > 1000


def test_sweep_prints_the_front(profile_file, tmp_path, capsys):
    code = main(
        [
            "sweep",
            "--profile",
            str(profile_file),
            "--workload",
            "simple:2x",
            "--count",
            "300",
            "--thresholds",
            "20,40",
            "--windows",
            "15,30",
            "--set",
            "max_deployment_count=3",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "Pareto front" in text
    assert text.count("pertoken 20ms") >= 2
    assert (tmp_path / "sweep.png").exists()


def test_errors_exit_2_and_say_how_to_fix(profile_file, capsys):
    assert main(["run", "--profile", "missing.json", "--workload", "simple:1"]) == 2
    assert "nlgsim profile --out" in capsys.readouterr().err
    assert main(["run", "--profile", str(profile_file), "--workload", "medium:1"]) == 2
    assert "simple:RATE" in capsys.readouterr().err


def test_a_trace_longer_than_the_context_is_refused_until_a_mapping_is_named(profile_file, tmp_path, capsys):
    trace = tmp_path / "long.csv"
    rows = [f"{0.5 * i},{3000 if i % 3 == 0 else 200},{2 if i % 3 == 0 else 20}" for i in range(60)]
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    args = ["run", "--profile", str(profile_file), "--workload", f"trace:{trace}", "--policy", "fixed:2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "20 of 60 requests do not fit the model's 1024-token context" in err
    assert "--map-lengths clip, scale:F or drop" in err and "Traceback" not in err
    out = tmp_path / "out"
    slo = ["--slo-ttft-ms", "1000", "--slo-pertoken-ms", "50", "--attain", "ttft,pertoken"]
    assert main([*args, "--map-lengths", "clip", *slo, "--oracle", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "--map-lengths clip" in text and "20 prompts clipped" in text
    # The clipped prompts (1,022 tokens, 2 out) miss 50 ms a token even alone: infeasible.
    assert "20 of 60 requests (33.33%) miss the SLO even alone" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mapping_changes"] == {
        "read": 60, "scaled": 0, "prompts_clipped": 20, "outputs_capped": 0, "dropped": 0, "no_output": 0
    }  # fmt: skip
    assert summary["feasibility"]["infeasible"] == 20
    assert summary["slo"]["target"] == 0.99 and summary["oracle_unattainable_intervals"] == []
    (run,) = summary["runs"]
    assert run["infeasible"] == 20 and run["attainment"] <= 40 / 60 + 1e-12
    assert main([*args, "--map-lengths", "drop", *slo]) == 0
    assert "40 requests over" in capsys.readouterr().out


def test_a_json_lines_trace_in_milliseconds_runs_and_a_bad_line_exits_2(profile_file, tmp_path, capsys):
    trace = tmp_path / "mooncake.jsonl"
    rows = [{"timestamp": 250 * i, "input_length": 200, "output_length": 20, "hash_ids": [i]} for i in range(40)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["run", "--profile", str(profile_file), "--workload", f"trace:{trace}", "--policy", "fixed:1"]
    assert main([*args, "--time-unit", "ms"]) == 0
    assert "40 requests over 10 s" in capsys.readouterr().out  # 39 gaps of 250 ms
    assert main(args) == 0  # the same numbers read as seconds
    assert "40 requests over 9750 s" in capsys.readouterr().out
    trace.write_text(trace.read_text() + '{"timestamp": 1e4, "input_length": 5}\n')
    assert main([*args, "--time-unit", "ms"]) == 2
    err = capsys.readouterr().err
    assert "mooncake.jsonl:41: no output-token key" in err and "Traceback" not in err


def test_the_planner_settings_a_user_sets_are_what_the_simulated_planner_runs(profile_file, tmp_path, capsys):
    """``--set planner.headroom=...`` (as ``helm upgrade --set autoscaler.policy.planner.headroom``) reaches
    the simulated planner: a lower headroom plans more replicas for the same load."""
    gpu = {}
    for headroom in ("0.85", "0.4"):
        out = tmp_path / headroom
        args = ["run", "--profile", str(profile_file), "--workload", "simple:2.5x", "--count", "600"]
        args += ["--policy", "planner", "--set", "max_deployment_count=8", "--set", f"planner.headroom={headroom}"]
        assert main([*args, "--out", str(out)]) == 0
        gpu[headroom] = json.loads((out / "summary.json").read_text())["runs"][0]["gpu_seconds"]
    capsys.readouterr()
    assert gpu["0.4"] > gpu["0.85"]


def test_the_simulated_planner_takes_every_setting_of_scaler_planner():
    """The SLO's targets come from the run's SLO and the lengths from the workload; the other keys (the
    headroom, the start-up) from ``scaler.planner``, as the chart renders them."""
    settings = scaler_spec({}, ["planner.headroom=0.5", "planner.startup=30"]).planner
    requests = parse_workload("simple:1", paper_profile(), count=50, seed=0).requests
    slo = SLO(per_token_s=0.05)
    cfg = planner_config(paper_profile(), requests, slo, 5.0, 10.0, settings)
    default = planner_config(paper_profile(), requests, slo, 5.0, 10.0)
    assert (cfg.headroom, default.headroom) == (0.5, 0.85)
    assert (cfg.lead_s, default.lead_s) == (35.0, 15.0)
    assert cfg.slo == slo and cfg.prompt_tokens == 34


def test_the_planners_retired_keys_are_refused_naming_what_replaced_them():
    with pytest.raises(ConfigError) as e:
        scaler_spec({}, ["planner.plan_fraction=0.5", "planner.burst_quantile=0.9"])
    keys = [m.split(":")[0] for m in e.value.errors]
    assert keys == ["scaler.planner.plan_fraction", "scaler.planner.burst_quantile"]
    assert all("no longer a key" in m and "remove it" in m for m in e.value.errors)


def test_routing_per_connection_runs_and_a_bad_routing_is_named(profile_file, capsys):
    args = ["run", "--profile", str(profile_file), "--workload", "simple:1", "--count", "40", "--policy", "fixed:3"]
    assert main([*args, "--routing", "per-connection:1"]) == 0
    assert "routing per-connection:1" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--routing", "per-connection"])
    err = capsys.readouterr().err
    assert "argument --routing: routing = 'per-connection': must be round-robin, least-loaded" in err
