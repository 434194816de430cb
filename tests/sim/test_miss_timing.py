"""Where a run's misses fall: counted per SLO interval by the simulator, the window the replica figure
draws, and the misses placed against the pods billed a start-up before (results made by hand)."""

from __future__ import annotations

from sim_testkit import paper_profile
from test_fleet_report import summary

from benchmarks.scaling import miss_timing
from nlgsim.protocol_result import OracleSummary, ProtocolResult, Replicate, RunKey, RunResult
from nlgsim.protocol_tables import figure_window
from nlgsim.results import SLO, summarize, summarize_with_misses
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import COMPLEX, thesis_requests


def _window(index: int, oracle_gpu: float) -> Replicate:
    return Replicate(index, f"window {index}", 60.0, 60.0 + 8 * 30.0, 1, 100, index * 300.0, oracle_gpu, oracle_gpu)


def made(
    attained: dict[int, float], missed: tuple[int, ...], timeline: tuple[tuple[float, int], ...]
) -> ProtocolResult:
    """Two windows of eight 30 s intervals; ``attained``: the planner's attainment per window; in window 1
    the planner missed ``missed`` with pods ``timeline``. The oracle asks for 1 replica, then 4 from the
    window's fourth interval (offset 300 s + 60 s: interval 12 of the trace)."""
    oracle = (1,) * 14 + (4,) * 6 + (1,) * 10
    runs = [
        RunResult(RunKey("planner", i), summary("planner", a, 100.0, 4), timeline, missed if i == 1 else (0,) * 8)
        for i, a in attained.items()
    ]
    return ProtocolResult(
        protocol="trace", command={"slo": {"target": 0.99}}, profile="hand", workload="made by hand", slo="",
        feasibility="", replicates=(_window(0, 900.0), _window(1, 500.0)), runs=tuple(runs),
        oracle=OracleSummary(30.0, oracle, 1000.0, (), 0, 60.0, 64),
    )  # fmt: skip


def test_the_figure_draws_the_window_where_the_planner_attains_least():
    assert figure_window(made({0: 0.999, 1: 0.9}, (0,) * 8, ())).index == 1
    assert figure_window(made({0: 0.9, 1: 0.999}, (0,) * 8, ())).index == 0
    no_planner = made({0: 0.9, 1: 0.999}, (0,) * 8, ())
    no_planner = ProtocolResult(**{**no_planner.__dict__, "runs": ()})
    assert figure_window(no_planner).index == 0  # the window whose oracle costs most


def test_misses_count_as_late_only_where_the_oracle_outran_the_pods_billed_a_start_up_before():
    # Window 1's oracle: interval 0 is trace interval 12 (offset 300 s, since 60 s): 1, 1, then 4 from
    # interval 2 on. The planner bills 1 pod, 4 from 70 s: intervals 2-4 begin less than a start-up
    # (60 s) after it asked, interval 5 (150 s) on 4 asked at 70 s.
    missed = (5, 0, 40, 30, 20, 7, 0, 3)
    result = made({0: 0.999, 1: 0.9}, missed, ((0.0, 1), (70.0, 4)))
    found = miss_timing.window_misses(result)
    assert found is not None and found.label == "window 1"
    assert (found.missed, found.late) == (105, 90)  # 40 + 30 + 20 under pods billed 60 s before
    assert miss_timing.mostly_late({"k": result}, [("t", 10, "k")])
    early = made({0: 0.999, 1: 0.9}, missed, ((0.0, 4),))  # four pods all along: none late
    assert miss_timing.window_misses(early).late == 0  # type: ignore[union-attr]
    assert not miss_timing.mostly_late({"k": early}, [("t", 10, "k")])
    assert "90 of the 105 it misses (86%)" in miss_timing.lines({"k": result}, [("t", 10, "k")])


def test_pods_billed_at_a_time_before_the_first_change_are_those_the_window_opened_on():
    timeline = ((0.0, 2), (40.0, 5), (100.0, 3))
    assert [miss_timing.billed_at(timeline, t) for t in (-60.0, 0.0, 39.9, 40.0, 99.0, 500.0)] == [2, 2, 2, 5, 5, 3]


def test_a_runs_misses_per_interval_add_up_to_its_feasible_misses():
    slo = SLO(ttft_s=0.5, per_token_s=0.05, attain=("pertoken", "ttft"), interval_s=30.0)
    # One replica of eight slots under a load rising to what it cannot carry: more misses later on.
    log = simulate(Scenario(paper_profile(), thesis_requests(COMPLEX, 2.0, 1000, seed=3, ramp_s=170.0), None))
    whole, misses = summarize_with_misses(log, slo, "fixed", since=50.0, until=170.0)
    assert whole == summarize(log, slo, "fixed", since=50.0, until=170.0)
    assert len(misses) == 4  # [50, 170) in intervals of 30 s
    feasible = whole.requests - whole.infeasible
    assert sum(misses) == round((1 - whole.attainment_feasible) * feasible) > 0
    assert misses[0] < misses[-1]
