"""What a protocol's run leaves: plain numbers, keyed by run, that JSON holds both ways.

:class:`ProtocolResult` is what ``python -m nlgsim run --protocol ... --out DIR`` writes as
``protocol.json`` and what benchmarks/results/scaling_policies.json holds per experiment;
:mod:`nlgsim.protocol_tables` and :mod:`nlgsim.plots` read nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from nlgsim.results import Summary


@dataclass(frozen=True)
class RunKey:
    """One run of a protocol: a policy on one replicate (a seed, or a window of the trace)."""

    policy: str
    replicate: int

    def text(self) -> str:
        return f"{self.policy} #{self.replicate}"


@dataclass(frozen=True)
class Replicate:
    """One seed or window: where it is measured, and the bounds for that stretch (trace)."""

    index: int
    """The seed, or the window's number."""
    label: str
    since: float
    """The measured window, on the run's clock."""
    until: float | None
    initial: int
    """Replicas when the measured window opens (policies; ``fixed:N`` has N)."""
    requests: int
    """Requests arriving in the measured window."""
    offset: float = 0.0
    """Where the run's clock starts on the workload's (a trace window: its warm-up's start)."""
    oracle_gpu_s: float | None = None
    startup_bound_gpu_s: float | None = None


@dataclass(frozen=True)
class RunResult:
    key: RunKey
    summary: Summary
    timeline: tuple[tuple[float, int], ...] = ()
    """Pods billed over the measured window: (seconds from its start, pods) at each change."""
    missed: tuple[int, ...] = ()
    """Feasible requests that missed the SLO in each interval of the SLO's ``interval_s``, from the
    measured window's start."""


@dataclass(frozen=True)
class OracleSummary:
    """The oracle over the whole trace (intervals from its start), and what it leaves out."""

    interval_s: float
    replicas: tuple[int, ...]
    gpu_s: float
    unattainable: tuple[int, ...]
    infeasible: int
    startup_s: float
    max_replicas: int


@dataclass(frozen=True)
class ProtocolResult:
    """Numbers only: the plan as run, what the workload was, the bounds and every run's summary."""

    protocol: str
    command: dict[str, Any]
    """The plan's settings (JSON), so a result says how it was made."""
    profile: str
    workload: str
    slo: str
    feasibility: str
    replicates: tuple[Replicate, ...]
    runs: tuple[RunResult, ...]
    oracle: OracleSummary | None = None
    mapping_changes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def oracle_in(self, rep: Replicate) -> tuple[int, ...]:
        """The oracle's replicas over ``rep``'s measured window, an interval each from its start (none
        without an oracle)."""
        orc = self.oracle
        if orc is None:
            return ()
        length = (rep.until or 0.0) - rep.since
        first = int(round((rep.offset + rep.since) / orc.interval_s))
        return orc.replicas[first : first + int(math.ceil(length / orc.interval_s))]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProtocolResult:
        runs = tuple(
            RunResult(
                RunKey(**r["key"]),
                Summary(**r["summary"]),
                tuple((float(t), int(n)) for t, n in r["timeline"]),
                tuple(int(k) for k in r.get("missed", ())),
            )
            for r in data["runs"]
        )
        orc = data.get("oracle")
        return cls(
            protocol=data["protocol"],
            command=dict(data["command"]),
            profile=data["profile"],
            workload=data["workload"],
            slo=data["slo"],
            feasibility=data["feasibility"],
            replicates=tuple(Replicate(**r) for r in data["replicates"]),
            runs=runs,
            oracle=None if orc is None else OracleSummary(**{**orc, "replicas": tuple(orc["replicas"]),
                                                           "unattainable": tuple(orc["unattainable"])}),
            mapping_changes=dict(data.get("mapping_changes") or {}),
        )  # fmt: skip
