"""What every benchmark's command line shares: where a measurement came from (the commit, the machine)
and the `--json` / `--render` / `--report` plumbing, so that a report is rendered from its results
file alone and can be rendered again without measuring.

The benchmarks run from the repository root as modules, `python -m benchmarks.<name>`; a benchmark
that starts a child process starts it the same way, from `REPO`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def revision(*paths: str) -> str:
    """The commit measured, and whether the measured `paths` (every tracked file when none are named)
    differed from it. Untracked files count only among named paths: there a new module is code that
    ran, while a whole checkout always holds some stray untracked output."""
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    if commit.returncode != 0:
        return "unknown"
    untracked = "normal" if paths else "no"
    changed = subprocess.run(
        [*git, "status", "--porcelain", f"--untracked-files={untracked}", "--", *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    return commit.stdout.strip() + (" with uncommitted changes" if changed.stdout.strip() else "")


def cpu_model(proc: Path = Path("/proc")) -> str:
    """The CPU's model name as the kernel reports it, or what the platform module knows."""
    cpuinfo = (proc / "cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    return model or platform.processor() or platform.machine()


def machine(proc: Path = Path("/proc")) -> dict[str, Any]:
    """The host a CPU benchmark ran on: CPU model, cores, memory and Python."""
    meminfo = dict(line.split(":", 1) for line in (proc / "meminfo").read_text().splitlines() if ":" in line)
    return {
        "cpu": cpu_model(proc),
        "cores": os.cpu_count(),
        "memory_gib": round(int(meminfo["MemTotal"].split()[0]) / (1 << 20), 1),
        "python": platform.python_version(),
    }


def output_arguments(parser: argparse.ArgumentParser, render: bool = True) -> None:
    """`--json` and `--report`, and unless the benchmark merges several results files itself, `--render`."""
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--report", type=Path, help="write the report here")
    if render:
        parser.add_argument("--render", type=Path, help="render this results file instead of measuring")


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


def results(args: argparse.Namespace, measure: Callable[[argparse.Namespace], dict[str, Any]]) -> dict[str, Any]:
    """The results `--render` names, or `measure(args)`'s; written to `--json` when given."""
    data = read_json(args.render) if args.render else measure(args)
    if args.json:
        write_json(args.json, data)
    return data


def main(
    doc: str | None, measure: Callable[[argparse.Namespace], dict[str, Any]],
    render: Callable[[dict[str, Any]], str], argv: list[str] | None = None, workers: str = "",
) -> int:  # fmt: skip
    """The command line of a benchmark that measures (or reads `--render`) one results file and
    renders one report from it: `doc`'s first line is its description; with `workers` (its help), a
    `--workers` count of processes."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    output_arguments(parser)
    if workers:
        parser.add_argument("--workers", type=int, default=1, help=workers)
    args = parser.parse_args(argv)
    publish(render(results(args, measure)), args.report)
    return 0


def publish(text: str, report: Path | None) -> None:
    """A rendered report to stdout, and to `report` when given."""
    print(text)
    if report:
        report.write_text(text)


def computed(data: Mapping[str, Any], script: str) -> str:
    """How a deterministic benchmark's report opens: when and on what commit `script` measured, and that
    the machine named does not change its figures."""
    return (
        f"Computed {data['date']} on {data['code']} with `{script}` (deterministic: the machine, "
        f"{data['machine']['cpu']}, does not change the figures)"
    )
