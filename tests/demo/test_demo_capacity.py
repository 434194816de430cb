"""The demo sizes its load from the capacity it measures: the crossing of a sweep, the load's phases
from one instance's and two instances' capacities, the whole measured path on a machine whose
instances share its cores, the planner's profile fitted to the measurement."""

from __future__ import annotations

import time

import pytest

from autoscaler.capacity import choices_per_second
from autoscaler.config import PlannerSpec
from autoscaler.decide import proposal
from autoscaler.planner import planner_config
from autoscaler.profile import load_profile
from nlg_demo.capacity import (
    BASE_OF_ONE,
    PEAK_OF_TWO,
    PEAK_OVER_ONE,
    Step,
    capacity_of,
    first_rate,
    measure,
    plan_load,
    statistic_of,
    sweep,
)
from nlg_demo.load import LoadRecord, mix_of
from nlg_demo.served_profile import SHIPPED, Overhead, calibrated, served_profile


def record(per_token_ms: float, kind: str = "simple", tokens: int = 10, choices: int = 1, start=0.0) -> LoadRecord:
    return LoadRecord(kind, start, tokens, choices, end=start + per_token_ms * tokens / 1000, complete=True)


# -- the statistic and the crossing ----------------------------------------------------------------


def test_the_statistics_are_the_mean_and_the_nearest_rank_p99_of_complete_requests():
    records = [record(v) for v in range(1, 101)] + [LoadRecord("simple", 0.0, 10, 1, end=9.0, complete=False)]
    assert statistic_of(records, "mean") == pytest.approx(50.5)
    assert statistic_of(records, "p99") == pytest.approx(99.0)
    assert statistic_of([record(7.0)], "p99") == pytest.approx(7.0)
    assert statistic_of([], "mean") is None
    with pytest.raises(ValueError, match="not mean or p99"):
        statistic_of(records, "p50")


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        ([Step(1.0, 10, 8), Step(2.0, 20, 16), Step(4.0, 40, 32)], 3.0),  # between 2/s (20 ms) and 4/s (40 ms)
        ([Step(1.0, 10, 8), Step(2.0, 30, 16)], 2.0),  # crosses exactly at the second rate
        ([Step(1.0, 10, 8), Step(2.0, 20, 16)], 2.0),  # never over: the highest rate tried
        ([Step(1.0, 60, 8)], 0.5),  # over at every rate: scaled down by how far over
        ([Step(4.0, 40, 32), Step(2.0, 20, 16)], 3.0),  # a sweep that fell to the crossing
    ],
    ids=["interpolated", "at-a-rate", "never-crossed", "always-over", "falling"],
)
def test_capacity_is_where_the_statistic_crosses_the_target(steps, want):
    assert capacity_of(steps, 30.0) == pytest.approx(want)


class RateLoad:
    """A load whose requests' per-token latency is ``ms_per_rate`` x its rate (a fake PoissonLoad)."""

    def __init__(self, rate: float, ms_per_rate: float) -> None:
        self.rate, self.ms_per_rate, self.records = rate, ms_per_rate, []

    def start(self):
        self.records = [record(self.rate * self.ms_per_rate, start=time.monotonic()) for _ in range(5)]
        return self

    def join(self) -> None:
        pass


def test_a_sweep_rises_until_the_crossing_and_stops_there():
    made = []

    def make(rate):
        made.append(rate)
        return RateLoad(rate, ms_per_rate=10.0)

    lines = []
    steps = sweep(make, start=1.0, target_ms=25.0, statistic="mean", say=lines.append, step_s=0.0)
    rates = [1.35**i for i in range(5)]  # 10, 13.5, 18.2, 24.6 ms, then 33.2 ms: over, the last
    assert [s.rate for s in steps] == pytest.approx(rates) and made == pytest.approx(rates)
    assert steps[-2].value <= 25.0 < steps[-1].value
    assert capacity_of(steps, 25.0) == pytest.approx(2.5, rel=1e-6)  # linear: 25 ms at 2.5/s
    assert len(lines) == len(steps) and "per-token mean" in lines[0]


def test_a_sweep_that_starts_over_the_target_falls_until_under_it():
    lines = []
    steps = sweep(lambda rate: RateLoad(rate, ms_per_rate=10.0), start=4.0, target_ms=25.0,
                  statistic="mean", say=lines.append, step_s=0.0)  # fmt: skip
    assert [s.rate for s in steps] == pytest.approx([4.0, 4.0 / 1.35, 4.0 / 1.35**2])  # 40, 29.6, then 21.9 ms
    assert capacity_of(steps, 25.0) == pytest.approx(2.5, rel=1e-6)


def test_the_sweep_starts_at_half_what_the_lone_requests_say_an_instance_finishes():
    lone = [record(10.0, "simple", tokens=30)] * 3 + [record(20.0, "complex", tokens=60, choices=4)] * 3
    # half simple (0.3 s), half complex (1.2 s): 0.75 s a request; 4 sequences hold 4 / 2.5 requests
    assert first_rate(lone, max_num_seqs=4, complex_fraction=0.5) == pytest.approx(0.5 * (4 / 2.5) / 0.75)
    with pytest.raises(ValueError, match="no complete lone complex"):
        first_rate(lone[:3], max_num_seqs=4, complex_fraction=0.5)


# -- the load's phases -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "two"),
    [(3.0, 5.4), (3.0, 3.3), (0.8, 1.5), (12.0, 24.0)],
    ids=["quiet-machine", "busy-machine", "slow-machine", "fast-machine"],
)
def test_the_peak_needs_two_instances_and_the_base_one_on_any_machine(one, two):
    plan = plan_load(one, two)
    assert plan.peak >= PEAK_OVER_ONE * one > one  # one instance cannot carry the peak
    assert plan.base == pytest.approx(BASE_OF_ONE * one) and plan.base < one  # one carries the base
    if PEAK_OVER_ONE * one <= PEAK_OF_TWO * two:  # where two carry more, the peak is within them
        assert plan.peak == pytest.approx(PEAK_OF_TWO * two) and plan.peak < two
    assert (plan.one, plan.two) == (one, two)


def test_a_plan_needs_measured_capacities():
    with pytest.raises(ValueError, match="must be positive"):
        plan_load(0.0, 2.0)


# -- the measured path, on a machine whose instances share its cores -------------------------------


class Machine:
    """A fake server: ``n`` instances together carry ``carries[n]`` requests per second, and a load at
    ``rate`` sees a per-token latency of ``idle / (1 - rate / (2 x carries))`` (a queue that doubles
    the idle latency, the demo's threshold, at what they carry; far over it past twice that)."""

    def __init__(self, carries: dict[int, float], idle_ms: float = 5.0) -> None:
        self.carries, self.idle_ms, self.instances = carries, idle_ms, 1
        self.set_to: list[int] = []

    def per_token_ms(self, rate: float, instances: int) -> float:
        return self.idle_ms / max(1.0 - rate / (2 * self.carries[instances]), 0.01)

    def needed(self, rate: float, target_ms: float) -> int:
        """The fewest instances whose per-token latency at ``rate`` is within ``target_ms``; one more
        than the machine has where none is."""
        within = (n for n in sorted(self.carries) if self.per_token_ms(rate, n) <= target_ms)
        return next(within, max(self.carries) + 1)

    def set_instances(self, count: int) -> None:
        self.instances = count
        self.set_to.append(count)

    def load(self, rate: float) -> RateLoad:
        return RateLoad(rate, self.per_token_ms(rate, self.instances) / rate)


@pytest.mark.parametrize(
    "carries",
    [{1: 3.6, 2: 6.8, 3: 7.0}, {1: 3.3, 2: 3.8, 3: 3.8}, {1: 1.8, 2: 2.7, 3: 2.7}, {1: 12.0, 2: 23.0, 3: 33.0}],
    ids=["quiet-machine", "busy-machine", "slow-machine", "fast-machine"],
)
def test_the_load_sized_from_measured_capacities_needs_two_instances_in_its_peak_and_one_at_its_end(carries):
    machine = Machine(carries)
    target = 2 * machine.idle_ms  # the demo's threshold: twice the idle statistic
    lines = []
    start = 0.4 * carries[1]  # about where first_rate starts: half what the lone requests promise
    plan = measure(machine.load, machine.set_instances, start, target_ms=target, statistic="mean",
                   say=lines.append, step_s=0.0)  # fmt: skip
    assert machine.set_to == [2, 1]  # two instances measured together, then the load starts on one
    assert plan.one == pytest.approx(carries[1], rel=0.1) and plan.two == pytest.approx(carries[2], rel=0.1)
    assert machine.needed(plan.base, target) == 1
    assert machine.needed(plan.peak, target) >= 2
    if carries[2] >= PEAK_OVER_ONE * carries[1] / PEAK_OF_TWO:  # where two carry more, two carry the peak
        assert machine.needed(plan.peak, target) == 2
    # HPA's rule on one instance in the peak asks for another; with the load stopped, the idle window
    # reads 0 (autoscaler.decide.signal_value), which asks for one from any count.
    assert proposal(1, machine.per_token_ms(plan.peak, 1), target, tolerance=0.1) >= 2
    assert proposal(3, 0.0, target, tolerance=0.1) <= 1
    assert any(line.startswith("  one instance carries") for line in lines)
    assert ("carried less than the peak" in lines[-1]) == (plan.peak > plan.two)


# -- the planner's profile -------------------------------------------------------------------------


def planned(profile, spec, mix):
    target = planner_config(spec, profile).per_token_limit_s
    return choices_per_second(profile, target, mix.prompt_tokens, mix.output_tokens, mix.choices)


@pytest.mark.parametrize("measured", [5.0, 2.0, 0.5])
def test_the_planner_counts_one_replica_for_the_capacity_measured(measured):
    mix = mix_of(0.5)
    spec = PlannerSpec(profile="p.json", per_token_slo=30.0)
    served = served_profile(load_profile(SHIPPED), Overhead(0.02, 0.004, 0.001), 10.0, SHIPPED)
    assert planned(served, spec, mix) > measured  # the lone requests promise more
    fitted, extra = calibrated(served, measured, spec, mix)
    assert extra > 0 and fitted.extra["calibrated_step_s"] == pytest.approx(extra, abs=1e-6)
    # The planner counts what was measured; where the count jumps (the batch a step allows is whole), the
    # least overhead that counts no more: a microsecond less counts more.
    assert planned(fitted, spec, mix) <= measured * (1 + 1e-3)
    assert planned(served.with_overhead(step_s=extra - 1e-6), spec, mix) > measured * (1 - 1e-3)
    assert fitted.decode_step_s(1, 100) == pytest.approx(served.decode_step_s(1, 100) + extra)


def test_a_profile_that_promises_no_more_than_measured_is_kept():
    mix = mix_of(0.5)
    spec = PlannerSpec(profile="p.json", per_token_slo=30.0)
    served = served_profile(load_profile(SHIPPED), Overhead(0.02, 0.004, 0.001), 10.0, SHIPPED)
    assert calibrated(served, 1000.0, spec, mix) == (served, 0.0)
