"""benchmarks/scaling_policies.md: the committed report is the committed results rendered, each table's
command is the plan its numbers came from, placeholders and the prose's checks are enforced, and the
analysis behind the verdicts does what it says on numbers made by hand."""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.scaling import analysis, render, runner
from benchmarks.scaling.experiments import EXPERIMENTS, PROFILES, experiment
from benchmarks.scaling.runner import RESULTS, plan_of
from nlgsim.protocol import PROTOCOLS, ProtocolResult, Replicate, RunKey, RunResult, plan_json
from nlgsim.protocol_tables import Spread, baseline, cheapest_at, claims
from nlgsim.results import Summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def committed():
    return json.loads(RESULTS.read_text())


def test_the_committed_report_is_the_committed_results_rendered(committed):
    real = json.loads(render.SIM_TO_REAL.read_text()) if render.SIM_TO_REAL.exists() else None
    got = render.render(committed, real, real_h100=render.h100_results())
    assert got == render.REPORT.read_text()


def test_each_tables_command_is_the_plan_its_numbers_came_from(committed):
    assert set(committed["experiments"]) == {e.key for e in EXPERIMENTS}
    for exp in EXPERIMENTS:
        assert plan_json(plan_of(exp)) == committed["experiments"][exp.key]["command"], exp.key
        # The command the report prints is, word for word, the arguments the plan was made from.
        words = shlex.split(exp.command().replace("\\\n", " "))
        assert words[:4] == ["python", "-m", "nlgsim", "run"] and tuple(words[4:]) == exp.args, exp.key


def test_what_the_commands_name_is_in_the_repository():
    for path in PROFILES:
        assert (ROOT / path).is_file(), path
    for exp in EXPERIMENTS:
        workload = dict(zip(exp.args[::2], exp.args[1::2], strict=False)).get("--workload", "")
        if workload.startswith("trace:"):
            assert (ROOT / workload[6:]).is_file(), workload


def test_every_figure_the_report_shows_is_committed():
    names = re.findall(r"\]\(figures/([^)]+)\)", render.REPORT.read_text())
    assert len(names) >= 10
    for name in names:
        assert (ROOT / "benchmarks" / "figures" / name).is_file(), name


def test_a_missing_value_is_refused_naming_all_of_them():
    with pytest.raises(render.MissingValues, match=r"2 placeholder\(s\) .*: a\.b, c"):
        render.fill("{{a.b}} and {{c}} and {{d}}", {"d": "1"})
    assert render.fill("{{x y:1}}!", {"x y:1": "ok"}) == "ok!"


def test_results_lacking_an_experiment_are_refused_naming_each_and_the_command(committed):
    gone = ("thesis-step", "trace-conv-t4")
    partial = {**committed, "experiments": {k: v for k, v in committed["experiments"].items() if k not in gone}}
    with pytest.raises(analysis.MissingExperiments, match=r"2 experiment.*: thesis-step, trace-conv-t4; .*--only th"):
        analysis.values(partial, None)


def test_a_fact_the_prose_relies_on_must_hold():
    assert render.fill("one{{check:holds}} two", {"check:holds": "true"}) == "one two"
    with pytest.raises(render.FailedCheck, match="check:gone"):
        render.fill("{{check:gone}}{{check:holds}}", {"check:gone": "false", "check:holds": "true"})


def test_an_unknown_experiment_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="thesis-step"):
        experiment("thesis-stepp")


def test_the_traces_readme_states_the_rows_of_the_committed_files():
    readme = (ROOT / "benchmarks" / "traces" / "README.md").read_text()
    for name, rows in re.findall(r"^\| `([\w]+\.csv)` \| ([\d,]+) \|", readme, re.M):
        with (ROOT / "benchmarks" / "traces" / name).open(newline="") as f:
            assert sum(1 for _ in csv.reader(f)) - 1 == int(rows.replace(",", "")), name
    assert "CC-BY-4.0" in readme and "Splitwise" in readme


def test_the_docs_list_each_protocols_defaults_as_the_code_has_them():
    text = (ROOT / "docs" / "simulator.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\d+) (seeds|windows) \| [^|]+ \| ([^|]+) \| (.+) \|$", text, re.M)
    assert {name for name, *_ in rows} == set(PROTOCOLS)
    for name, count, unit, scaler, policies in rows:
        protocol = PROTOCOLS[name]
        assert (int(count), unit) == (protocol.replicates, protocol.replicate + "s")
        # The column names the bounds alone: every other scaler setting is the autoscaler's default.
        low, high = protocol.scaler["min_deployment_count"], protocol.scaler["max_deployment_count"]
        assert set(protocol.scaler) == {"min_deployment_count", "max_deployment_count"}
        assert scaler.strip() == f"{low:g} to {high:g} replicas"
        assert tuple(re.findall(r"`([^`]+)`", policies)) == protocol.policies


# -- the analysis, on results made by hand ---------------------------------------------------------


def summary(name: str, attainment: float, gpu: float, first: float = math.nan) -> Summary:
    return Summary(
        name=name, requests=1000, violations={"request": round(1000 * (1 - attainment)), "ttft": 0, "pertoken": 0},
        attainment=attainment, gpu_seconds=gpu, first_scale_s=first, max_replicas=4, latency_p50_s=1.0,
        latency_p99_s=2.0, ttft_p50_s=0.1, ttft_p99_s=0.2, per_token_p50_s=0.02, per_token_p99_s=0.03,
        end_s=500.0, attainment_feasible=attainment,
    )  # fmt: skip


def made(runs: dict[str, list[tuple[float, float, float]]]) -> ProtocolResult:
    """A thesis result: per policy, (attainment, GPU-seconds, first scale-out) on each seed."""
    seeds = len(next(iter(runs.values())))
    return ProtocolResult(
        protocol="thesis",
        command={"policies": list(runs), "slo": {"target": 0.99, "request_s": 2.0}},
        profile="paper", workload="made by hand", slo="", feasibility="",
        replicates=tuple(Replicate(i, f"seed {i}", 0.0, None, 1, 1000) for i in range(seeds)),
        runs=tuple(
            RunResult(RunKey(p, i), summary(p, *values[i])) for i in range(seeds) for p, values in runs.items()
        ),
    )  # fmt: skip


HAND = made({
    "request:1000": [(0.99, 1900, 5), (0.995, 1910, 6)],
    "request:2000": [(0.85, 1600, 90), (0.86, 1620, 100)],
    "pertoken:20": [(0.985, 1850, 15), (0.99, 1860, 17)],
    "pertoken:25": [(0.92, 1700, 60), (0.93, 1710, 70)],
    "planner": [(0.991, 1890, 4), (0.993, 1895, 4)],
    "planner:0.8": [(0.99, 1800, 30), (0.995, 1810, 30)],
    "fixed:4": [(0.995, 1930, math.nan), (0.996, 1935, math.nan)],
})  # fmt: skip


def test_a_spread_is_the_mean_with_the_least_and_most():
    assert Spread.of([1.0, 2.0, 3.0]).text(".1f") == "2.0 (1.0-3.0)"
    assert Spread.of([2.0, 2.0]).text(".1f") == "2.0"
    assert Spread.of([math.nan, 4.0]).text(".0f") == "4"
    assert Spread.of([math.nan]).text() == "-"


def test_the_baseline_is_the_request_policy_at_the_slos_limit_and_the_claims_read_against_it():
    assert baseline(HAND) == "request:2000"
    got = claims(HAND)
    # Violations base/this: 145 / 12.5; GPU-s saved by pertoken:20: 1 - 1855 / 1610; first: 95 / 16 best.
    assert got["violations"][0] == pytest.approx(145 / 12.5) and got["violations"][1]
    assert got["gpu_saving"][0] == pytest.approx(1 - 1855 / 1610) and not got["gpu_saving"][1]
    assert got["first_scale"][0] == pytest.approx(95 / 16) and got["first_scale"][1]


def test_equal_attainment_takes_each_familys_cheapest_setting_at_the_level():
    at_99 = cheapest_at(HAND, 0.99, feasible=False)
    assert at_99["request"] == ("request:1000", 1905)
    assert at_99["planner"] == ("planner:0.8", 1805)
    assert at_99["pertoken"] is None  # 98.75% on average
    assert cheapest_at(HAND, 0.98, feasible=False)["pertoken"] == ("pertoken:20", 1855)


def test_the_standard_error_is_the_sample_deviation_over_root_n():
    assert analysis.standard_error([1.0, 2.0, 3.0]) == pytest.approx(1 / math.sqrt(3))
    assert analysis.standard_error([0.99, 0.99]) == 0
    assert math.isnan(analysis.standard_error([0.99]))


def test_the_tuned_planner_is_the_cheapest_at_the_target_with_confidence():
    # planner:0.8: mean 99.25%, standard error 0.25 points: 99.0% with confidence, and cheaper.
    assert analysis.tuned_planner(HAND) == "planner:0.8"
    noisy = made({
        "planner": [(0.995, 1900, 4), (0.997, 1905, 4), (0.996, 1902, 4)],
        # Mean 99.2%, above the target by less than its standard error (0.58 points): not chosen.
        "planner:0.8": [(0.98, 1800, 30), (1.0, 1810, 30), (0.996, 1805, 30)],
    })  # fmt: skip
    f = analysis.figures(noisy, "planner:0.8")
    assert f.attainment.mean > 0.99 > f.attainment_low
    assert analysis.tuned_planner(noisy) == "planner"


def test_with_none_at_the_target_with_confidence_the_closest_mean_is_chosen():
    short = made({"planner": [(0.97, 1890, 4)], "planner:0.8": [(0.98, 1800, 30)]})
    assert analysis.tuned_planner(short) == "planner:0.8"  # one seed: no standard error, no confidence
    scattered = made({
        "planner": [(0.975, 1900, 4), (1.0, 1900, 4)],
        "planner:0.7": [(0.985, 1850, 10), (0.987, 1850, 10)],
        "planner:0.8": [(0.96, 1800, 30), (0.97, 1800, 30)],
    })  # fmt: skip
    # The closest mean (98.75%), though planner:0.7's is the surer (98.6% less 0.1 points).
    assert analysis.tuned_planner(scattered) == "planner"


def test_the_selection_table_shows_what_the_choice_read():
    table = analysis.selection_table(HAND)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"`planner`", "`planner:0.8` (chosen)"}
    assert "| 99.25 " in rows["`planner:0.8` (chosen)"] and "| 0.25 " in rows["`planner:0.8` (chosen)"]
    assert "| yes " in rows["`planner`"]


def test_the_planner_meets_issue_12_only_at_the_target_and_within_the_references_gpu_seconds():
    ok = analysis.planner_against(HAND, "planner:0.8", "pertoken:20")
    assert ok["ok"] and ok["ceiling"].name == "fixed:4"
    dear = analysis.planner_against(HAND, "planner", "pertoken:20")
    assert not dear["ok"]  # at the target, but 1892 GPU-s against 1855
    assert not analysis.planner_against(HAND, "pertoken:25", "pertoken:20")["ok"]  # cheaper, short of 99%


def test_only_reruns_the_experiments_named_and_keeps_the_others(tmp_path, monkeypatch):
    class Fake:
        def __init__(self, plan):
            self.plan = plan

        def to_json(self):
            return {"rerun": self.plan.first_seed}

    monkeypatch.setattr(runner, "run_plan", lambda plan, workers, progress: Fake(plan))
    monkeypatch.setattr(runner, "profile_numbers", lambda path: {"path": path})
    monkeypatch.setattr(runner, "planner_numbers", lambda exp: {})
    out = tmp_path / "results.json"
    # An experiment no longer defined (a retired key) has no table: its numbers go.
    kept = {"experiments": {"thesis-step": {"old": 1}, "thesis-ramp": {"old": 2}, "retired": {"old": 3}},
            "wall_s": {"thesis-step": 5.0, "thesis-ramp": 6.0, "retired": 7.0},
            "load_average_before": {"thesis-step": 8.0, "thesis-ramp": 8.0, "retired": 8.0}}  # fmt: skip
    out.write_text(json.dumps(kept))
    runner.run(["thesis-tuning", "thesis-ramp"], 2, out)
    data = json.loads(out.read_text())
    assert data["experiments"] == {
        "thesis-step": {"old": 1}, "thesis-ramp": {"rerun": 0}, "thesis-tuning": {"rerun": 100},
    }  # fmt: skip
    assert set(data["wall_s"]) == set(data["load_average_before"]) == set(data["experiments"])
    assert data["wall_s"]["thesis-step"] == 5.0 and data["load_average_before"]["thesis-step"] == 8.0


def test_only_re_runs_with_the_worker_count_the_kept_experiments_ran_with(tmp_path):
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"experiments": {"thesis-step": {}}, "workers": 2}))
    with pytest.raises(SystemExit, match="ran with 2; re-run with --workers 2"):
        runner.run(["trace-conv-t4"], 1, out)
    assert json.loads(out.read_text())["workers"] == 2  # nothing written


def test_the_cheapest_at_the_target_is_named_as_what_it_is_beside_the_planner():
    def policy(name: str, x: float) -> analysis.PolicyFigures:
        s = Spread(x, x, x)
        return analysis.PolicyFigures(name, s, s, s, s, s, s, 4, 4, 0.0)

    assert analysis.versus_planner(None) == "no policy reaches the target"
    assert analysis.versus_planner(policy("planner", 1.2)) == "no policy that reaches the target costs less"
    assert analysis.versus_planner(policy("fixed:3", 1.35)).startswith("a constant `fixed:3`, costs 1.35x")
    assert analysis.versus_planner(policy("planner:0.9", 1.24)).startswith("the cheapest at the target, `planner:0.9`")


def timelines(**runs: tuple[tuple[float, int], ...]) -> ProtocolResult:
    """One seed per policy (names with ``_`` for ``:``), each with its pods over time; a cap of 4."""
    result = made({p.replace("_", ":"): [(0.99, 1900, 5)] for p in runs})
    kept = tuple(replace(r, timeline=runs[r.key.policy.replace(":", "_")]) for r in result.runs)
    return replace(result, command={**result.command, "scaler": {"max_deployment_count": 4}}, runs=kept)


def test_kept_at_the_cap_means_reaching_it_and_never_going_below_after():
    up = ((0.0, 1), (10.0, 4))
    result = timelines(planner=up, pertoken_20=((0.0, 1), (5.0, 2), (20.0, 4)), kpa=((0.0, 1), (9.0, 4), (50.0, 3)))
    assert analysis._kept_at_cap(result, ("planner", "pertoken"))
    assert not analysis._kept_at_cap(result, ("kpa",))  # went back to 3
    assert not analysis._kept_at_cap(timelines(planner=((0.0, 1), (10.0, 3))), ("planner",))  # never at 4
    assert not analysis._kept_at_cap(result, ("request",))  # none run: the claim is not made


def test_the_cap_within_a_time_counts_from_the_first_scale_out_and_never_reaching_it_is_not_within():
    result = timelines(
        pertoken_20=((0.0, 1), (10.0, 3), (20.0, 4)),
        planner=((0.0, 1), (10.0, 2), (20.0, 3), (40.0, 4)),
        kpa=((0.0, 1), (10.0, 3)),
    )  # fmt: skip
    assert analysis._cap_within(result, ("pertoken",), 10.0) == [True]
    assert analysis._cap_within(result, ("pertoken",), 9.0) == [False]
    assert analysis._cap_within(result, ("planner",), 10.0) == [False]
    assert analysis._cap_within(result, ("kpa",), 1000.0) == [False]  # never at 4
    assert analysis.reached_cap(result, "planner").mean == 40.0
    assert math.isnan(analysis.reached_cap(result, "kpa").mean)


def headrooms(runs: dict[str, list[tuple[float, float, float]]], default: float = 0.85) -> ProtocolResult:
    result = made(runs)
    return replace(result, command={**result.command, "scaler": {"planner": {"headroom": default}}})


def test_the_headroom_orders_attainment_down_and_first_scale_out_later_with_the_default_in_its_place():
    runs = {"planner:1": [(0.80, 1500, 90)], "planner": [(0.85, 1550, 80)], "planner:0.5": [(0.95, 1600, 40)]}
    assert analysis._headroom_orders(headrooms(runs))
    # The same numbers with the default at 0.4: it now sits below 0.5, with less attainment.
    assert not analysis._headroom_orders(headrooms(runs, default=0.4))
    later = headrooms({"planner:1": [(0.80, 1500, 30)], "planner:0.5": [(0.95, 1600, 40)]})
    assert not analysis._headroom_orders(later)  # more attainment, yet scaled out later


def test_a_constant_count_is_cheapest_only_if_it_is_at_every_level_another_family_reaches():
    assert not analysis._fixed_cheapest(HAND)  # at 99% fixed:4 costs 1932.5, planner:0.8 1805
    cheap = made({"request:1000": [(0.99, 1900, 5)], "planner": [(0.95, 1800, 4)], "fixed:3": [(1.0, 1700, math.nan)]})
    assert analysis._fixed_cheapest(cheap)
    none = made({"request:1000": [(0.99, 1900, 5)], "fixed:3": [(0.5, 1700, math.nan)]})
    assert not analysis._fixed_cheapest(none)  # no constant count reaches the levels the request policy does


def test_the_ramp_passes_the_plan_where_its_rate_reaches_the_headroom_of_what_a_replica_carries():
    ramp = made({"planner": [(0.8, 1500, 88)]})
    ramp = replace(ramp, command={
        **ramp.command, "workload": "complex:10", "ramp": 200.0, "scaler": {"planner": {"headroom": 0.5}},
    })  # fmt: skip
    data = {"thesis_planner": {"planned_rps": 3.0}}
    assert analysis.planned_rps(ramp, data) == 1.5
    assert analysis.rate_at_plan(ramp, data) == pytest.approx(30.0)
