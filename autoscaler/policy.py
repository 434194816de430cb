"""Scaling policies as objects the control loop takes: a pure decide function and its first state.

Ray Serve's shape: ``decide(window, spec, state, now) -> (Decision, state)``; the caller keeps the
state, and calls ``state.with_replicas(n)`` each round with the replicas the target has (see
:class:`autoscaler.decide.PolicyState`). A state also offers ``replicas`` and ``events`` (the loop
restores them after a failed or deferred actuation).

``scaler.type`` picks the policy (:func:`build_policy`): ``request`` and ``pertoken`` are the HPA
algorithm of :mod:`autoscaler.decide` over one latency; ``planner`` is :mod:`autoscaler.planner`.
Every one's decision then takes :func:`autoscaler.imbalance.review` (:func:`reviewed`): pods the load
does not reach are named in its reason, and a scale-up that would add more of them is held.
The simulator drives the same objects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.aggregate import WindowStats
from autoscaler.capacity import fastest_token_s, idle_per_token_s
from autoscaler.config import ScalerSpec
from autoscaler.decide import POLICIES, Decision, PolicyState, decide
from autoscaler.imbalance import review
from autoscaler.planner import PlannerConfig, PlannerState, planner_config, planner_decide_fn
from autoscaler.profile import EngineProfile, load_profile

DecideFn = Callable[[WindowStats, ScalerSpec, Any, float], tuple[Decision, Any]]


@dataclass(frozen=True)
class Policy:
    """A named decide function with its spec; ``initial(replicas, now)`` gives its first state.

    ``targets``: what the policy aims at, by signal name (ms for latencies), for the API and metrics.
    """

    name: str
    spec: ScalerSpec
    decide: DecideFn
    initial: Callable[[int, float], Any]
    targets: Mapping[str, float] = field(default_factory=dict)


def reviewed(decide_fn: DecideFn, targets: Mapping[str, float]) -> DecideFn:
    """``decide_fn`` with the imbalance step after it (:func:`autoscaler.imbalance.review`);
    ``__wrapped__`` is ``decide_fn``."""

    @functools.wraps(decide_fn)
    def decide_reviewed(window: WindowStats, spec: ScalerSpec, state: Any, now: float) -> tuple[Decision, Any]:
        decision, new_state = decide_fn(window, spec, state, now)
        return review(decision, new_state, state, window, targets)

    return decide_reviewed


def hpa_policy(spec: ScalerSpec, name: str | None = None, profile: EngineProfile | None = None) -> Policy:
    """``request`` or ``pertoken``: :func:`autoscaler.decide.decide`, as configured by ``spec``.

    With an engine ``profile``, a ``pertoken`` decision says when its threshold is below what one
    idle replica gives (:func:`floor_note`): more replicas cannot bring the latency under it.
    """
    label = name or f"{spec.type} {spec.threshold:g} ms"
    signals = (POLICIES[spec.type](spec), *spec.signals)
    targets = {s.metric: s.target for s in signals}
    if profile is None or spec.type != "pertoken":
        return Policy(label, spec, reviewed(decide, targets), PolicyState.initial, targets)
    engine = profile

    def decide_with_floor(
        window: WindowStats, spec: ScalerSpec, state: PolicyState, now: float
    ) -> tuple[Decision, PolicyState]:
        decision, new_state = decide(window, spec, state, now)
        note = floor_note(spec.threshold, engine, window)
        return (replace(decision, reason=f"{decision.reason}; {note}") if note else decision), new_state

    return Policy(label, spec, reviewed(decide_with_floor, targets), PolicyState.initial, targets)


def floor_note(threshold_ms: float, profile: EngineProfile, window: WindowStats | None = None) -> str | None:
    """A warning when a per-token threshold is below what one idle replica gives, else None: below the
    profile's fastest token (any mix), or below the idle per-token latency of the window's mean
    request (prompt and output tokens per finished request, from the pods' counters)."""
    fastest = fastest_token_s(profile) * 1000
    if threshold_ms < fastest:
        return (
            f"warning: threshold {threshold_ms:g} ms is below {fastest:.3g} ms, the fastest token one idle "
            f"replica makes ({profile.hardware}): no replica count brings the per-token latency under it"
        )
    finished = window.counters.get("finished", 0.0) if window else 0.0
    if window is None or finished <= 0:
        return None
    prompt = window.counters.get("prompt_tokens", 0.0) / finished
    tokens = window.counters.get("generation_tokens", 0.0) / finished
    floor = idle_per_token_s(profile, prompt, tokens) * 1000
    if threshold_ms >= floor:
        return None
    return (
        f"warning: threshold {threshold_ms:g} ms is below {floor:.3g} ms, the per-token latency of this window's "
        f"mean request ({prompt:.0f} prompt, {tokens:.0f} output tokens) alone on an idle replica: more "
        "replicas cannot reach it"
    )


def check_notes(spec: ScalerSpec) -> list[str]:
    """``nlg-autoscaler --check``'s notes on the policy: a ``pertoken`` threshold below the fastest token
    of the engine profile that ``scaler.planner.profile`` names (nothing to say without one)."""
    if spec.type != "pertoken" or not spec.planner.profile.strip():
        return []
    try:
        profile = load_profile(spec.planner.profile)
    except ValueError as e:
        return [f"scaler.planner.profile: {e}; the threshold is not checked against the engine"]
    note = floor_note(spec.threshold, profile)
    return [f"scaler.threshold: {note}"] if note else []


def planner_policy(spec: ScalerSpec, cfg: PlannerConfig, name: str = "planner") -> Policy:
    """The planner with ``cfg``; ``spec`` gives bounds, stabilization and rate limits."""
    q = cfg.slo.window_quantile
    targets = {
        f"pertoken_{q}": cfg.slo.per_token_allowed(cfg.long_output_tokens) * 1000,
        f"ttft_{q}": cfg.slo.ttft_s * 1000,
    }
    return Policy(name, spec, reviewed(planner_decide_fn(cfg), targets), PlannerState.initial, targets)


def build_policy(spec: ScalerSpec) -> Policy:
    """The policy ``spec.type`` names; a planner reads its profile (``ValueError`` if it cannot)."""
    if spec.type == "planner":
        profile = load_profile(spec.planner.profile)
        return planner_policy(spec, planner_config(spec.planner, profile))
    engine = None
    if spec.type == "pertoken" and spec.planner.profile.strip():
        try:
            engine = load_profile(spec.planner.profile)
        except ValueError:
            engine = None  # only the threshold's warning needs it; --check names the problem
    return hpa_policy(spec, profile=engine)
