"""Pods the load does not reach: the finding, as data, and the step every policy's decision takes.

A Kubernetes Service balances connections, not requests: clients that keep their gRPC channels stay
on the pods they first reached, and pods added later get none of their requests (docs/helm.md,
"Balancing requests"). The pods that serve then miss the target while the added ones idle, and a
latency policy keeps adding pods that stay idle.

- :func:`find_idle_pods`: the pods that reported through the whole window, finished no request in
  it and have none running or waiting, while other pods served requests. Reported only while the
  fleet misses a target (a signal over it), so a quiet fleet with a pod to spare is no finding.
- :func:`review`: the step: the finding goes into the decision's reason and ``idle_pods``; a
  decision that would add replicas while it stands holds the current count instead, since the pods
  added last reached no users and more would not either.

Pure: no clock, no I/O; it reads the window's per-pod part (:class:`autoscaler.aggregate.PodWindow`),
which the direct source gives and the Prometheus source, summing pods in PromQL, does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol, TypeVar

from autoscaler.aggregate import WindowStats
from autoscaler.decide import Decision


class ScaleState(Protocol):
    """What every policy's state holds (a dataclass): the replicas it decided and its scale events."""

    replicas: int
    events: tuple[tuple[float, int], ...]


S = TypeVar("S", bound=ScaleState)


def missed_targets(decision: Decision, targets: Mapping[str, float]) -> list[str]:
    """The signals of ``decision`` over their targets, by name."""
    return [name for name, target in targets.items() if decision.values.get(name, float("-inf")) > target]


def find_idle_pods(window: WindowStats) -> tuple[str, ...]:
    """Pods through the whole window with no request finished, running or waiting, while others served."""
    pods = window.per_pod
    if not any(p.finished > 0 or p.running > 0 for p in pods.values()):
        return ()  # nothing served anywhere: an idle fleet, not an unbalanced one
    return tuple(
        sorted(
            name
            for name, p in pods.items()
            if p.whole_window and p.finished == 0 and p.running == 0 and p.waiting == 0
        )
    )


def review(
    decision: Decision, new_state: S, state: S, window: WindowStats, targets: Mapping[str, float]
) -> tuple[Decision, S]:
    """The decision and the state to keep after the imbalance step; ``state`` is the one the policy
    was given: a scale-up held keeps its ``events``, as the loop keeps them after a failed one."""
    missed = missed_targets(decision, targets)
    idle = find_idle_pods(window) if missed else ()
    if not idle:
        return decision, new_state
    serving = len(window.per_pod) - len(idle)
    finding = (
        f"{len(idle)} of {len(window.per_pod)} pods served no request for a whole window while "
        f"{', '.join(missed)} missed its target on the other {serving}: the load does not reach them "
        "(clients that keep connections to a Service stay on the pods they first reached)"
    )
    if decision.desired <= decision.current:
        return replace(decision, reason=f"{decision.reason}; {finding}", idle_pods=idle), new_state
    held = replace(
        decision,
        desired=decision.current,
        reason=f"{decision.reason}; scale-up to {decision.desired} withheld: {finding}",
        idle_pods=idle,
    )
    return held, replace(new_state, replicas=decision.current, events=state.events)  # type: ignore[type-var]
