"""The committed held-out-shapes report is its results rendered; each shape reshapes a report experiment
with the defaults and fixed fleets; the verdict compares the cheapest default with the best fixed fleet."""

from __future__ import annotations

from pathlib import Path

from benchmarks import harness, held_out
from benchmarks.scaling.experiments import FLEET, experiment
from benchmarks.scaling.fleet import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
DATA = harness.read_json(ROOT / "benchmarks/results/held_out.json")


def test_the_committed_report_is_its_results_rendered():
    assert (ROOT / "benchmarks/held_out.md").read_text() == held_out.render(DATA)


def test_the_results_are_the_shapes_each_with_every_policy_run():
    assert [(s["shape"], s["from"], tuple(s["options"])) for s in DATA["shapes"]] == list(held_out.SHAPES)
    for s in DATA["shapes"]:
        assert list(s["policies"]) == [*FLEET, *held_out.FIXED]


def test_a_shape_keeps_its_experiments_workload_and_runs_this_benchmarks_policies():
    args = held_out.shape_args("trace-conv-h100-x10", ("--speed", "2"))
    source = list(experiment("trace-conv-h100-x10").args)
    assert args[: source.index("--policy")] == source[: source.index("--policy")]
    assert args[-2:] == ["--speed", "2"]
    policies = [args[i + 1] for i, a in enumerate(args) if a == "--policy"]
    assert policies == [*FLEET, *held_out.FIXED]


def shape(mine: tuple[float, float] | None, fixed: tuple[float, float] = (0.995, 1000.0)) -> dict:
    policies = {"fixed:4": {"feasible": fixed[0], "gpu": fixed[1], "peak": 4}}
    if mine:
        policies[DEFAULTS[0]] = {"feasible": mine[0], "gpu": mine[1], "peak": 6}
    return {"best_fixed": "fixed:4", "cheapest_default": DEFAULTS[0] if mine else None, "policies": policies}


def test_the_verdict_is_met_only_at_or_below_the_best_fixed_fleets_gpu_seconds():
    assert held_out.verdict(shape((0.995, 900.0))) == f"met: `{DEFAULTS[0]}` at 0.90x `fixed:4`'s GPU-s"
    assert held_out.verdict(shape((0.995, 1100.0))) == f"not met: `{DEFAULTS[0]}` at 1.10x `fixed:4`'s GPU-s"
    assert held_out.verdict(shape(None)) == "not met: no default reaches the target"
    assert held_out.verdict({**shape(None), "best_fixed": None}) == "no fixed fleet run reaches the target"
    unbracketed = {**shape((0.995, 900.0)), "best_fixed_bracketed": False}
    assert held_out.verdict(unbracketed).startswith("unknown: `fixed:4` is the fewest run")
