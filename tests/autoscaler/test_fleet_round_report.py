"""The fleet benchmark's report is what its results render to, the docs' fleet size is the one the
results give, the benchmark's pages are Triton's, and the report's arithmetic on synthetic results."""

from __future__ import annotations

import copy
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import fleet_pods, fleet_round

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "fleet_round.json"


def test_the_fleet_report_is_what_its_results_render_to():
    command = [sys.executable, "-m", "benchmarks.fleet_round", "--render", str(RESULTS)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120, cwd=ROOT)
    assert done.stdout == (ROOT / "benchmarks" / "fleet_round.md").read_text() + "\n"


def test_the_docs_fleet_size_is_the_benchmarks():
    switch = fleet_round.switch_limits(json.loads(RESULTS.read_text()))["switch"]
    doc = (ROOT / "docs" / "autoscaler.md").read_text()
    stated = re.findall(r"direct source keeps up to about\s+\*\*([\d,]+) pods\*\*", doc)
    assert [int(n.replace(",", "")) for n in stated] == [switch]


def families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def test_the_fleets_pages_are_a_tritonserver_page_with_every_family_of_the_model():
    captured = families(fleet_pods.TRITON_SCRAPE.read_text())
    documented = set(re.findall(r"^\| `(nlg_[a-z_]+)` \|", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    assert documented <= captured, "recapture: python -m benchmarks.fleet_round --capture-triton"
    assert {"nv_inference_count", "nv_inference_pending_request_count"} <= captured
    pod = fleet_pods.FleetPod(0, random.Random(0))
    pod.advance()
    assert families(pod.exposition()) == captured | {name for name, _ in fleet_pods.GPU_FAMILIES}


def synthetic(per_pod_round_ms: float, per_pod_scrape_ms: float, aggregate_decide_ms: float) -> dict:
    """Results whose stages grow linearly with the pods; the largest size's aggregate + decide given."""
    data = json.loads(RESULTS.read_text())
    data["setup"].update(sizes=[100, 1000], timeout_s=2.0, interval_s=5.0)
    results = {}
    for pods in (100, 1000):
        base = copy.deepcopy(next(iter(data["results"].values())))
        stages = base["round"]["stages_ms"]
        stages["round"] = {"median": per_pod_round_ms * pods, "p90": per_pod_round_ms * pods}
        stages["scrape"] = {"median": per_pod_scrape_ms * pods, "p90": per_pod_scrape_ms * pods}
        stages["aggregate_decide"] = {"median": aggregate_decide_ms, "p90": aggregate_decide_ms}
        results[str(pods)] = base
    data["results"] = results
    return data


@pytest.mark.parametrize(
    ("round_ms", "scrape_ms", "want"),
    [(1.0, 0.5, {"by_timeout": 4000, "by_interval": 2500, "switch": 2500}),
     (0.5, 1.0, {"by_timeout": 2000, "by_interval": 5000, "switch": 2000}),
     (2.0, 1.5, {"by_timeout": 1333, "by_interval": 1250, "switch": 1200})],
    ids=["interval-binds", "timeout-binds", "rounded-down"],
)  # fmt: skip
def test_the_fleet_size_limit_is_the_tighter_of_timeout_and_interval(round_ms, scrape_ms, want):
    assert fleet_round.switch_limits(synthetic(round_ms, scrape_ms, 50.0)) == want


@pytest.mark.parametrize(("aggregate_decide_ms", "verdict"), [(50.0, "**met**"), (150.0, "**not met**")])
def test_the_report_says_whether_the_targets_were_met(aggregate_decide_ms, verdict):
    text = fleet_round.render(synthetic(0.5, 0.2, aggregate_decide_ms))
    claim = f"aggregate + decide {aggregate_decide_ms:.1f} ms (target under 100 ms: {verdict})"
    assert claim in text
