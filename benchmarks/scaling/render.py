"""Fill ``report_template.md`` from the runner's numbers: benchmarks/scaling_policies.md and its figures.

    python -m benchmarks.scaling.render [--no-figures]   # the report, from the committed results
    python -m benchmarks.scaling.render --profiles       # the profile table, computed afresh

Every number of the report is a ``{{name}}`` placeholder in the template; :func:`fill` refuses a
template that names a value the results do not give, listing all of them. Figures are drawn by
:mod:`nlgsim.plots` from the same results.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.scaling.analysis import profile_table, values
from benchmarks.scaling.experiments import EXPERIMENTS, PROFILES
from benchmarks.scaling.runner import RESULTS, ROOT, profile_numbers
from nlgsim import plots
from nlgsim.protocol_result import ProtocolResult

TEMPLATE = Path(__file__).with_name("report_template.md")
REPORT = ROOT / "benchmarks" / "scaling_policies.md"
FIGURES = ROOT / "benchmarks" / "figures"
SIM_TO_REAL = ROOT / "benchmarks" / "results" / "sim_to_real.json"
# The same check on the GPU the trace tables model, one per trace (the GPU machine serves, this renders).
SIM_TO_REAL_H100 = {t: ROOT / "benchmarks" / "results" / f"sim_to_real_h100_{t}.json" for t in ("conv", "code")}
PLACEHOLDER = re.compile(r"\{\{([^{}]+?)\}\}")


class MissingValues(KeyError):
    """The template names values that the results do not give."""


class FailedCheck(ValueError):
    """The prose states something the results no longer show."""


def fill(template: str, given: Mapping[str, str]) -> str:
    """``template`` with every ``{{name}}`` replaced by ``given[name]``; all missing names at once.

    ``{{check:name}}`` stands where the prose relies on a fact: it renders as nothing when
    ``given["check:name"]`` is ``"true"`` and refuses the whole report when it is not.
    """
    names = set(PLACEHOLDER.findall(template))
    missing = sorted(name for name in names if name not in given)
    if missing:
        raise MissingValues(f"{len(missing)} placeholder(s) have no value in the results: {', '.join(missing)}")
    failed = sorted(name for name in names if name.startswith("check:") and given[name] != "true")
    if failed:
        raise FailedCheck(f"the report's text relies on what the results no longer show: {', '.join(failed)}")
    return PLACEHOLDER.sub(lambda m: "" if m.group(1).startswith("check:") else given[m.group(1)], template)


def figure_values(data: Mapping[str, Any], draw: bool, shown: set[str]) -> dict[str, str]:
    """``{key}.figures``: the experiment's figures as Markdown images, drawn into benchmarks/figures for
    the experiments whose figures the template ``shown`` names."""
    out = {}
    for exp in EXPERIMENTS:
        if f"{exp.key}.figures" not in shown:
            continue
        result = ProtocolResult.from_json(data["experiments"][exp.key])
        names = plots.protocol_figures(result, FIGURES, f"scaling_{exp.key}_", exp.title, draw=draw)
        out[f"{exp.key}.figures"] = "\n".join(f"![{exp.title}: {n.rsplit('_', 1)[1][:-4]}](figures/{n})" for n in names)
    return out


def render(
    data: Mapping[str, Any],
    real: Mapping[str, Any] | None,
    draw: bool = False,
    real_h100: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> str:
    """The report; ``real`` and ``real_h100``: the sim-to-real results on the CPU and on the H100, where
    there are."""
    template = TEMPLATE.read_text()
    given = {**values(data, real, real_h100), **figure_values(data, draw, set(PLACEHOLDER.findall(template)))}
    return fill(template, given)


def h100_results() -> dict[str, dict[str, Any] | None]:
    """The H100 sim-to-real results by trace, None where one is missing."""
    return {t: json.loads(p.read_text()) if p.exists() else None for t, p in SIM_TO_REAL_H100.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=REPORT)
    parser.add_argument("--no-figures", action="store_true", help="the Markdown only")
    parser.add_argument("--profiles", action="store_true", help="print the profile table, computed afresh")
    args = parser.parse_args(argv)
    if args.profiles:
        print(profile_table([profile_numbers(p) for p in PROFILES]))
        return 0
    data = json.loads(args.results.read_text())
    real = json.loads(SIM_TO_REAL.read_text()) if SIM_TO_REAL.exists() else None
    args.out.write_text(render(data, real, draw=not args.no_figures, real_h100=h100_results()))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
