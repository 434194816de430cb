"""The lagged oracle: each round the most replicas the oracle needed over the intervals that ended in the
last H seconds, on the trace's clock, bounded as any policy; only where the trace protocol has an oracle
(tests/sim/test_protocol.py runs it there)."""

from __future__ import annotations

import pytest

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from nlgsim.experiment import build_policy
from nlgsim.lagged import LaggedState, OracleCounts, held_need, lagged_policy

NEEDED = (1, 3, 2, 5, 1)


@pytest.mark.parametrize(
    ("t", "hold", "expected"),
    [
        (29.9, 300, None),  # no interval has ended yet
        (30.0, 300, (1, 0)),
        (60.0, 300, (3, 1)),
        (150.0, 60, (5, 3)),  # intervals 3 and 4 ended in (90, 150]
        (150.0, 10, (1, 4)),  # a hold shorter than an interval still has the last one ended
        (149.0, 60, (5, 3)),  # interval 4 ends at 150: not yet
        (1000.0, 2000, (5, 3)),  # past the trace: its last intervals
    ],
)
def test_the_held_need_is_the_most_of_the_intervals_ended_within_the_hold(t, hold, expected):
    assert held_need(NEEDED, 30.0, t, hold) == expected


def test_ties_name_the_latest_interval():
    assert held_need((2, 2, 1), 30.0, 90.0, 300.0) == (2, 1)


def test_the_policy_reads_the_trace_clock_and_keeps_the_bounds():
    counts = OracleCounts(NEEDED, 30.0, offset=60.0)
    policy = lagged_policy(ScalerSpec(max_deployment_count=8), "lagged:60", 60.0, counts)
    decision, state = policy.decide(WindowStats.empty(), policy.spec, LaggedState(1), 30.0)
    assert (decision.desired, state.replicas) == (3, 3)  # trace time 90: intervals 1 and 2 ended within 60 s
    assert "needed 3 in the interval from 30 s" in decision.reason
    capped = lagged_policy(ScalerSpec(max_deployment_count=2), "lagged:60", 60.0, counts)
    assert capped.decide(WindowStats.empty(), capped.spec, LaggedState(1), 90.0)[0].desired == 2
    early = policy.decide(WindowStats.empty(), policy.spec, LaggedState(2), -40.0)[0]
    assert early.desired == 2 and "holding 2" in early.reason


@pytest.mark.parametrize("text", ["lagged", "lagged:0", "lagged:x", "lagged:300"])
def test_a_lagged_policy_needs_a_hold_and_the_trace_protocols_oracle(text):
    with pytest.raises(ValueError, match="--policy"):
        build_policy(text, ScalerSpec())
    if text == "lagged:300":
        with pytest.raises(ValueError, match="--protocol trace"):
            build_policy(text, ScalerSpec())
