"""Scaling policies: pure functions from window statistics, config, state and time to a decision.

This module owns the decision and nothing else: no clock reads, no I/O; the caller keeps
:class:`PolicyState` between calls (Ray Serve's ``(desired, new_state)`` shape).

Public API (imported by the simulator; keep stable):

- :func:`decide` ``(window, spec, state, now) -> (Decision, PolicyState)``.
- :class:`Decision` (desired replicas, ``valid``, a reason a person can read, the values used),
  :class:`PolicyState` (``PolicyState.initial(replicas, now)``, ``with_replicas(n)`` after observing the
  target), :data:`POLICIES` (``type`` -> primary signal) and :func:`signal_value`.

The algorithm is Kubernetes HPA's, built from small named steps, each tested alone:

1. :func:`signal_value`: each signal's current value (primary: the window mean of per-token or
   request latency, in ms); ``None`` means no data.
2. :func:`ready_proposal`: ``ceil(ready * value / target)``, or ``current`` inside the tolerance,
   with HPA's rules for pods without a sample (not ready yet, or missing one): on a scale-up they
   count as using none of the metric, so pods still starting damp the next step instead of being
   multiplied again; on a scale-down they count as at the target (:func:`proposal` is the rule with
   every pod reporting).
3. :func:`combine`: the maximum over signals with data; with some signals lacking data a scale-down
   is refused (HPA does the same); with none, hold, and the hold counts as a proposal of the current
   replicas, so a scale-down after a metrics outage waits a full stabilization window of data.
4. :func:`stabilize`: a scale-down takes the highest proposal of the last ``stabilization_window`` s.
   A replica count someone else set (``kubectl scale``) counts as a proposal when it is first seen,
   so a manual scale-up stands for the window (HPA would undo it at the next sync).
5. :func:`rate_limit`: per period, :func:`allowed_change` replicas added or removed: ``max_pods`` or
   ``max_percent%`` of the replicas at the period start, the larger (``select: max``) or the
   smaller (``select: min``).
6. :func:`bounds`: ``min_deployment_count <= desired <= max_deployment_count``, applied even without
   data, as HPA does.

:func:`record_event` keeps the scale events the rate limit counts; every policy records through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from autoscaler.aggregate import WindowStats
from autoscaler.config import RateLimit, ScalerSpec, Signal

_LATENCY_STATS: Final = frozenset({"mean", "p50", "p90", "p99"})


@dataclass(frozen=True)
class Decision:
    """One round's outcome. ``valid`` is False when there was no data and the replicas were held.
    ``idle_pods``: pods the load did not reach while a target was missed (:mod:`autoscaler.imbalance`)."""

    desired: int
    current: int
    valid: bool
    reason: str
    values: Mapping[str, float] = field(default_factory=dict)
    idle_pods: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.desired != self.current


@dataclass(frozen=True)
class PolicyState:
    """What a policy remembers: current replicas, recent proposals and recent scale events."""

    replicas: int
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    #: A count someone else set, seen since the last decision; the next decision records it.
    changed_to: int | None = None

    @classmethod
    def initial(cls, replicas: int, now: float) -> PolicyState:
        """The state when a target is first seen (a start, a restart, a new leader): the replicas it has
        count as a proposal made now, so no scale-in comes before a stabilization window of rounds has
        proposed it, as Kubernetes' HPA seeds its recommendations (``recordInitialRecommendation`` in
        kubernetes pkg/controller/podautoscaler/horizontal.go)."""
        return cls(replicas=replicas, proposals=((now, replicas),))

    def with_replicas(self, replicas: int) -> PolicyState:
        """The caller observed the target at ``replicas``; a count other than the last one is a change
        made by someone else (after a failed or deferred actuation the caller keeps the observed count).
        """
        if replicas == self.replicas:
            return self
        return replace(self, replicas=replicas, changed_to=replicas)


def pertoken_policy(spec: ScalerSpec) -> Signal:
    """The thesis's policy: the window mean of per-token latency against ``threshold`` ms."""
    return Signal(metric="pertoken_mean", target=spec.threshold)


def request_policy(spec: ScalerSpec) -> Signal:
    """The thesis's baseline: the window mean of request latency against ``threshold`` ms."""
    return Signal(metric="request_mean", target=spec.threshold)


POLICIES: Final[Mapping[str, Callable[[ScalerSpec], Signal]]] = {
    "pertoken": pertoken_policy,
    "request": request_policy,
}


def _idle(window: WindowStats) -> bool:
    """Pods answered, nothing finished, nothing running or waiting: latency is 0, not unknown."""
    return (
        window.pods > 0
        and window.span > 0
        and window.gauges.get("running") == 0
        and window.gauges.get("waiting", 0) == 0
    )


def signal_value(window: WindowStats, metric: str, replicas: int) -> float | None:
    """The value of ``metric`` (a :data:`~autoscaler.config.SIGNAL_METRICS` name); ``None`` = no data.

    Latencies are in ms. With no pod reporting there is no data. A latency with no request finished
    in the window is no data too, unless the pods are idle (nothing running or waiting): then it is 0,
    so that an idle deployment scales in. ``waiting_per_replica`` divides by ``replicas`` (HPA's
    AverageValue); ``kv_usage`` is the mean over pods (HPA's Utilization).
    """
    if window.pods == 0:
        return None
    if metric == "waiting_per_replica":
        waiting = window.gauges.get("waiting")
        return None if waiting is None else waiting / max(replicas, 1)
    if metric == "kv_usage":
        return window.gauges.get("kv_usage")
    family, _, stat = metric.rpartition("_")
    if stat not in _LATENCY_STATS:
        raise ValueError(f"unknown signal {metric!r}; see autoscaler.config.SIGNAL_METRICS")
    stats = window.latency(family)
    if stats.count <= 0:
        return 0.0 if _idle(window) else None
    value: float = getattr(stats, stat)
    return value * 1000.0 if math.isfinite(value) else None


def proposal(current: int, value: float, target: float, tolerance: float) -> int:
    """HPA's ``ceil(current * value / target)``; ``current`` while the ratio is within the tolerance.

    From zero replicas the proposal starts at one (there is no ratio of nothing).
    """
    ratio = value / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(max(current, 1) * ratio)


def serving_replicas(window: WindowStats) -> int:
    """Replicas reporting: the model instances the pods say they serve, else the pods. With the Triton
    actuator one pod holds every instance, so counting pods would see one replica whatever the count."""
    instances = window.gauges.get("instances", 0.0)
    return round(instances) if instances >= 1 else window.pods


def ready_proposal(current: int, ready: int, value: float, target: float, tolerance: float) -> int:
    """HPA's replica count when only ``ready`` of ``current`` pods report the metric.

    Kubernetes ``pkg/controller/podautoscaler/replica_calculator.go`` (``calcPlainMetricReplicas``,
    used for Pods and Object metrics as for resources): the ratio is taken over the pods with
    metrics; on a scale-up, pods not ready count as using 0 ("on a scale-up, treat unready pods as
    using 0% of the resource request"), and on a scale-down a pod without metrics counts as using the
    target; the ratio is then taken again over all pods, and the count is held where it comes back
    within the tolerance or flips direction. Both kinds of pod look the same here (no fresh sample),
    so a scale-up treats them as not ready and a scale-down as missing: each the rule that acts less.
    With every pod reporting this is :func:`proposal`.
    """
    ready = min(max(ready, 0), current)
    absent = current - ready
    ratio = value / target
    if absent == 0 or ready == 0:
        return proposal(current, value, target, tolerance)
    if ratio > 1.0:
        adjusted = ratio * ready / current  # the absent pods at 0
    else:
        adjusted = (ratio * ready + absent) / current  # the absent pods at the target
    if abs(adjusted - 1.0) <= tolerance or (ratio > 1.0) != (adjusted > 1.0):
        return current
    return math.ceil(adjusted * current)


def combine(proposals: Mapping[str, int | None], current: int) -> tuple[int | None, str]:
    """Maximum over signals with data; refuses a scale-down while any signal lacks data."""
    known = {m: p for m, p in proposals.items() if p is not None}
    if not known:
        return None, "no data for " + ", ".join(proposals)
    metric, best = max(known.items(), key=lambda kv: kv[1])
    missing = [m for m, p in proposals.items() if p is None]
    if missing and best < current:
        return current, f"scale-down refused: no data for {', '.join(missing)}"
    return best, f"{metric} proposes {best}"


def stabilize(
    proposals: tuple[tuple[float, int], ...], desired: int, current: int, now: float, window: float
) -> tuple[int, tuple[tuple[float, int], ...]]:
    """Adds ``desired`` to the history; a scale-down takes the highest proposal of the last ``window`` s."""
    kept = tuple((t, p) for t, p in proposals if t > now - window) + ((now, desired),)
    if desired >= current:
        return desired, kept
    return min(current, max(p for _, p in kept)), kept


def _changed_in_period(events: tuple[tuple[float, int], ...], now: float, period: float) -> tuple[int, int]:
    added = sum(d for t, d in events if d > 0 and t > now - period)
    removed = -sum(d for t, d in events if d < 0 and t > now - period)
    return added, removed


def allowed_change(start: int, limit: RateLimit) -> int:
    """Replicas one period may add or remove from ``start``: HPA's Pods and Percent policies chosen by
    ``select`` (HPA's ``selectPolicy``). A percentage of zero replicas counts as one of one replica.
    """
    by_percent = math.ceil(max(start, 1) * limit.max_percent / 100.0)
    if limit.select == "min":
        return min(limit.max_pods, by_percent)
    return max(limit.max_pods, by_percent)


def rate_limit(
    desired: int, current: int, events: tuple[tuple[float, int], ...], now: float,
    up: RateLimit, down: RateLimit,
) -> int:  # fmt: skip
    """HPA's behavior policies: what a period allows, less what it already added (or removed).

    Only changes in the same direction count, so a scale-up just made never lets a scale-down remove
    more than its own limit (HPA counts both from the period start: 4 -> 8 then 8 -> 3 with one pod).
    """
    if desired > current:
        added, _ = _changed_in_period(events, now, up.period)
        left = allowed_change(current - added, up) - added
        return min(desired, current + max(left, 0))
    if desired < current:
        _, removed = _changed_in_period(events, now, down.period)
        left = allowed_change(current + removed, down) - removed
        return max(desired, current - max(left, 0))
    return desired


def bounds(desired: int, spec: ScalerSpec) -> int:
    return min(max(desired, spec.min_deployment_count), spec.max_deployment_count)


def record_event(
    events: tuple[tuple[float, int], ...], now: float, current: int, desired: int, spec: ScalerSpec
) -> tuple[tuple[float, int], ...]:
    """The scale events :func:`rate_limit` counts: those of the longer period, plus this change."""
    horizon = max(spec.scale_up.period, spec.scale_down.period)
    kept = tuple((t, d) for t, d in events if t > now - horizon)
    return kept + ((now, desired - current),) if desired != current else kept


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def decide(
    window: WindowStats, spec: ScalerSpec, state: PolicyState, now: float
) -> tuple[Decision, PolicyState]:
    """One HPA round over the primary signal (``spec.type``) and ``spec.signals``; pure."""
    current = state.replicas
    signals = (POLICIES[spec.type](spec), *spec.signals)
    values: dict[str, float] = {}
    proposals: dict[str, int | None] = {}
    notes: list[str] = []
    calm = True  # every signal with data within the tolerance of its target
    serving = serving_replicas(window)
    for signal in signals:
        value = signal_value(window, signal.metric, current)
        if value is None:
            proposals[signal.metric] = None
            continue
        values[signal.metric] = value
        proposals[signal.metric] = ready_proposal(current, serving, value, signal.target, spec.tolerance)
        calm = calm and abs(value / signal.target - 1.0) <= spec.tolerance
        notes.append(f"{signal.metric} {_fmt(value)} vs target {_fmt(signal.target)}")
    combined, why = combine(proposals, current)
    history = state.proposals
    if state.changed_to is not None:
        history += ((now, state.changed_to),)
    if combined is None:
        held = bounds(current, spec)
        reason = f"{why}; holding {current} replicas"
        if held != current:
            reason = f"{why}; {current} replicas outside [{spec.min_deployment_count}, "
            reason += f"{spec.max_deployment_count}], moving to {held}"
        _, kept = stabilize(history, current, current, now, spec.stabilization_window)
        new_state = replace(state, replicas=held, proposals=kept, changed_to=None)
        return Decision(held, current, held != current, reason, values), new_state
    stabilized, kept = stabilize(history, combined, current, now, spec.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, spec.scale_up, spec.scale_down)
    desired = bounds(limited, spec)
    steps = [why]
    if 0 < serving < current:
        steps.append(f"{current - serving} of {current} pods without a sample (starting) count as "
                     "using none on a scale-up, as at the target on a scale-down (HPA)")  # fmt: skip
    if state.changed_to is not None:
        steps.append(f"{state.changed_to}, set by someone else, counts as a proposal")
    if stabilized != combined:
        window_s = _fmt(spec.stabilization_window)
        steps.append(f"scale-down held at {stabilized} by the {window_s} s stabilization window")
    if limited != stabilized:
        steps.append(f"rate limit allows {limited}")
    if desired != limited:
        steps.append(f"bounds [{spec.min_deployment_count}, {spec.max_deployment_count}] give {desired}")
    if combined == current and desired == current and all(p == current for p in proposals.values()):
        steps[0] = "within tolerance" if calm else ("held" if 0 < serving < current else "no change needed")
    reason = "; ".join(notes) + f" ({'; '.join(steps)}): {current} -> {desired}"
    events = record_event(state.events, now, current, desired, spec)
    return Decision(desired, current, True, reason, values), PolicyState(desired, kept, events)
