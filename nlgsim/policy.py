"""Policies the simulator can drive: the live autoscaler's, and any with the same shape.

A policy is a pure ``decide(window, spec, state, now) -> (Decision, state)`` plus a way to make its
first state; the state has ``with_replicas(n)``, which the loop calls each round with the replicas
the Deployment has (``autoscaler.decide.PolicyState``'s contract). ``autoscaler.decide.decide`` is
one; ``nlgsim.planner`` holds the project's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from autoscaler.decide import Decision, PolicyState
from autoscaler.decide import decide as hpa_decide

DecideFn = Callable[[WindowStats, ScalerSpec, Any, float], tuple[Decision, Any]]


@dataclass(frozen=True)
class Policy:
    """A named decide function with its spec; ``initial(replicas)`` gives its first state."""

    name: str
    spec: ScalerSpec
    decide: DecideFn
    initial: Callable[[int], Any]


def hpa_policy(spec: ScalerSpec, name: str | None = None) -> Policy:
    """The live autoscaler's policy (``autoscaler.decide.decide``), as configured by ``spec``."""
    label = name or f"{spec.type} {spec.threshold:g} ms"
    return Policy(label, spec, hpa_decide, PolicyState.initial)
