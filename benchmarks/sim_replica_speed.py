"""Requests simulated per CPU-second, before and after a change to the simulator: the tree at `BEFORE`
against this one.

    .venv/bin/python -m benchmarks.sim_replica_speed [--repeat 2] [--before REV] [--scaling-report] \
        [--whole-report] --json benchmarks/results/sim_replica_speed.json --report benchmarks/sim_replica_speed.md

`REV` is checked out with `git archive` into a temporary directory; each measurement runs
`benchmarks/sim_speed_side.py` in a fresh process, from one tree or the other, the two taking turns so
that a change in the machine's load falls on both, and counts the CPU time of that process (what other
processes on the machine take shows less there than in wall-clock time): fixed-pod workloads, runs of
the simulator's command line at fleet scale (`FLEETS`: the trace protocol with its oracle at x10 and x100,
and a run of the planner), and the oracle alone; best of `--repeat` each. With `--scaling-report`, also
one experiment of the scaling report, wall-clock, as the report runs it (best of `REPORT_REPEAT`); with
`--whole-report`, every experiment of the report, once on each side (a quarter of an hour or more each
on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import harness, sim_speed_side

#: The commit before the simulator's speed-up of issue 46 (the x100 fleets and the oracle).
BEFORE = "45dae2e"
#: The report's experiment is timed this many times on each side (minutes each): the best of them.
REPORT_REPEAT = 2
MEASURED_FILES = (
    "nlgsim",
    "autoscaler/profile.py",
    "triton_backend/scheduler.py",
    "triton_backend/kv_pages.py",
    "triton_backend/sequence.py",
    "triton_backend/length_predictor.py",
)
SIDES = ("before", "after")
SIDE_SCRIPT = Path(sim_speed_side.__file__).resolve()


def checkout(rev: str, into: Path) -> None:
    """The tracked files of `rev` under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(harness.REPO), "archive", "--format=tar", rev], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")


def side(tree: Path, item: str, *args: str) -> dict[str, Any]:
    """`sim_speed_side`'s measurement `item` (with `args`) of the simulator in `tree`, in a process of its own."""
    done = subprocess.run(
        [sys.executable, str(SIDE_SCRIPT), str(tree), item, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{item} in {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _best(runs: dict[str, dict[str, Any]], s: str, run: dict[str, Any]) -> None:
    """Keeps `run` as side `s`'s measurement where it took less CPU than the one kept."""
    if s not in runs or run["cpu_s"] < runs[s]["cpu_s"]:
        runs[s] = {k: v for k, v in run.items() if k not in ("engine_scheduler", "source")}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": Path(tmp), "after": harness.REPO}
        checkout(args.before, trees["before"])
        workloads: dict[str, list[float]] = {s: [float("inf")] * len(sim_speed_side.WORKLOADS) for s in SIDES}
        fleets: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in sim_speed_side.FLEETS}
        oracle: dict[str, dict[str, Any]] = {}
        ran: dict[str, bool] = {}
        for _ in range(args.repeat):
            for s in SIDES:
                got = side(trees[s], "workloads")
                ran[s] = got["engine_scheduler"]
                workloads[s] = [min(a, b) for a, b in zip(workloads[s], got["cpu_s"], strict=True)]
                for name in sim_speed_side.FLEETS:
                    _best(fleets[name], s, side(trees[s], "fleet", name))
                _best(oracle, s, side(trees[s], "oracle"))
        report = None
        if args.scaling_report:
            report = {s: {"wall_s": float("inf"), "load_after": 0.0} for s in SIDES}
            for _ in range(REPORT_REPEAT):
                for s in SIDES:
                    run = side(trees[s], "report")
                    if run["wall_s"] < report[s]["wall_s"]:
                        report[s] = {"wall_s": run["wall_s"], "load_after": run["load_after"]}
        whole = {s: side(trees[s], "whole_report") for s in SIDES} if args.whole_report else None
    rows = [
        {
            "workload": name,
            "profile": profile,
            "rate": rate,
            "requests": count,
            "replicas": replicas,
            "cpu_s": {s: workloads[s][i] for s in SIDES},
        }
        for i, (name, profile, _, rate, count, replicas) in enumerate(sim_speed_side.WORKLOADS)
    ]
    return {
        "machine": harness.machine(),
        "load": [load_before, os.getloadavg()[0]],
        "code": {"before": args.before, "after": harness.revision(*MEASURED_FILES)},
        "engine_scheduler": ran,
        "date": datetime.date.today().isoformat(),
        "repeat": args.repeat,
        "rows": rows,
        "fleets": [
            {"name": name, "run": what, "command": command, **fleets[name]}
            for name, (what, command) in sim_speed_side.FLEETS.items()
        ],
        "oracle": {"run": sim_speed_side.ORACLE[0], **oracle},
        "report": None if report is None else {
            "experiment": sim_speed_side.REPORT_EXPERIMENT,
            "workers": sim_speed_side.REPORT_WORKERS,
            "repeat": REPORT_REPEAT,
            "wall_s": {s: report[s]["wall_s"] for s in SIDES},
            "load_after": {s: report[s]["load_after"] for s in SIDES},
        },
        "whole_report": whole,
    }  # fmt: skip


def _replica(data: dict[str, Any], s: str) -> str:
    return "the engine's scheduler" if data["engine_scheduler"][s] else "the simulator's copy of the scheduler"


def _times(repeat: int) -> str:
    return "measured once" if repeat == 1 else f"best of {repeat}, the sides taking turns"


def _speedup(cpu: dict[str, float]) -> str:
    """How many times faster after is: before's CPU-s over after's."""
    return f"{cpu['before'] / cpu['after']:.2f}x"


def render(data: dict[str, Any]) -> str:
    m, code = data["machine"], data["code"]
    lines = [
        "# Simulator speed: before and after",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, load {data['load'][0]:.1f} before and "
        f"{data['load'][1]:.1f} after. Measured {data['date']} with `benchmarks/sim_replica_speed.py`: before "
        f"is {code['before']} (its replica runs {_replica(data, 'before')}), after is {code['after']} "
        f"(its replica runs {_replica(data, 'after')}). Each measurement ran in a process of its own, the "
        f"two taking turns; CPU time of that process, {_times(data['repeat'])}. Both sides give the same "
        "results, bit for bit (`tests/sim/test_decode_ahead.py` and `tests/sim/test_oracle_reference.py` "
        "compare the shortcuts with the straightforward computation).",
        "",
        "Runs of the simulator's command line, timed whole (Python's start, the trace read, the oracle):",
        "",
        "| run | requests | before: CPU-s | after: CPU-s | before: requests/CPU-s | after: requests/CPU-s "
        "| speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for fleet in data["fleets"]:
        lines.append(_row(fleet["run"], fleet["before"]["requests"], fleet))
    oracle = data["oracle"]
    lines.append(_row(oracle["run"], oracle["before"]["requests"], oracle))
    lines += [
        "",
        "Commands: " + "; ".join(
            f"{fleet['name']}: `python -m nlgsim {' '.join(fleet['command'])}`" for fleet in data["fleets"]
        ) + ".",
        "",
        "Fixed pods, steps run ahead of the queue (the simulator alone, no command line):",
        "",
        "| workload | profile | before: requests/CPU-s | after: requests/CPU-s | speed-up |",
        "|---|---|---:|---:|---:|",
    ]  # fmt: skip
    for row in data["rows"]:
        seconds = row["cpu_s"]
        lines.append(
            f"| {row['workload']} x{row['requests']}, {row['rate']:g}/s, {row['replicas']} pods "
            f"| `{row['profile'].rsplit('/', 1)[-1]}` | {row['requests'] / seconds['before']:,.0f} "
            f"| {row['requests'] / seconds['after']:,.0f} | {_speedup(seconds)} |"
        )
    report = data.get("report")
    if report:
        wall = report["wall_s"]
        lines += [
            "",
            f"The scaling report's `{report['experiment']}` experiment, as `python -m benchmarks.scaling` runs "
            f"it ({report['workers']} workers, wall-clock, {_times(report['repeat'])}; load "
            f"{report['load_after']['before']:.1f} and {report['load_after']['after']:.1f} after the runs "
            f"kept): {wall['before']:.0f} s before, {wall['after']:.0f} s after: {_speedup(wall)}.",
        ]
    whole = data.get("whole_report")
    if whole:
        lines += ["", *_whole_report(whole)]
    return "\n".join(lines) + "\n"


def _row(run: str, requests: int, measured: dict[str, Any]) -> str:
    cpu = {s: measured[s]["cpu_s"] for s in SIDES}
    return (
        f"| {run} | {requests:,} | {cpu['before']:.1f} | {cpu['after']:.1f} | {requests / cpu['before']:,.0f} "
        f"| {requests / cpu['after']:,.0f} | {_speedup(cpu)} |"
    )


def _whole_report(whole: dict[str, Any]) -> list[str]:
    """The whole report's time on each side, and its experiments' (those both sides ran)."""
    wall = {s: whole[s]["wall_s"] for s in SIDES}
    lines = [
        f"The whole scaling report, every experiment as `python -m benchmarks.scaling --workers "
        f"{sim_speed_side.REPORT_WORKERS}` runs them (wall-clock, measured once on each side; load "
        f"{whole['before']['load_after']:.1f} and {whole['after']['load_after']:.1f} after): "
        f"{wall['before'] / 60:.1f} minutes before, {wall['after'] / 60:.1f} after: {_speedup(wall)}. By "
        "experiment (the rest of the time is the thesis planner's numbers, which the runner computes first):",
        "",
        "| experiment | before, s | after, s | speed-up |",
        "|---|---:|---:|---:|",
    ]
    before, after = whole["before"]["experiments"], whole["after"]["experiments"]
    for key in [k for k in before if k in after]:
        ratio = _speedup({"before": before[key], "after": after[key]})
        lines.append(f"| `{key}` | {before[key]:.0f} | {after[key]:.0f} | {ratio} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", default=BEFORE, help="the commit to compare against (default %(default)s)")
    parser.add_argument(
        "--scaling-report", action="store_true", help="also time one experiment of the scaling report, wall-clock"
    )
    parser.add_argument(
        "--whole-report", action="store_true", help="also time every experiment of the report, once on each side"
    )
    harness.output_arguments(parser)
    args = parser.parse_args(argv)
    harness.publish(render(harness.results(args, measure)), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
