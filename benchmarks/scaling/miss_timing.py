"""When the planner loses requests on the rows not met, against the pods it had asked for in time.

A pod asked for at ``t`` serves from ``t`` plus a start-up at the earliest, so the pods that can serve an
interval are at most those billed one start-up before it began. Where the oracle needs more replicas than
that, no decision made once the interval's load showed could have served it: the start-up, not the
count the scaler chose then, decides those requests. The share of the planner's misses that fall in such
intervals says how much of a row's shortfall is the start-up against the bursts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nlgsim.protocol_result import ProtocolResult
from nlgsim.protocol_tables import figure_window

#: The policy whose misses are placed: the project's planner at its defaults, as the goal is judged.
POLICY = "planner"


@dataclass(frozen=True)
class WindowMisses:
    label: str
    attainment: float
    """The planner's attainment of feasible requests in the window."""
    missed: int
    late: int
    """Of ``missed``, those in intervals whose oracle count is above the pods billed a start-up before."""

    @property
    def late_share(self) -> float:
        return self.late / self.missed if self.missed else 0.0


def billed_at(timeline: Sequence[tuple[float, int]], t: float) -> int:
    """Pods billed at ``t`` (seconds from the window's start) from the change points of a run's timeline;
    before the window, the pods it opened on."""
    pods = timeline[0][1] if timeline else 0
    for at, n in timeline:
        if at > t:
            break
        pods = n
    return pods


def window_misses(result: ProtocolResult) -> WindowMisses | None:
    """The planner's misses in the window the replica figure draws (its worst), placed against its pods."""
    orc = result.oracle
    if orc is None:
        return None
    rep = figure_window(result)
    run = next((r for r in result.runs if r.key.policy == POLICY and r.key.replicate == rep.index), None)
    if run is None or not run.missed:
        return None
    need = result.oracle_in(rep)
    late = sum(
        lost
        for k, (lost, n) in enumerate(zip(run.missed, need, strict=False))
        if n > billed_at(run.timeline, k * orc.interval_s - orc.startup_s)
    )
    return WindowMisses(rep.label, run.summary.attainment_feasible, sum(run.missed), late)


def lines(results: Mapping[str, ProtocolResult], rows: Sequence[tuple[str, int, str]]) -> str:
    """A line per row: where in its worst window the planner's misses fall."""
    out = []
    for trace, scale, key in rows:
        found = window_misses(results[key]) if key in results else None
        if found is None:
            continue
        out.append(
            f"- `{trace}` x{scale} ({found.label}): the planner meets {found.attainment * 100:.2f}% of its feasible "
            f"requests; {found.late} of the {found.missed} it misses ({found.late_share * 100:.0f}%) arrive in "
            "intervals whose oracle count is above the pods it had billed a start-up before"
        )
    return "\n".join(out)


def mostly_late(results: Mapping[str, ProtocolResult], rows: Sequence[tuple[str, int, str]]) -> bool:
    """Whether, on every row given that has results, most of the planner's misses in its worst window
    are in intervals the pods asked for a start-up before could not carry."""
    found = [window_misses(results[key]) for _, _, key in rows if key in results]
    return bool(found) and all(f is not None and f.late_share > 0.5 for f in found)
