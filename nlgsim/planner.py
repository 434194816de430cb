"""The project's own policy: plan replicas from the engine profile, ahead of demand, guard the tail.

HPA-style policies react to a latency that has already moved; by then the load has been too high
for a whole window, and a new pod still needs its start-up time. This policy instead:

1. measures demand in choices per second: choices that got their first token in the window
   (``ttft`` count / span), plus the requests waiting in the pods drained over ``drain_s``;
2. takes the mix (mean prompt and output tokens of a choice) from its configuration, and choices per
   request from the window (finished choices / finished requests);
3. forecasts demand ``lead_s`` ahead (set it to the pod's time to ready plus a loop interval) from
   the least-squares trend of the last ``trend_window_s`` of demand, never below demand now;
4. divides by what one replica carries within the per-token target according to the profile
   (``nlgsim.capacity.choices_per_second``) times ``headroom``;
5. guards the tail: if the window's per-token latency or TTFT at the SLO's quantile (p99 for a 0.99
   target) is over what the SLO allows while every pod is ready (pods still starting are help
   already on its way), at least one replica more;
6. then the live autoscaler's own steps, imported: ``stabilize`` (scale-down waits for the
   ``stabilization_window``), ``rate_limit`` and ``bounds``.

It has the live policy's shape, ``decide(window, spec, state, now) -> (Decision, state)``, pure, and
its state offers ``replicas`` and ``with_replicas``. It reads ``spec`` for bounds, stabilization and
rate limits; its targets come from :class:`PlannerConfig`, whose SLO is the one object the report and
the oracle judge it by (:class:`nlgsim.slo.SLO`). To run in the autoscaler it would move to
``autoscaler/`` as a third ``scaler.type`` whose config names the profile file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats
from autoscaler.config import ScalerSpec
from autoscaler.decide import Decision, bounds, rate_limit, stabilize
from nlgsim.capacity import choices_per_second
from nlgsim.policy import Policy
from nlgsim.profile import EngineProfile
from nlgsim.slo import SLO


@dataclass(frozen=True)
class PlannerConfig:
    profile: EngineProfile
    per_token_target_s: float
    """Planned per-token latency (the step estimate); the tail guard uses what ``slo`` allows."""
    slo: SLO
    prompt_tokens: float
    """Mean prompt tokens of a request. The pods' token counters are not in the autoscaler's
    ``PodSample``, so the mix is configured (the what-if CLI takes it from the trace it replays)."""
    output_tokens: float
    """Mean generated tokens of a choice."""
    long_output_tokens: float
    """A long choice's tokens (the p95): a request-latency limit spread over them is a per-token one."""
    lead_s: float
    headroom: float = 0.85
    trend_window_s: float = 60.0
    drain_s: float = 20.0
    default_choices: float = 1.0


@dataclass(frozen=True)
class PlannerState:
    replicas: int
    demand: tuple[tuple[float, float], ...] = ()
    choices: float = 0.0
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()

    def with_replicas(self, replicas: int) -> PlannerState:
        return replace(self, replicas=replicas)


def trend(points: tuple[tuple[float, float], ...]) -> float:
    """Least-squares slope of ``(t, value)`` points; 0 with fewer than 3 points."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mt) * (v - mv) for t, v in points) / var


def observe_choices(window: WindowStats, state: PlannerState, cfg: PlannerConfig) -> float:
    """Choices per request from the window, else the last known, else the default."""
    finished = window.latency("pertoken").count
    requests = window.latency("request").count
    choices = finished / requests if requests > 0 else (state.choices or cfg.default_choices)
    return max(choices, 1.0)


def planner_decide(
    window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float, cfg: PlannerConfig
) -> tuple[Decision, PlannerState]:
    current = state.replicas
    if window.pods == 0 or window.span <= 0:
        held = bounds(current, spec)
        return Decision(held, current, held != current, f"no data; holding {current} replicas"), state
    choices = observe_choices(window, state, cfg)
    started = window.latency("ttft").count / window.span
    waiting = window.gauges.get("waiting", 0.0)
    demand = started + waiting * choices / cfg.drain_s
    history = tuple((t, d) for t, d in state.demand if t > now - cfg.trend_window_s) + ((now, demand),)
    planned = max(demand, demand + trend(history) * cfg.lead_s)
    per_replica = choices_per_second(
        cfg.profile, cfg.per_token_target_s, cfg.prompt_tokens, cfg.output_tokens, choices
    )
    want = math.ceil(planned / (per_replica * cfg.headroom)) if planned > 0 else 0
    why = f"demand {demand:.3g}/s, planned {planned:.3g}/s, {per_replica:.3g}/s per replica"
    q = cfg.slo.window_quantile
    per_token_allowed = cfg.slo.per_token_allowed(cfg.long_output_tokens)
    tail = {
        f"pertoken_{q}": (float(getattr(window.latency("pertoken"), q)), per_token_allowed),
        f"ttft_{q}": (float(getattr(window.latency("ttft"), q)), cfg.slo.ttft_s),
    }
    over = [name for name, (v, target) in tail.items() if math.isfinite(v) and v > target]
    if over and want <= current and window.pods >= current:
        want = current + 1
        why += f"; {', '.join(over)} over target"
    stabilized, kept = stabilize(state.proposals, want, current, now, spec.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, spec.scale_up, spec.scale_down)
    desired = bounds(limited, spec)
    horizon = max(spec.scale_up.period, spec.scale_down.period)
    events = tuple((t, d) for t, d in state.events if t > now - horizon)
    if desired != current:
        events += ((now, desired - current),)
    values = {"demand": demand, "planned": planned, "per_replica": per_replica}
    values.update({k: v * 1000 for k, (v, _) in tail.items() if math.isfinite(v)})
    new_state = PlannerState(desired, history, choices, kept, events)
    return Decision(desired, current, True, f"{why}: {current} -> {desired}", values), new_state


def planner_policy(spec: ScalerSpec, cfg: PlannerConfig, name: str = "planner") -> Policy:
    """The planner as a simulator policy (same ``decide`` signature as the live autoscaler's)."""

    def decide(
        window: WindowStats, s: ScalerSpec, state: PlannerState, now: float
    ) -> tuple[Decision, PlannerState]:
        return planner_decide(window, s, state, now, cfg)

    return Policy(name, spec, decide, PlannerState)
