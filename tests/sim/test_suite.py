"""The workload suite: its shapes parse and cover the classes of traffic it claims in both sets, the search
for the best fixed fleet, the verdicts, and the committed report is what its results render."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.suite.render import limit, lost, render, verdict
from benchmarks.suite.runner import REFERENCES, best_fixed_search, plan_of
from benchmarks.suite.shapes import DAY_X_FIXED, SHAPES, SPLITS, shape
from nlgsim.protocol_result import OracleSummary, ProtocolResult, Replicate, RunKey, RunResult
from nlgsim.results import Summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "suite.json"
REPORT = ROOT / "benchmarks" / "suite.md"


def flags(s) -> dict[str, str]:
    args = list(s.args)
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}


@pytest.mark.parametrize("name", [s.name for s in SHAPES])
def test_every_shape_is_a_trace_protocol_plan(name):
    plan = plan_of(shape(name))
    assert plan.protocol == "trace" and plan.policies  # the protocol's own until the suite names its own
    assert plan.scaler.max_deployment_count == 64


def test_the_names_are_unique_and_each_set_has_shapes():
    assert len({s.name for s in SHAPES}) == len(SHAPES)
    assert {s.split for s in SHAPES} == set(SPLITS)


@pytest.mark.parametrize("split", SPLITS)
def test_each_set_holds_every_class_of_traffic_the_suite_claims(split):
    """Both traces; x1, x10, x30 and x100; copies 2 s and 15 s apart; both time warps; groups; a long-prompt
    mix; a day: in each set, so that a class is never only tuned on, nor only tested."""
    mine = [s for s in SHAPES if s.split == split]
    given = [flags(s) for s in mine]
    traces = {f["--workload"].rsplit("/", 1)[-1] for f in given}
    assert traces == {"azure2023_code.csv", "azure2023_conv.csv"}
    assert {int(f.get("--scale", "1")) for f in given if "--day" not in f} >= {1, 10, 30} and (
        any(f.get("--scale") == "100" for f in given)
    )
    assert {f.get("--scale-jitter") for f in given if f.get("--scale", "1") != "1"} >= {"2", "15"}
    assert {f.get("--speed") for f in given} >= {"0.5", "2"}
    assert any("--group" in f for f in given)
    assert any(f.get("--map-lengths") == "clip" for f in given)
    assert [s.day for s in mine].count(True) >= 1
    assert all(("--day" in f) == s.day for s, f in zip(mine, given, strict=True))


def test_no_shape_of_the_test_set_is_a_shape_of_the_tune_set():
    tune = {s.args for s in SHAPES if s.split == "tune"}
    assert not any(s.args in tune for s in SHAPES if s.split == "test")


# -- the best fixed fleet --------------------------------------------------------------------------------


def result_with(attained: dict[int, float], oracle: tuple[int, ...] = (3, 5, 4)) -> ProtocolResult:
    """A protocol result of fixed fleets whose attainment is ``attained[n]`` (one window)."""
    runs = tuple(
        RunResult(
            RunKey(f"fixed:{n}", 0),
            Summary(
                f"fixed:{n}",
                100,
                {},
                a,
                n * 100.0,
                math.nan,
                n,
                *([0.0] * 7),
                100.0,
                attainment_feasible=a,
            ),
        )  # fmt: skip
        for n, a in attained.items()
    )
    return ProtocolResult(
        "trace", {"slo": {"target": 0.99}, "scaler": {"max_deployment_count": 64}, "policies": []}, "p", "w",
        "slo", "feasible", (Replicate(0, "window 0", 60.0, 160.0, 3, 100),), runs,
        OracleSummary(30.0, oracle, 1.0, (), 0, 60.0, 64),
    )  # fmt: skip


@pytest.mark.parametrize("best", [1, 2, 4, 6, 9, 17])
def test_the_search_finds_the_fewest_that_meet_with_one_fewer_beside_it(best):
    truth = {n: (0.999 if n >= best else 0.9) for n in range(1, 65)}
    tried: list[int] = []

    def run(result: ProtocolResult, counts) -> ProtocolResult:
        tried.extend(counts)
        new = result_with({n: truth[n] for n in counts})
        return replace(result, runs=(*result.runs, *new.runs))

    found = best_fixed_search(result_with({}), run)
    meeting = sorted(int(r.key.policy[6:]) for r in found.runs if r.summary.attainment_feasible >= 0.99)
    assert meeting[0] == best
    assert best == 1 or best - 1 in tried
    assert len(tried) <= 2 + 2 * math.ceil(math.log2(64)), tried


# -- verdicts and the report -----------------------------------------------------------------------------


def shape_data(planner: tuple[float, float], fixed: tuple[float, float] = (0.995, 1000.0), day: bool = False):
    return {
        "name": "s", "split": "test", "summary": "", "day": day, "target": 0.99, "best_fixed": "fixed:3",
        "bracketed": True,
        "policies": {"planner": {"feasible": planner[0], "gpu": planner[1]}, "fixed:3": {"feasible": fixed[0],
                                                                                         "gpu": fixed[1]}},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("planner", "day", "met"),
    [((0.991, 1000.0), False, True), ((0.991, 1001.0), False, False), ((0.989, 500.0), False, False),
     ((0.995, 600.0), True, True), ((0.995, 601.0), True, False)],
    ids=["at-the-fixed-cost", "a-little-more", "short-of-the-target", "a-day-at-0.6", "a-day-over-0.6"],
)  # fmt: skip
def test_a_shape_is_met_at_the_target_for_no_more_than_the_best_fixed_fleet_or_a_days_share(planner, day, met):
    assert verdict(shape_data(planner, day=day))[0] is met
    assert DAY_X_FIXED == 0.6


def test_without_one_fewer_beside_the_best_fixed_fleet_the_verdict_is_unknown():
    data = {**shape_data((0.999, 10.0)), "bracketed": False}
    assert verdict(data) == (None, "unknown: one replica fewer than `fixed:3` was not run")


@pytest.mark.parametrize(
    ("lagged", "gpu", "says"),
    [(0.95, 900.0, "the start-up"), (0.995, 1100.0, "the cost of following"), (0.995, 900.0, "the planner's")],
)
def test_a_shape_not_met_names_its_limit_by_whether_the_lagged_oracle_meets_it(lagged, gpu, says):
    data = shape_data((0.95, 900.0))
    data["policies"] |= {r: {"feasible": lagged, "gpu": gpu} for r in REFERENCES}
    assert limit(data).startswith(says)
    (line,) = lost({"shapes": [data]})
    assert "not met: 95.00% < 99%" in line and says in line
    assert all(r not in line.partition("Tried besides")[2] for r in REFERENCES)  # a reference is no approach


@pytest.mark.parametrize(("planner", "met"), [(0.995, True), (0.95, False)])
def test_where_no_fixed_fleet_reaches_the_target_the_default_must_reach_it(planner, met):
    data = {**shape_data((planner, 900.0)), "best_fixed": None, "bracketed": False}
    assert verdict(data)[0] is met


def test_a_shape_met_is_not_listed_as_lost():
    assert lost({"shapes": [shape_data((0.995, 900.0))]}) == []


def test_the_committed_report_is_what_its_results_render():
    assert REPORT.read_text() == render(json.loads(RESULTS.read_text()))
