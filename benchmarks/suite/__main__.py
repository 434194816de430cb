"""python -m benchmarks.suite: the workload suite (benchmarks/suite/shapes.py), measured and rendered.

    .venv/bin/python -m benchmarks.suite --workers 2 --json benchmarks/results/suite.json \
        --report benchmarks/suite.md
    .venv/bin/python -m benchmarks.suite --workers 2 --json benchmarks/results/suite.json \
        --report benchmarks/suite.md --extend --policy lagged:60 --policy lagged:300

The second adds the references (``runner.REFERENCES``) that tell a shape's limit (``--shape`` for some
shapes only); on a whole run's results, the suite's time is then both runs'.

``--shape NAME`` (repeatable) or ``--split tune|test`` measures part of it; with ``--update`` the shapes
measured replace theirs in the ``--json`` file and the rest are kept; with ``--extend``, the ``--policy``
rows are run alone and added to the shapes' figures in the ``--json`` file (their best fixed fleets
kept). ``--render PATH`` renders a results file without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.suite import figure
from benchmarks.suite.render import cell, render, verdict
from benchmarks.suite.runner import DEFAULT, POLICIES, cpu_seconds, extended, measure_shape
from benchmarks.suite.shapes import SHAPES, SPLITS, shape

FIGURES = harness.REPO / "benchmarks" / "figures"


def measure(args: argparse.Namespace, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chosen shapes' results; with ``old`` (``--update``), merged into it, and written to ``--json``
    after each shape."""
    chosen = [shape(n) for n in args.shape] if args.shape else [s for s in SHAPES if args.split in (None, s.split)]
    policies = tuple(args.policy or POLICIES)
    start, cpu = time.monotonic(), cpu_seconds()
    data: dict[str, Any] = {
        "machine": harness.machine(),
        "code": harness.revision("nlgsim", "autoscaler", "triton_backend/scheduler.py", "benchmarks/suite"),
        "date": datetime.date.today().isoformat(),
        "workers": args.workers,
        "shapes": [],
    }
    before = {x["name"]: x for x in (old or {}).get("shapes", [])}
    for s in chosen:
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        shape_data = measure_shape(s, args.workers, policies, say, search=not args.extend)
        if args.extend:
            shape_data = extended(before[s.name], shape_data)
        data["shapes"].append(shape_data)
        print(f"{s.name}: {verdict(shape_data)[1]} ({cell(shape_data, DEFAULT)})", file=sys.stderr, flush=True)
        if args.json:  # after each shape: a long run keeps what it finished
            partial = {**data, "wall_seconds": None, "cpu_seconds": None, "partial_runs": True}
            harness.write_json(args.json, merged(old, partial) if old else partial)
    done = {**data, "wall_seconds": round(time.monotonic() - start, 1), "cpu_seconds": round(cpu_seconds() - cpu, 1)}
    if args.extend and old and not old.get("partial_runs"):
        # Rows added to the shapes of one whole run: the suite's time is both runs'.
        times = {k: round(old[k] + done[k], 1) for k in ("wall_seconds", "cpu_seconds")}
        return {**merged(old, done), **{k: old[k] for k in ("code", "date", "workers")}, **times, "partial_runs": False}
    return merged(old, done) if old else done


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with ``new``'s shapes in place of theirs, in the suite's order; the times are no longer one run's."""
    by_name = {s["name"]: s for s in old.get("shapes", [])} | {s["name"]: s for s in new["shapes"]}
    order = [s.name for s in SHAPES]
    shapes = sorted(by_name.values(), key=lambda s: order.index(s["name"]) if s["name"] in order else len(order))
    return {**new, "shapes": shapes, "wall_seconds": None, "cpu_seconds": None, "partial_runs": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    harness.output_arguments(parser)
    parser.add_argument("--workers", type=int, default=1, help="processes for the runs (same output)")
    parser.add_argument("--shape", action="append", default=[], help="a shape's name (repeatable); default: all")
    parser.add_argument("--split", choices=SPLITS, help="only this set's shapes")
    parser.add_argument("--policy", action="append", default=[], help=f"instead of {', '.join(POLICIES)}")
    parser.add_argument("--update", action="store_true", help="merge into --json instead of replacing it")
    parser.add_argument("--extend", action="store_true", help="add the --policy rows to the shapes in --json")
    args = parser.parse_args(argv)
    if args.render:
        data = harness.read_json(args.render)
    else:
        if args.extend and not (args.policy and args.json and Path(args.json).exists()):
            parser.error("--extend adds --policy rows to the shapes of an existing --json file")
        kept = (args.update or args.extend) and args.json and Path(args.json).exists()
        data = measure(args, json.loads(Path(args.json).read_text()) if kept else None)
    if args.json:
        harness.write_json(args.json, data)
    if args.report:
        for split in SPLITS:
            figure.draw(data, split, FIGURES / f"suite_{split}.png")
    harness.publish(render(data), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
