"""The oracle: a lower bound on GPU-seconds for a trace, with perfect knowledge and instant pods.

Time is cut into intervals of ``interval`` seconds. For each interval the oracle finds the fewest
replicas n (at least ``min_replicas``) such that, with n ready replicas throughout, the requests that
arrive in the interval meet the SLO at the ``target`` attainment. Each candidate n is checked by
simulating, on n fixed replicas, the requests arriving from ``warmup`` seconds before the interval to
its end (the warm-up fills the engines with the load in flight, as it would be) and scoring only the
interval's own requests. The bound is the sum of n x interval length (the last interval up to
the last arrival): replicas appear and vanish
at interval edges at no cost (zero start-up delay, no draining), and each interval is given exactly
what it needs. Attainment falls as n falls, so the search walks down (or up) from the previous
interval's answer.

An interval where even ``max_replicas`` miss the target is **unattainable**: no policy within the
bounds meets the SLO there, so there is no "least that meets it" to charge. Charging the cap (as the
search would by running into it) is not a lower bound: a policy may use fewer replicas there and
miss by the same or a little more, and then come out below the "bound". Such an interval is charged
``min_replicas``, the least any policy could use in it, and listed in ``unattainable`` so a report
can say how much of the trace no policy can serve at the target. The bound stays a lower bound on
GPU-seconds for any policy that meets the target in every attainable interval.

A policy pays for a pod from its creation, ``startup_s`` before it is ready; the oracle does not.
:meth:`OracleResult.gpu_seconds_with_startup` is the same schedule for a clairvoyant scaler that
does pay it: every replica above the floor is created one start-up ahead of the first interval
that needs it, and kept through a gap when the gap is shorter than a new start-up would cost. Pods
are interchangeable, so the cost splits into levels (the k-th replica is needed wherever the
oracle's count is at least k), and within a level that rule is the cheapest cover. On a bursty
trace this is the bound a real scaler can approach; the zero start-up one it cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from nlgsim.profile import EngineProfile
from nlgsim.results import SLO, request_table, violations
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import Request


def _attainment(
    profile: EngineProfile, requests: list[Request], first: int, replicas: int, slo: SLO, routing: str
) -> float:
    """Attainment of ``requests[first:]`` when all of ``requests`` run on ``replicas`` fixed replicas."""
    log = simulate(Scenario(profile, requests, policy=None, initial_replicas=replicas, routing=routing))
    missed = violations(request_table(log), slo)
    bad = np.zeros(len(requests), dtype=bool)
    for a in slo.attain:
        bad |= missed[a]
    return 1.0 - float(bad[first:].sum()) / (len(requests) - first)


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

    def gpu_seconds_since(self, since: float) -> float:
        """The bound over ``[since, last arrival]``, intervals cut at ``since``."""
        end = self.gpu_seconds_end
        total = 0.0
        for i, n in enumerate(self.replicas):
            lo, hi = max(i * self.interval, since), min((i + 1) * self.interval, end)
            if hi > lo:
                total += n * (hi - lo)
        return total

    def gpu_seconds_with_startup(self, startup_s: float, since: float = 0.0) -> float:
        """The oracle's replicas, each above the floor paid from ``startup_s`` before it is needed.

        Counted over ``[since, last arrival]`` like :meth:`gpu_seconds_since`.
        """
        if startup_s < 0:
            raise ValueError(f"startup_s = {startup_s} must be >= 0")
        end = self.gpu_seconds_end
        floor = min(self.replicas, default=0)
        total = floor * max(end - since, 0.0)
        for level in range(floor + 1, max(self.replicas, default=0) + 1):
            for lo, hi in _cover(self.replicas, level, self.interval, startup_s):
                lo, hi = max(lo - startup_s, since), min(hi, end)
                total += max(hi - lo, 0.0)
        return total

    def at(self, t: float) -> int:
        i = min(int(t // self.interval), len(self.replicas) - 1)
        return self.replicas[max(i, 0)]


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


def oracle(
    profile: EngineProfile,
    requests: Sequence[Request],
    slo: SLO,
    *,
    target: float = 0.99,
    interval: float = 30.0,
    warmup: float = 60.0,
    min_replicas: int = 1,
    max_replicas: int = 256,
    routing: str = "round-robin",
    progress: Callable[[float], None] | None = None,
) -> OracleResult:
    reqs = sorted(requests, key=lambda r: r.arrival)
    arrivals = np.array([r.arrival for r in reqs])
    horizon = float(arrivals[-1]) if len(reqs) else 0.0
    count = int(horizon // interval) + 1
    answer: list[int] = []
    unattainable: list[int] = []
    n = max(min_replicas, 1)
    for i in range(count):
        t0, t1 = i * interval, (i + 1) * interval
        lo, hi = np.searchsorted(arrivals, [t0 - warmup, t0]), np.searchsorted(arrivals, t1)
        window = reqs[int(lo[0]) : int(hi)]
        scored = int(hi) - int(lo[1])
        if scored == 0:
            answer.append(min_replicas)
            continue
        base = window[0].arrival
        shifted = [replace(r, arrival=r.arrival - base) for r in window]
        first_scored = len(window) - scored

        def meets(k: int, shifted: list[Request] = shifted, first: int = first_scored) -> bool:
            return _attainment(profile, shifted, first, k, slo, routing) >= target

        floor = max(min_replicas, 1)
        n = max(n, floor)
        if meets(n):
            while n > floor and meets(n - 1):
                n -= 1
            answer.append(n)
        elif meets(max_replicas):
            n += 1
            while not meets(n):
                n += 1
            answer.append(n)
        else:
            # Nothing within the bounds meets the target here: charge what the cheapest policy could
            # use (see the module's docstring); the next interval's search starts where this one did.
            unattainable.append(i)
            answer.append(floor)
        if progress is not None:
            progress((i + 1) / count)
    # The last interval is charged only up to the last arrival.
    gpu = sum(answer[:-1]) * interval + answer[-1] * (horizon - (count - 1) * interval)
    return OracleResult(interval, tuple(answer), float(gpu), horizon, tuple(unattainable))
