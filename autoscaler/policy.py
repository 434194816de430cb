"""Scaling policies as objects the control loop takes: a pure decide function and its first state.

Ray Serve's shape: ``decide(window, spec, state, now) -> (Decision, state)``; the caller keeps the
state, and calls ``state.with_replicas(n)`` each round with the replicas the target has (see
:class:`autoscaler.decide.PolicyState`). A state also offers ``replicas`` and ``events`` (the loop
restores them after a failed or deferred actuation).

``scaler.type`` picks the policy (:func:`build_policy`): ``request`` and ``pertoken`` are the HPA
algorithm of :mod:`autoscaler.decide` over one latency; ``planner`` is :mod:`autoscaler.planner`.
The simulator drives the same objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from autoscaler.decide import POLICIES, Decision, PolicyState, decide
from autoscaler.planner import PlannerConfig, PlannerState, planner_config, planner_decide_fn
from autoscaler.profile import load_profile

DecideFn = Callable[[WindowStats, ScalerSpec, Any, float], tuple[Decision, Any]]


@dataclass(frozen=True)
class Policy:
    """A named decide function with its spec; ``initial(replicas)`` gives its first state.

    ``targets``: what the policy aims at, by signal name (ms for latencies), for the API and metrics.
    """

    name: str
    spec: ScalerSpec
    decide: DecideFn
    initial: Callable[[int], Any]
    targets: Mapping[str, float] = field(default_factory=dict)


def hpa_policy(spec: ScalerSpec, name: str | None = None) -> Policy:
    """``request`` or ``pertoken``: :func:`autoscaler.decide.decide`, as configured by ``spec``."""
    label = name or f"{spec.type} {spec.threshold:g} ms"
    signals = (POLICIES[spec.type](spec), *spec.signals)
    return Policy(label, spec, decide, PolicyState.initial, {s.metric: s.target for s in signals})


def planner_policy(spec: ScalerSpec, cfg: PlannerConfig, name: str = "planner") -> Policy:
    """The planner with ``cfg``; ``spec`` gives bounds, stabilization and rate limits."""
    q = cfg.slo.window_quantile
    targets = {
        f"pertoken_{q}": cfg.slo.per_token_allowed(cfg.long_output_tokens) * 1000,
        f"ttft_{q}": cfg.slo.ttft_s * 1000,
    }
    return Policy(name, spec, planner_decide_fn(cfg), PlannerState, targets)


def build_policy(spec: ScalerSpec) -> Policy:
    """The policy ``spec.type`` names; a planner reads its profile (``ValueError`` if it cannot)."""
    if spec.type == "planner":
        profile = load_profile(spec.planner.profile)
        return planner_policy(spec, planner_config(spec.planner, profile))
    return hpa_policy(spec)
