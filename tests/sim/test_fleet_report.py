"""The fleet-scale section's verdicts on results made by hand: the best fixed fleet in hindsight, the
cheapest policy of this project at the target, and each row's goal."""

from __future__ import annotations

import math
from dataclasses import replace

from autoscaler.config import ScalerSpec
from benchmarks.scaling import fleet
from nlgsim.protocol_result import OracleSummary, ProtocolResult, Replicate, RunKey, RunResult
from nlgsim.protocol_tables import trace_table
from nlgsim.results import Summary


def summary(name: str, attainment: float, gpu: float, peak: int) -> Summary:
    return Summary(
        name=name, requests=1000, violations={"request": 0, "ttft": 0, "pertoken": 0}, attainment=attainment,
        gpu_seconds=gpu, first_scale_s=math.nan, max_replicas=peak, latency_p50_s=1.0, latency_p99_s=2.0,
        ttft_p50_s=0.1, ttft_p99_s=0.2, per_token_p50_s=0.02, per_token_p99_s=0.03, end_s=500.0,
        attainment_feasible=attainment,
    )  # fmt: skip


def made(runs: dict[str, tuple[float, float]], oracle: float = 1000.0, paid: float = 1100.0) -> ProtocolResult:
    """One window: per policy (attainment, GPU-seconds); the window's oracle and start-up bound."""
    timeline = ((0.0, 2), (10.0, 3), (20.0, 3), (30.0, 2))
    return ProtocolResult(
        protocol="trace", command={"policies": list(runs), "slo": {"target": 0.99}}, profile="hand",
        workload="made by hand", slo="", feasibility="",
        replicates=(Replicate(0, "window 0", 60.0, 900.0, 2, 1000, 0.0, oracle, paid),),
        runs=tuple(
            RunResult(RunKey(p, 0), summary(p, a, g, int(p.partition(":")[2]) if p.startswith("fixed") else 3),
                      () if p.startswith("fixed") else timeline)
            for p, (a, g) in runs.items()
        ),
        oracle=OracleSummary(30.0, (1, 2, 3), 1000.0, (), 0, 60.0, 64),
    )  # fmt: skip


RESULT = made({
    "planner": (0.995, 1200.0),
    "pertoken:15 w30": (0.999, 3000.0),
    "kpa": (0.999, 1100.0),
    "fixed:3": (0.97, 900.0),
    "fixed:4": (0.992, 1400.0),
    "fixed:5": (0.999, 1500.0),
})  # fmt: skip


def test_the_best_fixed_fleet_is_the_fewest_replicas_reaching_the_target():
    best = fleet.best_fixed(RESULT)
    assert best is not None and best.name == "fixed:4"
    assert fleet.best_fixed(made({"fixed:3": (0.97, 900.0)})) is None


def test_the_best_fixed_fleet_is_bracketed_only_where_one_replica_fewer_was_run_and_missed():
    assert fleet.best_fixed_bracketed(RESULT)  # fixed:3 was run and missed
    assert not fleet.best_fixed_bracketed(made({"fixed:5": (0.999, 1500.0), "fixed:6": (1.0, 1800.0)}))
    assert not fleet.best_fixed_bracketed(made({"fixed:3": (0.97, 900.0)}))  # none reaches the target
    assert fleet.best_fixed_bracketed(made({"fixed:1": (0.995, 300.0)}))  # no fleet is smaller
    # The renderer refuses the report while any row's best fixed fleet is only the fewest of those run.
    rows = {key: made({"fixed:5": (0.999, 1500.0)}) for _, _, key in fleet.ROWS}
    assert fleet.values(rows)["check:fleet.best_fixed_bracketed"] == "false"
    rows = {key: RESULT for _, _, key in fleet.ROWS}
    assert fleet.values(rows)["check:fleet.best_fixed_bracketed"] == "true"


def test_the_conv_rows_are_met_as_the_prose_says_and_the_other_windows_meeting_them_are_named():
    # made() charges the start-up bound 1100 GPU-s: 1200 is 1.09x it, 1300 1.18x.
    def conv(planner: tuple[float, float], **windows: tuple[float, float]) -> ProtocolResult:
        runs = {"planner": planner, **{f"planner w{k[1:]}": v for k, v in windows.items()}}
        return made({**runs, "fixed:2": (0.95, 1000.0), "fixed:3": (1.0, 1500.0)})

    met = conv((0.995, 1200.0), w30=(0.995, 1300.0), w90=(0.98, 1100.0))
    rows = {"trace-conv-h100-x10": met, "trace-conv-h100-x30": met}
    windows = ("planner w30", "planner w90")
    assert fleet.conv_rows_met(rows) and fleet.other_windows_meeting(rows, windows) == []
    assert fleet.other_windows_text(rows, windows) == "none meets both"
    over = conv((0.995, 1300.0), w30=(0.995, 1300.0), w90=(0.98, 1100.0))  # over the start-up goal
    assert not fleet.conv_rows_met({**rows, "trace-conv-h100-x30": over})
    under = conv((0.985, 1200.0), w30=(0.995, 1300.0), w90=(0.98, 1100.0))  # under the target
    assert not fleet.conv_rows_met({**rows, "trace-conv-h100-x10": under})
    assert not fleet.conv_rows_met({})  # no row run: no claim
    # Another window meeting both rows too is named; met on one row only, it is not.
    also = conv((0.995, 1200.0), w30=(0.995, 1250.0), w90=(0.995, 1100.0))
    both = {"trace-conv-h100-x10": also, "trace-conv-h100-x30": also}
    assert fleet.other_windows_meeting(both, windows) == ["planner w30", "planner w90"]
    assert fleet.other_windows_text(both, windows).startswith("`planner w30` and `planner w90` meet both as well")
    assert fleet.other_windows_meeting({"trace-conv-h100-x10": also, "trace-conv-h100-x30": met}, windows) == []
    assert fleet.other_windows_meeting(rows, ("planner w180",)) == []  # no window run: none named


def test_the_cheapest_of_this_project_leaves_out_the_anchors_and_fixed_fleets():
    assert fleet.cheapest(RESULT).name == "kpa"  # any policy
    assert fleet.cheapest(RESULT, fleet.OWN).name == "planner"


def test_each_rows_goal():
    # x1: the planner at 1200 / 1400 of the best fixed: met.
    assert fleet.verdict("azure2023_conv", 1, RESULT)[0]
    # conv x10 also needs <= 1.15x the start-up bound: 1200 / 1100 = 1.09: met.
    assert fleet.verdict("azure2023_conv", 10, RESULT)[0]
    # code x10 needs <= 0.85x the best fixed: 1200 / 1400 = 0.86: not met, and it says by how much.
    ok, why = fleet.verdict("azure2023_code", 10, RESULT)
    assert not ok and "`planner` at 0.86x `fixed:4`" in why
    dear = made({"planner": (0.995, 1500.0), "fixed:4": (0.992, 1400.0)})
    assert "reaches it at 1.07x `fixed:4`" in fleet.verdict("azure2023_conv", 1, dear)[1]
    short = made({"planner": (0.98, 900.0), "fixed:4": (0.992, 1400.0)})
    assert fleet.verdict("azure2023_conv", 1, short) == (
        False, "no policy of this project reaches the target at its defaults"
    )


def test_the_table_has_every_column_the_issue_asks_for_and_a_row_not_run_says_so():
    table = fleet.fleet_table(RESULT)
    for column in ("attainment % (feasible)", "GPU-s", "x oracle", "x start-up bound", "x best fixed",
                   "peak replicas", "scale events / window"):  # fmt: skip
        assert column in table
    assert "| fixed:4 (best fixed) " in table
    assert "| planner " in table and "| 2 " in table  # two changes of the pod count in its timeline
    summary_rows = fleet.summary_table({"trace-conv-h100-x10": RESULT}).splitlines()
    assert sum("not run" in row for row in summary_rows) == len(fleet.ROWS) - 1


def test_the_approaches_tried_are_listed_for_each_row_not_met_only():
    # code x10 is not met (0.86x), conv x10 is met: only code's column, every policy but the fixed fleets.
    table = fleet.approaches_table({"trace-code-h100-x10": RESULT, "trace-conv-h100-x10": RESULT})
    header = table.splitlines()[0]
    assert "`azure2023_code` x10" in header and "conv" not in header
    assert "| `planner` " in table and "99.50%, 0.86x `fixed:4`" in table
    assert "| `kpa` " in table and not any(row.startswith("| `fixed:") for row in table.splitlines())
    missing = made({"planner": (0.98, 900.0), "fixed:4": (0.992, 1400.0)})
    both = fleet.approaches_table({"trace-code-h100-x10": RESULT, "trace-code-h100-x30": missing})
    assert "| `kpa` " in both and " - " in both  # kpa was not run on x30
    assert fleet.approaches_table({"trace-conv-h100-x10": RESULT}) == ""


def test_slot_bound_says_whether_a_higher_plan_fraction_left_the_planners_gpu_seconds_alone():
    same = made({"planner": (0.995, 1200.0), "planner:0.9": (0.995, 1205.0), "fixed:4": (0.992, 1400.0)})
    assert fleet.slot_bound(same)
    cheaper = made({"planner": (0.995, 1200.0), "planner:0.9": (0.99, 1100.0), "fixed:4": (0.992, 1400.0)})
    assert not fleet.slot_bound(cheaper)
    assert not fleet.slot_bound(RESULT) and not fleet.slot_bound(None)  # not run: the claim is not made


def test_the_lagged_oracle_is_a_reference_never_the_cheapest_and_never_an_approach():
    lagged = made({"lagged:300": (0.999, 800.0), "planner": (0.995, 1200.0), "fixed:4": (0.992, 1400.0)})
    assert fleet.cheapest(lagged).name == "planner"  # the reference is cheaper, but no user can run it
    assert fleet.cheapest(lagged, ("lagged",)).name == "lagged:300"
    table = fleet.approaches_table({"trace-code-h100-x10": lagged})
    assert "| `planner` " in table and "lagged" not in table
    assert "| lagged:300 " in fleet.fleet_table(lagged)  # a row of the experiment's own table


def test_the_lagged_lines_say_per_row_not_met_which_hold_meets_the_goal_or_what_keeps_the_closest_short():
    # code x10 (<= 0.85x the best fixed): lagged:300 at 800 / 1400 = 0.57x meets it; lagged:120 misses the target.
    met = made({"lagged:120": (0.97, 600.0), "lagged:300": (0.999, 800.0), "planner": (0.995, 1300.0),
                "fixed:4": (0.992, 1400.0)})  # fmt: skip
    lines = fleet.lagged_lines({"trace-code-h100-x10": met})
    assert lines == "- `azure2023_code` x10: met by `lagged:300` (99.90%, 0.57x `fixed:4`, 0.73x the start-up bound)"
    # Reaching the target, but dearer than the goal: the cheapest one at the target says by how much.
    dear = made({"lagged:300": (0.995, 1300.0), "lagged:600": (0.999, 1350.0), "planner": (0.995, 1300.0),
                 "fixed:4": (0.992, 1400.0)})  # fmt: skip
    assert fleet.lagged_lines({"trace-code-h100-x10": dear}).endswith(
        "not met by any hold: `lagged:300` at 0.93x `fixed:4`'s GPU-s"
    )
    # None at the target: the closest, by attainment.
    short = made({"lagged:120": (0.90, 700.0), "lagged:600": (0.95, 1000.0), "planner": (0.90, 900.0),
                  "fixed:4": (0.992, 1400.0)})  # fmt: skip
    assert fleet.lagged_lines({"trace-code-h100-x10": short}).endswith(
        "none reaches the target; `lagged:600`, the closest, 95.00% at 0.71x `fixed:4`"
    )
    # A row met, or a row whose experiment ran no lagged oracle, has no line.
    assert fleet.lagged_lines({"trace-conv-h100-x10": RESULT, "trace-code-h100-x10": RESULT}) == ""


def test_the_front_of_a_trace_table_is_over_the_policies_a_user_can_run():
    # lagged:300 is cheaper and better than the planner; the planner stays on the front, the reference is not on it.
    lagged = made({"lagged:300": (0.999, 800.0), "planner": (0.995, 1200.0), "fixed:4": (0.992, 1400.0)})
    cells = [line.split("|") for line in trace_table(lagged, 0.99).splitlines()[2:]]
    rows = {c[1].strip(): c[2].strip() for c in cells}
    assert rows == {"lagged:300": "", "planner": "*", "fixed:4": ""}


def test_the_windows_findings_say_which_meets_the_goal_where_or_which_comes_closest():
    # conv rows not met at the defaults (planner 1.21x fixed:4); code at its recorded rate beside them.
    def conv(long: tuple[float, float], w90: tuple[float, float] = (0.995, 1500.0)) -> ProtocolResult:
        runs = {"planner": (0.995, 1700.0), fleet.LONG_WINDOW: long, "planner w90": w90, "fixed:4": (0.992, 1400.0)}
        return made(runs, paid=1300.0)

    def code(long: float) -> ProtocolResult:
        return made({"planner": (0.995, 1500.0), fleet.LONG_WINDOW: (long, 1450.0), "fixed:4": (0.992, 1400.0)})

    windows = ("planner w90", fleet.LONG_WINDOW)
    met = conv((0.995, 1350.0))
    rows = {"trace-conv-h100-x10": met, "trace-conv-h100-x30": met, "trace-code-h100": code(0.985)}
    assert not fleet.verdict("azure2023_conv", 10, met)[0]  # met only by a setting other than the defaults
    assert fleet.window_findings(rows, windows) == (
        f"On `conv` above the recorded rate the goal is met by `{fleet.LONG_WINDOW}` on x10 and x30, on neither "
        f"row by `planner w90`; on `code` at its recorded rate the target is missed by `{fleet.LONG_WINDOW}`"
    )
    marked = [line for line in fleet.values(rows)["fleet.approaches"].splitlines() if "(meets the goal)" in line]
    assert len(marked) == 1 and marked[0].startswith(f"| `{fleet.LONG_WINDOW}`") and marked[0].count("meets") == 2
    # Over the best fixed fleet on x10 (and w90 under the target there): none meets it; the closest is the
    # window at the target on both rows whose larger ratio is the least.
    over = {
        "trace-conv-h100-x10": conv((0.995, 1450.0), w90=(0.98, 1300.0)),
        "trace-conv-h100-x30": conv((0.995, 1420.0)),
        "trace-code-h100": code(0.995),
    }
    assert fleet.window_findings(over, windows) == (
        f"On `conv` above the recorded rate none of them meets the goal: the closest, `{fleet.LONG_WINDOW}`, "
        "spends 1.036x and 1.014x the best fixed fleet's GPU-seconds (x10 and x30); on `code` at its recorded "
        "rate each of them reaches the target"
    )
    assert fleet.window_findings({"trace-code-h100": code(0.995)}, windows) == ""  # no conv row: nothing said


def test_the_long_windows_terms_are_read_for_conv_above_the_recorded_rate_with_their_check():
    def terms(work: float, burst: float, planned: float, asked: float) -> dict:
        means = {"work measured": work, "burst level": burst, "planned (the largest)": planned, "asked for": asked}
        return {name: {"mean": m} for name, m in means.items()}

    def row(scale: int, long_burst: float, long_asked: float) -> dict:
        return {
            "trace": "azure2023_conv", "scale": scale, "terms": terms(-0.9, 0.7, 0.9, 1.5),
            "long": {"terms": terms(-1.0, long_burst, 0.3, long_asked)},
        }  # fmt: skip

    code = {"trace": "azure2023_code", "scale": 10, "terms": terms(-3, 9, 9, 9), "long": {"terms": terms(0, 0, 0, 0)}}
    got = fleet.long_need_values({"rows": [row(1, 5.0, 9.0), row(10, -0.1, 0.7), row(30, 0.2, 0.8), code]})
    assert got == {
        "need.conv.burst": "+0.70", "need.long.conv.burst": "-0.10 to +0.20", "need.long.conv.held": "0.40 to 0.50",
        "need.long.conv.work_below": "1.00", "check:need.long_holds_higher": "false",
    }  # fmt: skip
    # Holding more over the long window than over the default one on every row.
    got = fleet.long_need_values({"rows": [row(10, -0.1, 2.1), row(30, 0.8, 2.0)]})
    assert got["check:need.long_holds_higher"] == "true"
    assert fleet.long_need_values(None)["check:need.long_holds_higher"] == "false"  # not measured: no claim


def test_the_need_values_are_read_for_conv_above_the_recorded_rate_with_their_check():
    def row(trace: str, scale: int, work: float, planned: float, asked: float) -> dict:
        means = {"work measured": work, "planned (the largest)": planned, "asked for": asked}
        terms = {name: {"mean": m, "sd": 0.5} for name, m in means.items()}
        return {"trace": trace, "scale": scale, "terms": terms}

    rows = [row("azure2023_conv", 10, -0.8, -0.2, 0.6), row("azure2023_conv", 30, -1.6, -0.4, 0.8),
            row("azure2023_conv", 1, 5.0, 5.0, 5.0), row("azure2023_code", 10, 9.0, 9.0, 9.0)]  # fmt: skip
    got = fleet.need_values({"rows": rows})
    assert got == {
        "need.conv.work_below": "0.80 to 1.60", "need.conv.work_spread": "0.50", "need.conv.planned": "-0.40 to -0.20",
        "need.conv.held": "0.80 to 1.20", "need.conv.asked": "+0.60 to +0.80", "check:need.conv_signs": "true",
    }  # fmt: skip
    # Asking for less than the need on one row, or measuring more work than it: the prose is refused.
    for bad in (row("azure2023_conv", 30, -1.6, -0.4, -0.1), row("azure2023_conv", 30, 0.1, -0.4, 0.8)):
        assert fleet.need_values({"rows": [rows[0], bad]})["check:need.conv_signs"] == "false"
    assert fleet.need_values(None)["check:need.conv_signs"] == "false"


def test_the_short_values_are_per_row_above_the_recorded_rate_with_the_checks_the_prose_needs():
    def row(trace: str, scale: int, median: float, allowance: float) -> dict:
        short = {"intervals": 10, "median": median, "allowance": allowance}
        return {"trace": f"azure2023_{trace}", "scale": scale, "short": short}

    rows = [row("conv", 1, 0.1, 9.0), row("conv", 10, 0.288, 2.54), row("conv", 30, 0.906, 0.33)]
    got = fleet.short_values({"rows": [*rows, {"trace": "azure2023_code", "scale": 10, "short": {"intervals": 0}}]})
    assert got == {
        "need.short.conv_x10.median": "29", "need.short.conv_x10.allowance": "2.54",
        "need.short.conv_x30.median": "91", "need.short.conv_x30.allowance": "0.33",
        "check:need.short.conv_x10_whole": "true", "check:need.short.conv_x30_under_one": "true",
    }  # fmt: skip
    turned = [row("conv", 10, 0.9, 0.4), row("conv", 30, 0.5, 1.8)]
    got = fleet.short_values({"rows": turned})
    assert got["check:need.short.conv_x10_whole"] == got["check:need.short.conv_x30_under_one"] == "false"
    assert fleet.short_values(None)["check:need.short.conv_x10_whole"] == "false"


def test_the_long_windows_seconds_are_read_from_its_policy_and_the_trace_protocol(monkeypatch):
    default = ScalerSpec()
    assert fleet.long_window_values("planner w90") == {
        "fleet.long_window_s": "90", "fleet.protocol_window_s": f"{default.time_window:g}",
        "fleet.protocol_stabilization_s": f"{default.stabilization_window:g}",
        "fleet.long_window_x": f"{90 / default.time_window:g}", "check:fleet.protocol_at_defaults": "true",
    }  # fmt: skip
    assert fleet.long_window_values()["fleet.long_window_s"] == fleet.LONG_WINDOW.rpartition("w")[2]
    # A protocol that sets the scaler's window itself: read from there, and the claim that the goal is
    # judged at the autoscaler's defaults is refused.
    trace = replace(fleet.PROTOCOLS["trace"], scaler={"max_deployment_count": 64, "time_window": 30})
    monkeypatch.setitem(fleet.PROTOCOLS, "trace", trace)
    got = fleet.long_window_values("planner w90")
    assert (got["fleet.protocol_window_s"], got["fleet.long_window_x"]) == ("30", "3")
    assert got["check:fleet.protocol_at_defaults"] == "false"


