"""The policies a user would compare against, at their documented defaults: the anchors of the report.

Each is a :class:`nlgsim.policy.Policy` (a pure ``decide(window, spec, state, now)`` and its first
state) that the simulator drives through the live controller like the project's own; only the bounds
(``min_deployment_count``, ``max_deployment_count``) come from the scaler spec, everything else is the
anchor's default, cited where it is defined.

* ``kpa``: Knative's Pod Autoscaler on concurrency (requests in flight per pod), with its stable and
  panic windows, panic threshold and scale rates (``knative/serving``,
  ``pkg/autoscaler/scaling/autoscaler.go``, ``Scale``; defaults from
  ``config/core/configmaps/autoscaler.yaml``).
* ``keda-waiting``: KEDA's Prometheus trigger on the requests waiting (``nlg_requests_waiting``, what
  the vLLM production stack sets on ``vllm:num_requests_waiting``) driving an HPA with Kubernetes'
  default behaviour.
* ``dynamo``: NVIDIA Dynamo's SLA planner, its throughput mode from the profile with its +-1 load mode
  above it (:mod:`nlgsim.anchor_dynamo`, which cites its defaults and says where it departs from them).

All read what the pods export (docs/metrics.md) through the same window as the live policies, and
act on the simulator's loop; each keeps its own period (KPA's tick, KEDA's polling interval, Dynamo's
two adjustment intervals) by holding between its own rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats
from autoscaler.config import RateLimit, ScalerSpec
from autoscaler.decide import Decision, bounds, proposal, rate_limit, record_event, serving_replicas, stabilize
from autoscaler.planner import PlannerConfig
from nlgsim.anchor_dynamo import dynamo_policy
from nlgsim.policy import Policy

# -- Knative KPA ---------------------------------------------------------------------------------------
# Defaults of config/core/configmaps/autoscaler.yaml (knative/serving):
#: ``container-concurrency-target-default: "100"``: requests in flight per pod the KPA aims at.
KPA_TARGET_CONCURRENCY = 100.0
#: ``container-concurrency-target-percentage: "70"``: the share of that target it scales at.
KPA_TARGET_UTILIZATION = 0.70
#: ``stable-window: "60s"``.
KPA_STABLE_WINDOW_S = 60.0
#: ``panic-window-percentage: "10.0"``: the panic window is 10% of the stable window (6 s).
KPA_PANIC_WINDOW_FRACTION = 0.10
#: ``panic-threshold-percentage: "200.0"``: panic when the panic window's pods would be 2x the ready pods.
KPA_PANIC_THRESHOLD = 2.0
#: ``max-scale-up-rate: "1000.0"``: at most 1000x the ready pods in one decision.
KPA_MAX_SCALE_UP_RATE = 1000.0
#: ``max-scale-down-rate: "2.0"``: at most halve the ready pods in one decision.
KPA_MAX_SCALE_DOWN_RATE = 2.0
#: ``tick-interval`` (config/core/configmaps/autoscaler.yaml: "2s"): how often it decides; the
#: simulator's rounds are its ticks when they are longer.
KPA_TICK_S = 2.0


@dataclass(frozen=True)
class KpaState:
    replicas: int
    samples: tuple[tuple[float, float], ...] = ()
    """(time, requests in flight) at each round of the last stable window."""
    panic_since: float | None = None
    panic_pods: int = 0
    """The most pods the panic mode has asked for (it never scales down while panicking)."""
    events: tuple[tuple[float, int], ...] = ()
    """Unused (KPA has no rate window); the control loop restores it after a failed actuation."""

    @classmethod
    def initial(cls, replicas: int, now: float) -> KpaState:
        # Nothing to seed: KPA's windows fill from the pods' metrics, and it keeps no proposals.
        return cls(replicas)

    def with_replicas(self, replicas: int) -> KpaState:
        return replace(self, replicas=replicas)


def _average(samples: tuple[tuple[float, float], ...], since: float) -> float | None:
    values = [v for t, v in samples if t > since]
    return sum(values) / len(values) if values else None


def kpa_decide(window: WindowStats, spec: ScalerSpec, state: KpaState, now: float) -> tuple[Decision, KpaState]:
    """One tick of Knative's ``autoscaler.Scale``: stable and panic averages of concurrency over the
    target per pod, bounded by the scale rates from the ready pods, panic mode when the panic window
    asks for twice the ready pods, and no scale-down while panicking."""
    current = state.replicas
    ready = min(serving_replicas(window), current) if window.pods else 0
    in_flight = window.gauges.get("running")
    if ready == 0 or in_flight is None:
        return Decision(current, current, False, "no data: holding", {}), state
    in_flight += window.gauges.get("waiting", 0.0)
    samples = tuple((t, v) for t, v in state.samples if t > now - KPA_STABLE_WINDOW_S) + ((now, in_flight),)
    stable = _average(samples, now - KPA_STABLE_WINDOW_S) or 0.0
    panic_window = KPA_STABLE_WINDOW_S * KPA_PANIC_WINDOW_FRACTION
    # A round is at least one tick apart: the panic window holds at least the latest sample.
    panic = _average(samples, now - max(panic_window, KPA_TICK_S) - 1e-9) or in_flight
    target = KPA_TARGET_CONCURRENCY * KPA_TARGET_UTILIZATION
    up = math.ceil(KPA_MAX_SCALE_UP_RATE * ready)
    down = math.floor(ready / KPA_MAX_SCALE_DOWN_RATE)
    stable_wanted, panic_wanted = math.ceil(stable / target), math.ceil(panic / target)  # Scale's dspc, dppc
    stable_pods = min(max(stable_wanted, down), up)
    panic_pods = min(max(panic_wanted, down), up)
    over = panic_wanted / ready >= KPA_PANIC_THRESHOLD
    panic_since = state.panic_since
    if over:
        panic_since = now  # begins the panic, or extends it
    elif panic_since is not None and now - panic_since > KPA_STABLE_WINDOW_S:
        panic_since = None  # the surge has made its way into the stable window
    max_panic = 0
    if panic_since is not None:
        # No scale-down while panicking: the most pods asked for since it began.
        max_panic = want = max(stable_pods, panic_pods, state.panic_pods)
        mode = f"panic (last over the threshold at {panic_since:g} s)"
    else:
        want = stable_pods
        mode = "stable"
    desired = bounds(want, spec)
    values = {"concurrency_stable": stable, "concurrency_panic": panic}
    reason = (
        f"KPA {mode}: in flight {stable:.3g} (stable {KPA_STABLE_WINDOW_S:g} s), {panic:.3g} (panic "
        f"{panic_window:g} s) over {target:g} per pod, {ready} ready: {current} -> {desired}"
    )
    new = KpaState(desired, samples, panic_since, max_panic)
    return Decision(desired, current, True, reason, values), new


def kpa_policy(spec: ScalerSpec, name: str = "kpa") -> Policy:
    return Policy(name, spec, kpa_decide, KpaState.initial, {"concurrency": KPA_TARGET_CONCURRENCY})


# -- KEDA on waiting requests --------------------------------------------------------------------------
#: The vLLM production stack's KEDA trigger (docs/source/use_cases/autoscaling-keda.rst,
#: vllm-project/production-stack): ``query: vllm:num_requests_waiting``, ``threshold: '5'``, an
#: AverageValue target (KEDA's Prometheus scaler default): 5 waiting requests per replica.
KEDA_WAITING_PER_REPLICA = 5.0
#: ``pollingInterval: 15`` in the same tutorial (also KEDA's default is 30; the tutorial's is used).
KEDA_POLLING_S = 15.0
#: Kubernetes HPA defaults when a ScaledObject gives no ``behavior`` (kubernetes.io, "Horizontal Pod
#: Autoscaling", Default Behavior): scale-down stabilization 300 s, 100% per 15 s; scale-up no
#: stabilization, the larger of 4 pods and 100% per 15 s; tolerance 0.1 (--horizontal-pod-autoscaler-tolerance).
HPA_DEFAULTS = ScalerSpec(
    stabilization_window=300.0,
    tolerance=0.1,
    scale_up=RateLimit(max_pods=4, max_percent=100.0, period=15.0, select="max"),
    scale_down=RateLimit(max_pods=0, max_percent=100.0, period=15.0, select="max"),
)


@dataclass(frozen=True)
class KedaState:
    replicas: int
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    next_poll: float = -math.inf

    @classmethod
    def initial(cls, replicas: int, now: float) -> KedaState:
        # KEDA scales through an HPA, which seeds its recommendations with the replicas it first sees.
        return cls(replicas, proposals=((now, replicas),))

    def with_replicas(self, replicas: int) -> KedaState:
        return replace(self, replicas=replicas)


def keda_waiting_decide(
    window: WindowStats, spec: ScalerSpec, state: KedaState, now: float
) -> tuple[Decision, KedaState]:
    """An HPA sync on an External metric with an AverageValue target: ``ceil(total / target)``, the
    tolerance, HPA's default stabilization and rate policies, the spec's bounds; polled every
    ``KEDA_POLLING_S``."""
    current = state.replicas
    if now < state.next_poll:
        return Decision(current, current, True, f"KEDA: next poll at {state.next_poll:g} s", {}), state
    waiting = window.gauges.get("waiting") if window.pods else None
    if waiting is None:
        return Decision(current, current, False, "no data: holding", {}), replace(state, next_poll=now + KEDA_POLLING_S)
    hpa = HPA_DEFAULTS
    per_replica = waiting / max(current, 1)
    proposed = proposal(current, per_replica, KEDA_WAITING_PER_REPLICA, hpa.tolerance)
    stabilized, kept = stabilize(state.proposals, proposed, current, now, hpa.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, hpa.scale_up, hpa.scale_down)
    desired = bounds(limited, spec)
    events = record_event(state.events, now, current, desired, hpa)
    reason = (
        f"KEDA: waiting {waiting:.3g} ({per_replica:.3g} per replica) vs {KEDA_WAITING_PER_REPLICA:g}: proposes "
        f"{proposed}, stabilized {stabilized}, rate-limited {limited}: {current} -> {desired}"
    )
    new = KedaState(desired, kept, events, now + KEDA_POLLING_S)
    return Decision(desired, current, True, reason, {"waiting_per_replica": per_replica}), new


def keda_waiting_policy(spec: ScalerSpec, name: str = "keda-waiting") -> Policy:
    return Policy(name, spec, keda_waiting_decide, KedaState.initial, {"waiting_per_replica": KEDA_WAITING_PER_REPLICA})


#: Anchor names as ``--policy`` takes them, each with what makes its policy from the spec, the name and
#: the planner's settings (the profile and the SLO; only ``dynamo`` plans with them).
ANCHORS: dict[str, Callable[[ScalerSpec, str, PlannerConfig | None], Policy]] = {
    "kpa": lambda spec, name, _: kpa_policy(spec, name),
    "keda-waiting": lambda spec, name, _: keda_waiting_policy(spec, name),
    "dynamo": lambda spec, name, cfg: dynamo_policy(spec, cfg, name),
}
