"""The oracle: a lower bound on GPU-seconds for a trace, with perfect knowledge and instant pods.

The SLO (:class:`nlgsim.slo.SLO`) says what to meet: ``target`` of the feasible requests within its
limits, in every ``interval_s``. Requests that miss it even alone on an idle replica
(:mod:`nlgsim.feasibility`) are left out of every interval's score: no replica count serves them,
and charging an interval for them would make the bound depend on how many happen to fall in it.
They stay in the simulated load, which they do slow down.

For each interval the oracle finds the fewest replicas n, within the policies' ``min_replicas`` and
``max_replicas``, such that with n ready replicas throughout, the interval's feasible requests meet
the target. Each candidate n is checked by simulating, on n fixed replicas, the requests arriving
from ``warmup`` seconds before the interval to its end (the warm-up fills the engines with the load
in flight, as it would be) and scoring only the interval's own. The bound is the sum of n x interval
length (the last interval up to the last arrival): replicas appear and vanish at interval edges at no
cost (zero start-up delay, no draining), and each interval is given exactly what it needs. The search
tries n = min, min + 1, ... and takes the first that meets the target, not the first found walking
from the previous interval's answer: attainment is not quite monotone in n (round-robin puts requests
on other replicas at each count), and a walk would make an interval's answer depend on its
neighbours, so that adding load could lower it. A candidate's run stops as soon as more scored
requests have missed than the target allows (the answer is then known: too few), a request counted
as missed once a limit it must meet has passed with it unserved, so the counts below the answer cost
little however long their queues would grow. With round-robin routing each of the n replicas is
simulated alone (nothing passes between fixed replicas), so a count that falls short is mostly given
up on within its first replica's run. A count far too few is given up on before any run: a lower bound
on each request's first token on one replica (:mod:`nlgsim.overload`) makes more misses certain than
the target allows.

With every feasible request alone on a replica each meets the SLO, so an interval can fall short
only when ``max_replicas`` is too few for its load. Such an interval is **unattainable** within the
bounds: no policy meets the target there, so there is no "least that meets it" to charge. Charging the
cap is not a lower bound (a policy may use fewer replicas and miss by as much); it is charged
``min_replicas``, the least any policy could use, and listed in ``unattainable``. The bound is a lower
bound on GPU-seconds for any policy within the bounds that meets the target in every attainable
interval.

A policy pays for a pod from its creation, ``startup_s`` before it is ready; the oracle does not.
:meth:`OracleResult.gpu_seconds_with_startup` is the same schedule for a clairvoyant scaler that
does pay it: every replica above the floor is created one start-up ahead of the first interval
that needs it, and kept through a gap when the gap is shorter than a new start-up would cost. Pods
are interchangeable, so the cost splits into levels (the k-th replica is needed wherever the
oracle's count is at least k), and within a level that rule is the cheapest cover. On a bursty
trace this is the bound a real scaler can approach; the zero start-up one it cannot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from nlgsim.feasibility import infeasible
from nlgsim.overload import FirstTokenBound
from nlgsim.profile import EngineProfile
from nlgsim.replica import RequestState
from nlgsim.results import request_table, violations
from nlgsim.simulator import Scenario, Simulation
from nlgsim.slo import SLO
from nlgsim.workload import Request

#: Seconds of traffic simulated before each interval, so its engines start as loaded as they would be.
ORACLE_WARMUP_S = 60.0


def _attainment(
    profile: EngineProfile,
    requests: list[Request],
    scored: npt.NDArray[np.bool_],
    replicas: int,
    *,
    slo: SLO,
    routing: str,
    give_up: bool = True,
) -> float:
    """Attainment of the requests ``scored`` marks when all of ``requests`` run on ``replicas`` fixed
    replicas; with ``give_up``, NaN as soon as it is known to fall short of the target."""
    return _Candidates(profile, requests, scored, slo, routing).attainment(replicas, give_up)


class _Candidates:
    """One interval's requests, to be scored on one count of fixed replicas after another: what every
    count shares (the arrival order, each scored request's limits) is worked out once.

    Round-robin over fixed replicas sends the k-th request (in arrival order) to replica k mod n, and
    nothing else passes between them: each replica's run is its own, and is simulated alone, one after
    another, the misses added up. A count that falls short is then mostly given up on within its first
    replica's run, not after all n have run side by side; the attainment of one that meets the target is
    the same number (a sum of whole misses)."""

    def __init__(
        self, profile: EngineProfile, requests: list[Request], scored: npt.NDArray[np.bool_], slo: SLO, routing: str
    ) -> None:
        self.profile, self.slo, self.routing = profile, slo, routing
        self.total = max(int(scored.sum()), 1)
        keys = [(r.arrival, r.id) for r in requests]
        order = sorted(range(len(requests)), key=keys.__getitem__)
        self.ranked = [requests[i] for i in order]  # in arrival order: a request's rank is its place here
        self.scored = scored[order]
        # Each time after which a scored request misses unless served (`_limits`), with whether it is
        # its TTFT limit and its rank.
        limits = [(t, first_token, k) for k in np.flatnonzero(self.scored).tolist() for t, first_token in
                  _limits(self.ranked[k], slo)]  # fmt: skip
        self._limit_t = np.array([t for t, _, _ in limits], dtype=np.float64)
        self._limit_ttft = np.array([f for _, f, _ in limits], dtype=bool)
        self._limit_rank = np.array([k for _, _, k in limits], dtype=np.int64)
        self._bound = FirstTokenBound(profile, self.ranked, self.scored, slo)

    def attainment(self, replicas: int, give_up: bool = True) -> float:
        """Attainment on ``replicas`` fixed replicas; with ``give_up``, NaN as soon as it is known to fall
        short of the target."""
        if self.routing == "round-robin" and replicas > 1:
            parts = [(r, replicas, 1) for r in range(replicas)]  # ranks r, r + n, ... on one replica
        else:
            parts = [(0, 1, replicas)]
        if give_up:
            # Misses certain before any run (nlgsim.overload): a count far too few is known at once.
            certain = sum(int(self._bound.misses(first, step).sum()) for first, step, n in parts if n == 1)
            if 1.0 - certain / self.total < self.slo.target:
                return math.nan
        missed = 0
        for first, step, n in parts:
            if first >= len(self.ranked):
                continue  # fewer requests than replicas
            bad = self._missed(first, step, n, missed, give_up)
            if bad is None:
                return math.nan
            missed += bad
        return 1.0 - missed / self.total

    def _missed(self, first: int, step: int, replicas: int, before: int, give_up: bool) -> int | None:
        """The scored requests that miss the SLO when the ranks ``first``, ``first + step``, ... run on
        ``replicas`` fixed replicas; with ``give_up``, None as soon as these and the ``before`` missed
        elsewhere are more than the target allows."""
        slo, total = self.slo, self.total
        if give_up and 1.0 - before / total < slo.target:
            return None
        missed = before
        passed = 0  # of the limits, those passed so far

        def hopeless(state: RequestState) -> bool:
            nonlocal missed, passed
            now = state.finish
            while passed < len(limit_t) and limit_t[passed] < now:
                j = limit_at[passed]
                late = states[j]
                if not counted[j] and (late.first_token < 0 if limit_ttft[passed] else late.finish < 0):
                    counted[j] = 1
                    missed += 1
                passed += 1
            j = index.get(id(state.request), -1)
            if j >= 0 and not counted[j]:
                counted[j] = 1
                arrival = state.request.arrival
                missed += slo.missed_one(state.finish - arrival, state.first_token - arrival, state.per_token)
            return give_up and 1.0 - missed / total < slo.target

        requests = self.ranked[first::step]
        scored = self.scored[first::step]
        scenario = Scenario(self.profile, requests, None, initial_replicas=replicas, routing=self.routing)
        sim = Simulation(scenario, hopeless)
        # In arrival order, as `requests` (the j-th is rank first + j * step): a request's state is there
        # once it arrived, before any limit of its own can pass.
        states = sim.states
        index = {id(requests[j]): j for j in np.flatnonzero(scored).tolist()}
        # A scored request is known to miss once a limit it must meet has passed with it unfinished (or,
        # for TTFT, without its first token): counted then, not when it finishes, so a count of replicas
        # that falls short is given up on while its queue is still short. The answer is the same: a
        # request counted early misses when it finishes, and the count only grows.
        mine = self._limit_rank % step == first if step > 1 else slice(None)
        at, ttft, when = (self._limit_rank[mine] - first) // step, self._limit_ttft[mine], self._limit_t[mine]
        by_time = np.lexsort((at, ttft, when))  # as the tuples (time, is TTFT, place) sort
        limit_t, limit_ttft, limit_at = when[by_time].tolist(), ttft[by_time].tolist(), at[by_time].tolist()
        counted = bytearray(len(requests))  # 1: its miss, or its meeting the SLO, is counted
        log = sim.run()
        if log.stopped:
            return None
        return int((slo.missed(violations(request_table(log), slo)) & scored).sum())


def _limits(request: Request, slo: SLO) -> list[tuple[float, bool]]:
    """Each time after which ``request`` misses ``slo`` if it has not finished by then (or, where the
    flag is set, has not had its first token: its TTFT limit). Per-token latency is the worst choice's
    latency over its tokens, so a request unfinished once its longest choice's limit has passed has
    some choice past its own."""
    limits = []
    if "request" in slo.attain:
        limits.append((request.arrival + slo.request_s, False))
    if "pertoken" in slo.attain:
        limits.append((request.arrival + slo.per_token_s * max(request.output_tokens), False))
    if "ttft" in slo.attain:
        limits.append((request.arrival + slo.ttft_s, True))
    return limits


@dataclass(frozen=True)
class OracleResult:
    interval: float
    replicas: tuple[int, ...]
    """Replicas in each interval, from time 0."""
    gpu_seconds: float
    gpu_seconds_end: float = 0.0
    """The last arrival: where the bound stops counting."""
    unattainable: tuple[int, ...] = ()
    """Intervals where ``max_replicas`` replicas miss the target (charged ``min_replicas``)."""
    attainment: tuple[float, ...] = ()
    """Each interval's attainment over its feasible requests with its replicas; NaN without any."""
    infeasible: int = 0
    """Requests that miss the SLO even alone on an idle replica, left out of every score."""

    def gpu_seconds_since(self, since: float, until: float | None = None) -> float:
        """The bound over ``[since, until]`` (default the last arrival), intervals cut at both ends."""
        end = self.gpu_seconds_end if until is None else min(until, self.gpu_seconds_end)
        total = 0.0
        for i, n in enumerate(self.replicas):
            lo, hi = max(i * self.interval, since), min((i + 1) * self.interval, end)
            if hi > lo:
                total += n * (hi - lo)
        return total

    def gpu_seconds_with_startup(self, startup_s: float, since: float = 0.0, until: float | None = None) -> float:
        """The oracle's replicas, each above the floor paid from ``startup_s`` before it is needed.

        Counted over ``[since, until]`` like :meth:`gpu_seconds_since`.
        """
        if startup_s < 0:
            raise ValueError(f"startup_s = {startup_s} must be >= 0")
        end = self.gpu_seconds_end if until is None else min(until, self.gpu_seconds_end)
        floor = min(self.replicas, default=0)
        total = floor * max(end - since, 0.0)
        for level in range(floor + 1, max(self.replicas, default=0) + 1):
            for lo, hi in _cover(self.replicas, level, self.interval, startup_s):
                lo, hi = max(lo - startup_s, since), min(hi, end)
                total += max(hi - lo, 0.0)
        return total


def _cover(replicas: Sequence[int], level: int, interval: float, startup_s: float) -> list[tuple[float, float]]:
    """When the ``level``-th replica is ready: the intervals needing it, gaps under a start-up bridged."""
    spans: list[tuple[float, float]] = []
    for i, n in enumerate(replicas):
        if n < level:
            continue
        lo, hi = i * interval, (i + 1) * interval
        if spans and lo - spans[-1][1] < startup_s + 1e-9:
            spans[-1] = (spans[-1][0], hi)
        else:
            spans.append((lo, hi))
    return spans


_Found = tuple[int, float, bool]
#: ``map``, or a process pool's: how independent tasks are run.
Mapper = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]


@dataclass(frozen=True)
class _Interval:
    """One interval's search, as a task a worker process can take: its requests from the warm-up on,
    shifted to start at 0, and which of them it scores."""

    profile: EngineProfile
    requests: list[Request]
    scored: npt.NDArray[np.bool_]
    slo: SLO
    routing: str
    floor: int
    cap: int


def _search(task: _Interval) -> _Found:
    """The interval's replicas and attainment, and whether the target was reached within the cap (if
    not: the floor, and the cap's attainment, as the module's docstring says)."""
    candidates = _Candidates(task.profile, task.requests, task.scored, task.slo, task.routing)
    found = _fewest(candidates.attainment, task.floor, task.cap, task.slo.target)
    if found is None:
        return task.floor, candidates.attainment(task.cap, give_up=False), False
    return found[0], found[1], True


def _fewest(score: Callable[[int], float], floor: int, cap: int, target: float) -> tuple[int, float] | None:
    """The fewest replicas in ``[floor, cap]`` whose ``score`` meets ``target`` (NaN: falls short), with
    that score; None if none does."""
    for n in range(floor, cap + 1):
        got = score(n)
        if got >= target:
            return n, got
    return None


def _intervals(
    profile: EngineProfile,
    requests: Sequence[Request],
    slo: SLO,
    warmup: float,
    routing: str,
    floor: int,
    cap: int,
) -> tuple[float, npt.NDArray[np.bool_], list[_Interval | None]]:
    """The last arrival, which requests are feasible (in arrival order), and each interval's task (None
    where it scores no request)."""
    interval = slo.interval_s
    reqs = sorted(requests, key=lambda r: (r.arrival, r.id))
    feasible = ~infeasible(profile, reqs, slo)
    arrivals = np.array([r.arrival for r in reqs])
    horizon = float(arrivals[-1]) if len(reqs) else 0.0
    tasks: list[_Interval | None] = []
    for i in range(int(horizon // interval) + 1):
        lo, first, hi = (
            int(x) for x in np.searchsorted(arrivals, [i * interval - warmup, i * interval, (i + 1) * interval])
        )
        scored = np.zeros(hi - lo, dtype=bool)
        scored[first - lo :] = feasible[first:hi]
        if not scored.any():
            tasks.append(None)
            continue
        base = reqs[lo].arrival
        shifted = [replace(r, arrival=r.arrival - base) for r in reqs[lo:hi]]
        tasks.append(_Interval(profile, shifted, scored, slo, routing, floor, cap))
    return horizon, feasible, tasks


def oracle(
    profile: EngineProfile,
    requests: Sequence[Request],
    slo: SLO,
    *,
    warmup: float = ORACLE_WARMUP_S,
    min_replicas: int = 1,
    max_replicas: int = 256,
    routing: str = "round-robin",
    progress: Callable[[float], None] | None = None,
    map_: Mapper = map,
) -> OracleResult:
    """The fewest replicas per ``slo.interval_s`` that meet ``slo.target`` over the feasible requests.

    The intervals are searched independently, through ``map_`` (a process pool's ``map`` spreads them
    over its workers; the answer is the same)."""
    floor = max(min_replicas, 1)
    if floor > max_replicas:
        raise ValueError(f"min_replicas = {min_replicas} is above max_replicas = {max_replicas}")
    interval = slo.interval_s
    horizon, feasible, tasks = _intervals(profile, requests, slo, warmup, routing, floor, max_replicas)
    count = len(tasks)
    searched = iter(map_(_search, [task for task in tasks if task is not None]))
    answer: list[int] = []
    attained: list[float] = []
    unattainable: list[int] = []
    for i, task in enumerate(tasks):
        if task is None:
            answer.append(floor)
            attained.append(float("nan"))
        else:
            n, got, reached = next(searched)
            if not reached:
                unattainable.append(i)
            answer.append(n)
            attained.append(got)
        if progress is not None:
            progress((i + 1) / count)
    # The last interval is charged only up to the last arrival.
    gpu = sum(answer[:-1]) * interval + answer[-1] * (horizon - (count - 1) * interval)
    return OracleResult(
        interval,
        tuple(answer),
        float(gpu),
        horizon,
        tuple(unattainable),
        tuple(attained),
        int((~feasible).sum()),
    )
