"""The committed first-burst report is its results rendered, its windows are the scaling report's, and
its search for the replicas needed reads its own probes right."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import first_burst, harness
from benchmarks.scaling.fleet import ROWS

ROOT = Path(__file__).resolve().parents[2]
DATA = harness.read_json(ROOT / "benchmarks/results/first_burst.json")
SCALING = harness.read_json(ROOT / "benchmarks/results/scaling_policies.json")
BURSTS = [(row, w) for row in DATA["rows"] for w in row["windows"] if "burst_at_s" in w]


def test_the_committed_report_is_its_results_rendered():
    assert (ROOT / "benchmarks/first_burst.md").read_text() == first_burst.render(DATA)


def test_its_rows_and_windows_are_the_scaling_reports():
    assert [(r["trace"], r["scale"], r["key"]) for r in DATA["rows"]] == list(ROWS)
    for row in DATA["rows"]:
        replicates = SCALING["experiments"][row["key"]]["replicates"]
        assert [(w["opening"], w["from_s"]) for w in row["windows"]] == [
            (r["initial"], r["offset"] + r["since"]) for r in replicates
        ]


def test_the_first_new_burst_is_above_the_warm_up_and_the_window_so_far():
    # 10 s intervals; the warm-up (60 s) is intervals 0-5, the window from 60 s.
    counts = [1, 3, 1, 1, 1, 1, 2, 3, 2, 4, 1]
    assert first_burst.first_new_burst(counts, 10.0, 60.0, 110.0) == (90.0, 4, 3)
    assert first_burst.first_new_burst(counts, 10.0, 60.0, 90.0) is None
    assert first_burst.first_new_burst([0] * 6 + [2], 10.0, 60.0, 70.0) == (60.0, 2, 0)


@pytest.mark.parametrize("row, window", BURSTS, ids=lambda x: str(x.get("window", x.get("key"))))
def test_the_replicas_needed_are_the_fewest_probed_within_the_allowance(row, window):
    missed = {int(k): v for k, v in window["missed"].items()}
    allowed = len(row["windows"]) * (1 - row["target"]) * window["feasible"]
    needed = window["needed"]
    assert needed is not None and missed[needed] <= allowed
    assert all(v > allowed for k, v in missed.items() if k < needed)
    # More replicas never missed more of a burst (what the search assumes).
    ordered = [missed[k] for k in sorted(missed)]
    assert ordered == sorted(ordered, reverse=True)
    bound = 1 - missed[window["seen"]] / window["feasible"]
    assert window["bound_at_seen"] == pytest.approx(bound)
    assert window["mean_bound_at_seen"] == pytest.approx((bound + len(row["windows"]) - 1) / len(row["windows"]))
