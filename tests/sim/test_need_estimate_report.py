"""The committed need-estimate report is its results rendered, over the scaling report's rows; each
term reads what the planner records in a round; the statistics are those of term less need."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sim_testkit import paper_profile

from autoscaler.aggregate import LatencyStats, WindowStats
from autoscaler.config import ScalerSpec
from benchmarks import harness, need_estimate
from benchmarks.scaling.experiments import LONG_WINDOW
from benchmarks.scaling.fleet import ROWS
from nlgsim.planner import PlannerConfig, PlannerState, planner_decide
from nlgsim.results import SLO
from nlgsim.simulator import LoopRecord

ROOT = Path(__file__).resolve().parents[2]
DATA = harness.read_json(ROOT / "benchmarks/results/need_estimate.json")


def test_the_committed_report_is_its_results_rendered():
    assert (ROOT / "benchmarks/need_estimate.md").read_text() == need_estimate.render(DATA)


def test_its_rows_are_the_scaling_reports_and_each_names_every_term():
    assert [(r["trace"], r["scale"], r["key"]) for r in DATA["rows"]] == list(ROWS)
    for row in DATA["rows"]:
        assert list(row["terms"]) == list(need_estimate.TERMS) and row["rounds"] > 0
        # The long window's rounds are the same rounds of the same windows, measured over longer windows.
        assert list(row["long"]["terms"]) == list(need_estimate.TERMS) and row["long"]["rounds"] == row["rounds"]
    assert DATA["long_window"] == LONG_WINDOW


def test_every_term_reads_what_the_planner_records_in_a_round():
    cfg = PlannerConfig(
        profile=paper_profile(max_batch=16, startup_s=20.0), per_token_target_s=0.02,
        slo=SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken")), prompt_tokens=34, output_tokens=30,
        long_output_tokens=34, lead_s=25.0,
    )  # fmt: skip
    stats = {name: LatencyStats(150.0, 0.05, 0.05, 0.05, 0.1) for name in ("ttft", "pertoken", "request", "itl")}
    window = WindowStats(latencies=stats, gauges={"waiting": 0.0, "running": 1.0}, pods=2, span=30.0)
    decision, _ = planner_decide(window, ScalerSpec(max_deployment_count=10), PlannerState(2), 0.0, cfg)
    record = LoopRecord(0.0, decision.current, decision.desired, True, decision.reason, dict(decision.values))
    read = {name: term(record) for name, term in need_estimate.TERMS.items()}
    assert all(math.isfinite(v) for v in read.values())
    terms = ("forecast at its headroom", "burst level", "TTFT queue")
    assert read["planned (the largest)"] == max(read[t] for t in terms)
    assert read["work measured"] == pytest.approx(decision.values["demand"] / decision.values["per_replica"])


def test_the_statistics_are_of_term_less_need():
    rounds = [{"need": 5.0, **dict.fromkeys(need_estimate.TERMS, v)} for v in (4.0, 6.0, 7.0, 7.0)]
    s = need_estimate.stats(rounds)["pods"]
    assert s["mean"] == pytest.approx(1.0)  # (-1 + 1 + 2 + 2) / 4
    assert s["sd"] == pytest.approx(math.sqrt((4 + 0 + 1 + 1) / 4))
    assert (s["above"], s["below"]) == (0.75, 0.25)


def test_each_rows_short_replay_is_set_against_a_windows_allowance():
    for row in DATA["rows"]:
        short = row["short"]
        assert short["window_intervals"] > 0 and 0 < short["target"] < 1
        if not short["intervals"]:
            assert row["need"] == 1.0  # nothing needed more than one replica: nothing to replay
            continue
        assert 0 <= short["median"] < short["target"]  # one short of the fewest that meet it falls below
        assert short["below"] == 1.0
        window_may_miss = short["window_intervals"] * (1 - short["target"])
        assert short["allowance"] == pytest.approx((1 - short["median"]) / window_may_miss)


def test_the_short_paragraph_says_what_was_replayed():
    short = {"intervals": 40, "median": 0.75, "below": 1.0, "window_intervals": 28, "target": 0.99, "allowance": 0.89}
    text = need_estimate.short_text(short)
    assert "the 40 intervals" in text and "median 75.0%" in text and "spends 0.89 of" in text
    assert "a window of 28 intervals at 99%" in text
    none = need_estimate.short_text({"intervals": 0, "window_intervals": 28, "target": 0.99})
    assert none.startswith("No interval needed more than one replica")
