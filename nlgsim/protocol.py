"""Named protocols: each table of benchmarks/scaling_policies.md as one command, ``run --protocol``.

A protocol fixes how a workload is replicated, which part of each run is measured, and (unless a flag
overrides them) the SLO, the scaler's bounds and the policies compared:

* ``thesis`` (the thesis's ch. 7): Table 4.2 queries at a Poisson rate, ``count`` requests, one run
  per seed of the arrival process; one replica at the start, 1 to 4 (the thesis's four T4s); SLO
  2,000 ms request latency. The load starts at time 0 on an idle replica: that is the load step, and
  first scale-out is timed from the first request. With ``warmup_s`` the step comes after that many
  seconds of a light load (``warmup_rate``) instead; the autoscaler's rounds start at the step, with
  its metric window already filled by the light load, so first scale-out times the reaction to the
  step and not the first round with data; requests, GPU-seconds and first scale-out count from the step.
* ``trace``: a trace cut into ``windows`` consecutive windows of whole SLO intervals. A window's run
  replays the ``ORACLE_WARMUP_S`` before it on the oracle's replicas for the window's first interval,
  fixed (the state in which the oracle itself judges that interval), then the autoscaler's rounds
  start, its metric window filled by the warm-up's scrapes; requests arriving in the window are scored
  and GPU-seconds billed over it, as are the oracle's and the start-up bound's for the same window.

Either way the pods alive when a measured window opens are the run's initial replicas, chosen by the
protocol, not by a policy: no pod a policy started before the window is billed in it.

Runs are independent and deterministic; ``workers`` processes share them and give the same result.
Each run is keyed by :class:`RunKey` (policy, replicate); the result is plain numbers
(:class:`ProtocolResult`, JSON both ways) and :mod:`nlgsim.protocol_tables` turns it into the tables
that the CLI prints and the report shows.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from autoscaler.config import ScalerSpec, to_dict
from nlgsim.anchors import ANCHORS
from nlgsim.experiment import build_policy, parse_workload, planner_config
from nlgsim.feasibility import feasibility
from nlgsim.lagged import OracleCounts
from nlgsim.oracle import ORACLE_WARMUP_S, Mapper, oracle
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.protocol_result import OracleSummary, ProtocolResult, Replicate, RunKey, RunResult
from nlgsim.results import summarize_with_misses
from nlgsim.simulator import RunLog, Scenario, simulate
from nlgsim.slo import SLO
from nlgsim.trace_rows import TIME_UNITS
from nlgsim.workload import FleetScale, Request


@dataclass(frozen=True)
class Protocol:
    """What a protocol fixes unless a flag says otherwise."""

    name: str
    replicate: str
    """``seed`` (a synthetic workload drawn again) or ``window`` (a trace cut in consecutive windows)."""
    slo: SLO
    scaler: Mapping[str, float]
    """Scaler keys set over the config's (``--set`` sets them over these)."""
    policies: tuple[str, ...]
    count: int = 2000
    replicates: int = 1
    """Seeds or windows."""


PROTOCOLS = {
    "thesis": Protocol(
        "thesis", "seed", SLO(request_s=2.0), {"min_deployment_count": 1, "max_deployment_count": 4},
        ("request:2000", "pertoken:20", "pertoken:25", "pertoken:30", "pertoken:35", "planner", *ANCHORS, "fixed:4"),
        count=3840, replicates=10,
    ),
    "trace": Protocol(
        "trace", "window", SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken")),
        {"min_deployment_count": 1, "max_deployment_count": 64},
        ("planner", "pertoken:10 w30", "pertoken:15 w30", "pertoken:25 w30", "pertoken:10 w60", "pertoken:15 w60",
         "pertoken:25 w60", *ANCHORS),
        replicates=4,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """One protocol's runs, every setting resolved: what ``run --protocol`` executes."""

    protocol: str
    profile: str
    workload: str
    policies: tuple[str, ...]
    slo: SLO
    scaler: ScalerSpec
    replicates: int
    first_seed: int = 0
    """thesis: the seeds are ``first_seed`` .. ``first_seed + replicates - 1``."""
    count: int = 2000
    ramp: float = 0.0
    warmup_s: float = 0.0
    """thesis: seconds of light load before the step (0: the load starts on an idle replica)."""
    warmup_rate: str = "0.25x"
    """thesis: the light load's rate, in the workload's terms (req/s, or ``Fx`` of one replica)."""
    lengths: str = "refuse"
    start: float = 0.0
    duration: float | None = None
    speed: float = 1.0
    time_unit: str = "s"
    """trace: what a numeric timestamp counts (:data:`nlgsim.trace_rows.TIME_UNITS`)."""
    scale: FleetScale = FleetScale()
    """trace: its rate times an integer, or over a day, bursts kept (:class:`nlgsim.workload.FleetScale`)."""
    group_s: float = 0.0
    """trace: arrivals gathered at one instant every this many s (:func:`nlgsim.workload.grouped`)."""
    loop_interval: float = 5.0
    scrape_interval: float = 5.0
    startup_s: float | None = None
    routing: str = "round-robin"

    def __post_init__(self) -> None:
        errors = []
        if self.protocol not in PROTOCOLS:
            errors.append(f"--protocol {self.protocol!r}: use one of {', '.join(PROTOCOLS)}")
        if self.replicates < 1:
            errors.append(f"{self.replicates} seeds or windows: give at least 1")
        if self.warmup_s < 0:
            errors.append(f"--warmup {self.warmup_s}: must be >= 0 seconds")
        if not self.policies:
            errors.append("no --policy to run")
        is_trace = self.workload.startswith("trace:")
        if self.protocol == "trace" and not is_trace:
            errors.append(f"--protocol trace replays a trace: --workload trace:PATH, not {self.workload!r}")
        if self.protocol == "thesis" and is_trace:
            errors.append("--protocol thesis draws Table 4.2 queries: --workload complex:RATE or simple:RATE")
        if self.time_unit not in TIME_UNITS:
            errors.append(f"--time-unit {self.time_unit!r}: use one of {', '.join(TIME_UNITS)}")
        if errors:
            raise ValueError("; ".join(errors))


# -- the workload of each replicate ------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _profile(path: str) -> EngineProfile:
    return load_profile(path)


def trace_requests(plan: Plan) -> list[Request]:
    """The trace protocol's requests, as the plan parses its workload (window by window they are cut
    from these)."""
    return parse_workload(
        plan.workload, _profile(plan.profile), start=plan.start, duration=plan.duration, speed=plan.speed,
        lengths=plan.lengths, scale=plan.scale, time_unit=plan.time_unit, group_s=plan.group_s,
    ).requests  # fmt: skip


@functools.lru_cache(maxsize=4)
def _trace_cached(plan: Plan) -> tuple[Request, ...]:
    return tuple(trace_requests(plan))


def window_length(plan: Plan, horizon: float) -> float:
    """Each window's seconds: the trace after the warm-up split evenly, in whole SLO intervals."""
    interval = plan.slo.interval_s
    length = math.floor((horizon - ORACLE_WARMUP_S) / plan.replicates / interval) * interval
    if length < interval:
        raise ValueError(
            f"{horizon:.0f} s of trace make {plan.replicates} windows shorter than one {interval:g} s interval "
            f"after the {ORACLE_WARMUP_S:g} s warm-up: use fewer --windows"
        )
    return length


def thesis_requests_for(plan: Plan, seed: int) -> list[Request]:
    """The seed's requests: the load from time 0, or after ``warmup_s`` of the light load."""
    return list(_thesis_cached(plan, seed))


@functools.lru_cache(maxsize=64)
def _thesis_cached(plan: Plan, seed: int) -> tuple[Request, ...]:
    profile = _profile(plan.profile)
    main = parse_workload(plan.workload, profile, count=plan.count, seed=seed, ramp=plan.ramp).requests
    if plan.warmup_s <= 0:
        return tuple(main)
    kind = plan.workload.partition(":")[0]
    # The light load is its own Poisson stream (another seed), cut at the step.
    light = parse_workload(
        f"{kind}:{plan.warmup_rate}", profile, duration=plan.warmup_s, seed=seed + 1_000_003
    ).requests
    light = [r for r in light if r.arrival < plan.warmup_s]
    shifted = [replace(r, id=len(light) + r.id, arrival=r.arrival + plan.warmup_s) for r in main]
    return (*light, *shifted)


def _window_requests(plan: Plan, index: int) -> tuple[list[Request], float, float]:
    """The window's requests on the run's clock (its warm-up from 0), and its start and end there."""
    trace = _trace_cached(plan)
    length = window_length(plan, trace[-1].arrival if trace else 0.0)
    start = ORACLE_WARMUP_S + index * length
    lo = start - ORACLE_WARMUP_S
    reqs = [replace(r, arrival=r.arrival - lo) for r in trace if lo <= r.arrival < start + length]
    return reqs, ORACLE_WARMUP_S, ORACLE_WARMUP_S + length


# -- one run -----------------------------------------------------------------------------------------


def _timeline(log: RunLog, since: float, until: float | None) -> tuple[tuple[float, int], ...]:
    end = log.end if until is None else until
    # The pods as the window opens, before a round at its first instant acts; then every change.
    before = [c for c in log.pod_changes if c[0] < since][-1:]
    points = [(0.0, c[3]) for c in before] + [
        (round(c[0] - since, 2), c[3]) for c in log.pod_changes if since <= c[0] <= end
    ]
    return tuple(points)


def run_one(plan: Plan, key: RunKey, initial: int, oracle: OracleCounts | None = None) -> RunResult:
    """One policy on one replicate; ``initial`` replicas while nothing is measured (``fixed:N``: N);
    ``oracle``: the trace's counts on the replicate's clock, which ``lagged:H`` replays."""
    log, since, until = simulate_one(plan, key, initial, oracle)
    summary, missed = summarize_with_misses(log, plan.slo, key.policy, since=since, until=until)
    return RunResult(key, summary, _timeline(log, since, until), missed)


def simulate_one(
    plan: Plan, key: RunKey, initial: int, oracle: OracleCounts | None = None
) -> tuple[RunLog, float, float | None]:
    """:func:`run_one`'s simulation, whole: its log (every round's decision included), and the measured
    window's start and end on the run's clock (no end: the run's)."""
    profile = _profile(plan.profile)
    if plan.protocol == "thesis":
        requests = thesis_requests_for(plan, key.replicate)
        since, until = plan.warmup_s, None
    else:
        requests, since, until = _window_requests(plan, key.replicate)
    cfg = planner_config(profile, requests, plan.slo, plan.loop_interval, plan.startup_s, plan.scaler.planner)
    policy, default_initial = build_policy(key.policy, plan.scaler, cfg, oracle)
    scenario = Scenario(
        profile, requests, policy,
        initial_replicas=default_initial if policy is None else initial,
        loop_interval=plan.loop_interval, scrape_interval=plan.scrape_interval, startup_s=plan.startup_s,
        routing=plan.routing, name=key.policy, control_from=since,
    )  # fmt: skip
    return simulate(scenario), since, until


def _counts(orc: OracleSummary | None, rep: Replicate) -> OracleCounts | None:
    """The oracle's counts on the replicate's clock (its time 0 is the trace's ``rep.offset``)."""
    return None if orc is None else OracleCounts(orc.replicas, orc.interval_s, rep.offset)


def _run_task(task: tuple[Plan, RunKey, int, OracleCounts | None]) -> RunResult:
    return run_one(*task)


# -- the whole protocol ------------------------------------------------------------------------------


def _thesis_replicates(plan: Plan) -> tuple[str, list[Replicate], list[Request]]:
    """The seeds: the workload's line, one replicate each, and every request (for feasibility)."""
    profile = _profile(plan.profile)
    seeds = range(plan.first_seed, plan.first_seed + plan.replicates)
    first = parse_workload(plan.workload, profile, count=plan.count, seed=seeds[0], ramp=plan.ramp)
    workload = first.description + f"; seeds {seeds[0]}-{seeds[-1]}" + (
        f"; after {plan.warmup_s:g} s of {plan.workload.partition(':')[0]} queries at {plan.warmup_rate} "
        "(measured from the step)" if plan.warmup_s > 0 else ""
    )  # fmt: skip
    initial = max(plan.scaler.min_deployment_count, 1)
    reps = []
    for seed in seeds:
        n = sum(1 for r in thesis_requests_for(plan, seed) if r.arrival >= plan.warmup_s)
        reps.append(Replicate(seed, f"seed {seed}", plan.warmup_s, None, initial, n))
    return workload, reps, [r for seed in seeds for r in thesis_requests_for(plan, seed)]


def _trace_replicates(
    plan: Plan, map_: Mapper, say: Callable[[str], None]
) -> tuple[str, list[Replicate], list[Request], OracleSummary, dict[str, int]]:
    """The windows, after the oracle over the whole trace: their bounds and opening replicas."""
    profile = _profile(plan.profile)
    parsed = parse_workload(
        plan.workload, profile, start=plan.start, duration=plan.duration, speed=plan.speed, lengths=plan.lengths,
        scale=plan.scale, time_unit=plan.time_unit, group_s=plan.group_s,
    )  # fmt: skip
    trace = list(_trace_cached(plan))
    horizon = trace[-1].arrival if trace else 0.0
    length = window_length(plan, horizon)
    say(f"oracle over {horizon:.0f} s of {parsed.name}")
    bound = oracle(
        profile, trace, plan.slo, min_replicas=max(plan.scaler.min_deployment_count, 1),
        max_replicas=plan.scaler.max_deployment_count, routing=plan.routing, map_=map_,
    )  # fmt: skip
    startup = profile.startup_s if plan.startup_s is None else plan.startup_s
    summary = OracleSummary(
        plan.slo.interval_s, bound.replicas, bound.gpu_seconds, bound.unattainable, bound.infeasible, startup,
        plan.scaler.max_deployment_count,
    )  # fmt: skip
    reps = []
    for i in range(plan.replicates):
        lo = ORACLE_WARMUP_S + i * length
        hi = lo + length
        n = sum(1 for r in trace if lo <= r.arrival < hi)
        reps.append(Replicate(
            i, f"window {i}: {lo:.0f}-{hi:.0f} s", ORACLE_WARMUP_S, ORACLE_WARMUP_S + length,
            bound.replicas[int(lo // plan.slo.interval_s)], n, lo - ORACLE_WARMUP_S,
            bound.gpu_seconds_since(lo, hi), bound.gpu_seconds_with_startup(startup, lo, hi),
        ))  # fmt: skip
    workload = parsed.description + (
        f"; {plan.replicates} windows of {length:g} s from {ORACLE_WARMUP_S:g} s, each after a "
        f"{ORACLE_WARMUP_S:g} s warm-up"
    )
    return workload, reps, trace, summary, asdict(parsed.changes) if parsed.changes else {}


def run_plan(plan: Plan, workers: int = 1, progress: Callable[[str], None] | None = None) -> ProtocolResult:
    """Every policy on every replicate; the oracle first where the protocol needs it (trace). With
    ``workers`` above 1, the oracle's intervals and then the runs are spread over that many processes."""
    if workers <= 1:
        return _run_plan(plan, 1, map, progress)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return _run_plan(plan, workers, functools.partial(pool.map, chunksize=1), progress)


def _run_plan(plan: Plan, workers: int, map_: Mapper, progress: Callable[[str], None] | None) -> ProtocolResult:
    say = progress or (lambda _: None)
    prepared = prepare(plan, map_, say)
    say(f"{len(prepared.replicates) * len(plan.policies)} runs on {workers} worker(s)")
    return with_runs(prepared, plan, plan.policies, map_)


def prepare(plan: Plan, map_: Mapper = map, say: Callable[[str], None] = lambda _: None) -> ProtocolResult:
    """The protocol's result before any run: its replicates, and the oracle where the protocol needs it;
    :func:`with_runs` adds runs, as many times as wanted, without computing these again."""
    profile = _profile(plan.profile)
    orc: OracleSummary | None = None
    changes: dict[str, int] = {}
    if plan.protocol == "thesis":
        workload, reps, everything = _thesis_replicates(plan)
    else:
        workload, reps, everything, orc, changes = _trace_replicates(plan, map_, say)
    return ProtocolResult(
        protocol=plan.protocol,
        command={**plan_json(plan), "policies": []},
        profile=f"{profile.preset} {profile.dtype} on {profile.hardware} ({profile.source})",
        workload=workload,
        slo=plan.slo.statement(),
        feasibility=feasibility(profile, everything, plan.slo).describe(),
        replicates=tuple(reps),
        runs=(),
        oracle=orc,
        mapping_changes=changes,
    )


def with_runs(result: ProtocolResult, plan: Plan, policies: Sequence[str], map_: Mapper = map) -> ProtocolResult:
    """``result`` (of :func:`prepare`, or of an earlier call) with ``policies`` run on each of its replicates."""
    orc = result.oracle
    tasks = [(plan, RunKey(p, r.index), r.initial, _counts(orc, r)) for r in result.replicates for p in policies]
    command = {**result.command, "policies": [*result.command["policies"], *policies]}
    return replace(result, command=command, runs=(*result.runs, *map_(_run_task, tasks)))


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as JSON reads it back (lists, not tuples), so a result compares equal to its file."""
    data = asdict(plan)
    data["scaler"] = to_dict(plan.scaler)
    if plan.scale.day is None:
        del data["scale"]["day"]  # likewise the plans written before --day
    if plan.scale.factor == 1 and plan.scale.day is None:
        del data["scale"]  # the trace as recorded: the plans written before --scale existed read the same
    if not plan.group_s:
        del data["group_s"]  # likewise the plans written before --group
    if plan.time_unit == "s":
        del data["time_unit"]  # likewise the plans written before --time-unit
    loaded: dict[str, Any] = json.loads(json.dumps(data))
    return loaded
