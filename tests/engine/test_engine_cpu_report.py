"""The committed CPU engine report is what its results file renders to: no figure in it is typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import engine_throughput

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_its_results_rendered():
    results = json.loads((ROOT / "benchmarks" / "results" / "engine_cpu.json").read_text())
    assert engine_throughput.render(results) == (ROOT / "benchmarks" / "engine_cpu.md").read_text()


def test_the_report_names_the_revision_and_the_load_it_was_measured_under():
    results = json.loads((ROOT / "benchmarks" / "results" / "engine_cpu.json").read_text())
    first_lines = engine_throughput.render(results).splitlines()[2]
    assert f"at `{results['code']}`" in first_lines
    assert f"load average {results['load_before']:.2f}" in first_lines
