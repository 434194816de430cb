"""What this machine carries, measured before the load, and the load sized from it.

The demo must scale because of its load, not because of the machine: a fixed rate that needs three
instances on a busy machine needs one on a quiet one. So before the load the demo sweeps the arrival
rate on one instance, then on two instances loaded together (they share the machine's cores, so two
carry less than twice one), and finds each one's capacity: the rate at which the policy's per-token
statistic (the mean for ``pertoken``, the p99 for ``planner``) crosses the target
(:func:`capacity_of`). The load then has a peak that one instance cannot carry and two can, as far
as the machine allows, after a base that one instance carries (:func:`plan_load`); then the load stops.
(A low phase after the peak would not bring the per-token policy back to one instance: HPA's rule
scales in only where the signal falls below ``target x (n - 1) / n``, and the tiny model's per-token
latency hardly falls below its idle value, which is half the target.)

:func:`capacity_of`, :func:`statistic_of` and :func:`plan_load` are pure; :func:`sweep` and
:func:`measure` drive a live server through the loads and the instance count they are given.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from autoscaler.aggregate import nearest_rank
from nlg_demo.load import LoadRecord, PoissonLoad, mix_of
from nlgsim.workload import COMPLEX, SIMPLE

#: Seconds of arrivals at each rate of a sweep; the requests started then are waited for. Only those
#: started in its second half count: by then a rate over capacity has built a queue.
STEP_S: Final = 10.0
#: Each rate of a sweep is this many times the one before.
STEP_FACTOR: Final = 1.35
#: Rates a sweep tries before it gives up finding the crossing.
MAX_STEPS: Final = 8
#: The peak is at least this many times what one instance carries (the load must need two) ...
PEAK_OVER_ONE: Final = 1.3
#: ... and, where two carry more than that, this share of what two carry (so that two serve it).
PEAK_OF_TWO: Final = 0.8
#: The base before the peak: this share of what one instance carries.
BASE_OF_ONE: Final = 0.5


@dataclass(frozen=True)
class Step:
    """One rate of a sweep: requests per second, the statistic of their per-token latency (ms) and
    how many requests finished."""

    rate: float
    value: float
    count: int


@dataclass(frozen=True)
class LoadPlan:
    """The load's phases, requests per second, and the capacities they were sized from."""

    base: float
    peak: float
    one: float
    two: float


def statistic_of(records: Sequence[LoadRecord], statistic: str) -> float | None:
    """The ``mean`` or ``p99`` (nearest rank) of the complete requests' per-token latency, ms; None
    without one."""
    values = sorted(r.per_token_ms for r in records if r.per_token_ms is not None)
    if not values:
        return None
    if statistic == "mean":
        return statistics.fmean(values)
    if statistic == "p99":
        return nearest_rank(0.99, values)
    raise ValueError(f"statistic: {statistic!r} is not mean or p99")


def capacity_of(steps: Sequence[Step], target_ms: float) -> float:
    """The rate at which the statistic crosses ``target_ms``, from steps in any order: interpolated
    between the highest rate under it and the next rate, over it. Under it at every rate: the highest
    rate tried (a lower bound). Over it at every rate: the lowest scaled down by how far over it is."""
    if not steps:
        raise ValueError("a sweep without a step has no capacity")
    ordered = sorted(steps, key=lambda s: s.rate)
    for before, after in zip((None, *ordered), ordered, strict=False):
        if after.value <= target_ms:
            continue
        if before is None:
            return after.rate * target_ms / after.value
        share = (target_ms - before.value) / (after.value - before.value)
        return before.rate + share * (after.rate - before.rate)
    return ordered[-1].rate


def plan_load(one: float, two: float) -> LoadPlan:
    """The base and the peak from what one instance and two together carry (requests per second).

    The base is well within one instance. The peak is over one instance's capacity, so that the policy
    needs a second one, and where the machine lets two carry more, within what they carry.
    """
    if not (one > 0 and two > 0):
        raise ValueError(f"capacities must be positive, got one={one}, two={two}")
    return LoadPlan(base=BASE_OF_ONE * one, peak=max(PEAK_OVER_ONE * one, PEAK_OF_TWO * two), one=one, two=two)


def first_rate(lone: Sequence[LoadRecord], max_num_seqs: int, complex_fraction: float) -> float:
    """Where a sweep starts: half of what an instance would finish if its ``max_num_seqs`` running
    choices each took as long as they did alone, in requests per second of the load's mix."""
    seconds: dict[str, float] = {}
    for kind in (SIMPLE, COMPLEX):
        took = [r.end - r.start for r in lone if r.kind == kind.name and r.complete and r.end is not None]
        if not took:
            raise ValueError(f"no complete lone {kind.name} request to start a sweep from")
        seconds[kind.name] = statistics.median(took)
    per_request = (1 - complex_fraction) * seconds[SIMPLE.name] + complex_fraction * seconds[COMPLEX.name]
    at_once = max_num_seqs / mix_of(complex_fraction).choices
    return 0.5 * at_once / per_request


def sweep(
    make_load: Callable[[float], PoissonLoad],
    start: float,
    target_ms: float,
    statistic: str,
    say: Callable[[str], None],
    step_s: float = STEP_S,
) -> list[Step]:
    """Poisson arrivals from ``start``, rising until the statistic (of the requests started in each
    step's second half) crosses ``target_ms``, or falling until it is under it where ``start`` was
    already over; each rate's requests are waited for before the next. ``make_load(rate)`` makes a
    load."""
    steps: list[Step] = []
    rate = start
    for _ in range(MAX_STEPS):
        load = make_load(rate)
        started = time.monotonic()
        load.start()
        time.sleep(step_s)
        load.join()
        counted = [r for r in load.records if r.start >= started + step_s / 2]
        value = statistic_of(counted, statistic)
        if value is None:
            raise SystemExit(f"nlg-demo: no request finished at {rate:.2f}/s while measuring capacity")
        steps.append(Step(rate, value, sum(1 for r in counted if r.complete)))
        say(f"    {rate:5.2f}/s: per-token {statistic} {value:6.1f} ms over {steps[-1].count} requests")
        rising = steps[0].value <= target_ms
        if (value > target_ms) == rising:  # crossed, one way or the other
            break
        rate = rate * STEP_FACTOR if rising else rate / STEP_FACTOR
    return steps


def measure(
    make_load: Callable[[float], PoissonLoad],
    set_instances: Callable[[int], None],
    start: float,
    target_ms: float,
    statistic: str,
    say: Callable[[str], None],
    step_s: float = STEP_S,
) -> LoadPlan:
    """The capacity of one instance (a sweep from ``start``), then of two loaded together (a sweep from
    a step under one's), back to one instance, and the load sized from them. ``set_instances(n)``
    returns once ``n`` instances serve."""
    say(f"  capacity: the rate at which the per-token {statistic} crosses {target_ms:g} ms; one instance:")
    one = capacity_of(sweep(make_load, start, target_ms, statistic, say, step_s), target_ms)
    set_instances(2)
    say("  two instances together:")
    two = capacity_of(sweep(make_load, one / STEP_FACTOR, target_ms, statistic, say, step_s), target_ms)
    set_instances(1)
    plan = plan_load(one, two)
    say(f"  one instance carries {one:.2f}/s, two together {two:.2f}/s: a base of {plan.base:.2f}/s, "
        f"a peak of {plan.peak:.2f}/s")  # fmt: skip
    if plan.peak > two:
        say("  (two instances measured together carried less than the peak: they share this machine's "
            "cores, so the latency may stay over the target through the peak, whatever the instances)")  # fmt: skip
    return plan
