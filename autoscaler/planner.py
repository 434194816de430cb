"""The planner (``scaler.type: planner``): replicas planned from the engine profile, ahead of demand.

HPA-style policies react to a latency that has already moved; by then the load has been too high
for a whole window, and a new pod still needs its start-up time. This policy instead:

1. measures demand in choices per second: choices that got their first token in the window
   (``ttft`` count / span), plus the requests waiting in the pods drained over ``drain_s``;
2. measures the mix from the pods' counters (:func:`observe_mix`): prompt tokens per finished
   request, generated tokens per finished choice, choices per request; until a window has finished
   requests it keeps the last measurement, and before the first one the configured lengths;
3. forecasts demand ``lead_s`` ahead (one pod start-up) from the least-squares trend of the last
   ``trend_window_s`` of demand, never below demand now; a window's demand is its average, the demand
   of half a window ago, so the forecast reaches half a window further; and until the demand seen
   spans half the trend window (after a start or a restart) there is no trend, its slope being noise;
4. divides by what one replica carries within the planned per-token latency according to the
   profile (:func:`autoscaler.capacity.choices_per_second`) times ``headroom``;
5. guards the tail (:func:`tail_guard`): when the window's per-token latency or TTFT at the SLO's
   quantile is over what the SLO allows while every pod is ready, one replica more, but only when
   the evidence says load is the cause (:func:`load_evidence`: requests waiting, KV cache nearly
   full, demand per replica above capacity). Requests that miss the SLO even on an idle replica
   (long prompts, short outputs) keep the tail high whatever the replica count; adding pods for
   them would ratchet up and never scale in, so they are reported ("over SLO, not load") instead;
6. then the HPA steps of :mod:`autoscaler.decide`: ``stabilize``, ``rate_limit`` and ``bounds``.

Pure: ``decide(window, spec, state, now) -> (Decision, PlannerState)``, no I/O, no clock. The
simulator runs the same code (``nlgsim.planner``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats
from autoscaler.capacity import choices_per_second
from autoscaler.config import PlannerSpec, ScalerSpec
from autoscaler.decide import Decision, bounds, rate_limit, record_event, serving_replicas, stabilize
from autoscaler.profile import EngineProfile
from autoscaler.slo import SLO


@dataclass(frozen=True)
class PlannerConfig:
    profile: EngineProfile
    per_token_target_s: float
    """Planned per-token latency (the step estimate); the tail guard uses what ``slo`` allows."""
    slo: SLO
    prompt_tokens: float
    """Mean prompt tokens of a request, until the pods' counters have measured it."""
    output_tokens: float
    """Mean generated tokens of a choice, until the pods' counters have measured it."""
    long_output_tokens: float
    """A long choice's tokens (the p95): a request-latency limit spread over them is a per-token one."""
    lead_s: float
    headroom: float = 0.85
    trend_window_s: float = 60.0
    drain_s: float = 20.0
    default_choices: float = 1.0
    kv_usage_high: float = 0.9


def planner_config(spec: PlannerSpec, profile: EngineProfile) -> PlannerConfig:
    """The live planner's settings from ``scaler.planner`` and the profile it names."""
    slo = SLO(
        ttft_s=spec.ttft_slo / 1000.0,
        per_token_s=spec.per_token_slo / 1000.0,
        attain=("pertoken", "ttft"),
        target=spec.slo_percentile,
    )
    return PlannerConfig(
        profile=profile,
        per_token_target_s=slo.per_token_s * spec.plan_fraction,
        slo=slo,
        prompt_tokens=spec.prompt_tokens,
        output_tokens=spec.output_tokens,
        long_output_tokens=spec.output_tokens,
        lead_s=spec.startup or profile.startup_s,
        headroom=spec.headroom,
        trend_window_s=spec.trend_window,
        drain_s=spec.drain_time,
        kv_usage_high=spec.kv_usage_high,
    )


@dataclass(frozen=True)
class Mix:
    """Mean prompt tokens of a request, generated tokens of a choice, choices of a request."""

    prompt_tokens: float
    output_tokens: float
    choices: float
    measured: bool = False


@dataclass(frozen=True)
class PlannerState:
    replicas: int
    demand: tuple[tuple[float, float], ...] = ()
    mix: Mix | None = None
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


def observe_mix(window: WindowStats, last: Mix | None, cfg: PlannerConfig) -> Mix:
    """The window's mix when requests finished in it (the pods' counters), else the last one known.

    Choices per request come from the histograms (finished choices / finished requests); prompt
    tokens are counted at admission and generated tokens as they stream, so over a window each
    ratio is that of the requests that went through it.
    """
    before = last or Mix(cfg.prompt_tokens, cfg.output_tokens, cfg.default_choices)
    requests = window.latency("request").count
    choices = max(window.latency("pertoken").count / requests, 1.0) if requests > 0 else before.choices
    finished = window.counters.get("finished", 0.0)
    prompt = window.counters.get("prompt_tokens")
    generated = window.counters.get("generation_tokens")
    if finished <= 0 or prompt is None or generated is None:
        return replace(before, choices=choices)
    return Mix(max(prompt / finished, 1.0), max(generated / (finished * choices), 1.0), choices, True)


def load_evidence(
    window: WindowStats, cfg: PlannerConfig, demand: float, per_replica: float
) -> list[str]:  # fmt: skip
    """What says that load, not the requests themselves, makes the tail slow (empty: nothing)."""
    evidence = []
    waiting = window.gauges.get("waiting", 0.0)
    if waiting >= 1:
        evidence.append(f"{waiting:g} requests waiting")
    kv = window.gauges.get("kv_usage", 0.0)
    if kv >= cfg.kv_usage_high:
        evidence.append(f"KV cache {kv:.0%} used")
    serving = serving_replicas(window)
    if serving > 0 and demand / serving > per_replica:
        evidence.append(f"demand {demand / serving:.3g}/s per replica over capacity {per_replica:.3g}/s")
    return evidence


def tail_guard(
    window: WindowStats, cfg: PlannerConfig, demand: float, per_replica: float
) -> tuple[bool, str]:
    """Whether to add a replica for the tail, and what to say about it ("" when the tail is fine)."""
    q = cfg.slo.window_quantile
    limits = {
        f"pertoken_{q}": (window.latency("pertoken"), cfg.slo.per_token_allowed(cfg.long_output_tokens)),
        f"ttft_{q}": (window.latency("ttft"), cfg.slo.ttft_s),
    }
    over = []
    for name, (stats, limit) in limits.items():
        value = float(getattr(stats, q))
        if math.isfinite(value) and value > limit:
            over.append(f"{name} {value * 1000:.3g} ms > {limit * 1000:.3g} ms")
    if not over:
        return False, ""
    evidence = load_evidence(window, cfg, demand, per_replica)
    if evidence:
        return True, f"{', '.join(over)} with load ({', '.join(evidence)})"
    return False, f"{', '.join(over)}: over SLO, not load (nothing waiting, KV and demand within capacity)"


def planner_decide(
    window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float, cfg: PlannerConfig
) -> tuple[Decision, PlannerState]:
    current = state.replicas
    if window.pods == 0 or window.span <= 0:
        held = bounds(current, spec)
        return Decision(held, current, held != current, f"no data; holding {current} replicas"), state
    mix = observe_mix(window, state.mix, cfg)
    started = window.latency("ttft").count / window.span
    waiting = window.gauges.get("waiting", 0.0)
    demand = started + waiting * mix.choices / cfg.drain_s
    history = tuple((t, d) for t, d in state.demand if t > now - cfg.trend_window_s) + ((now, demand),)
    # The window's demand is its average, which stands for its middle, span / 2 ago: the forecast
    # reaches from there to one start-up ahead. A slope over less than half the trend window (after a
    # start or a restart) is mostly noise, which the lead multiplies: no trend until then.
    slope = trend(history) if history[-1][0] - history[0][0] >= cfg.trend_window_s / 2 else 0.0
    planned = max(demand, demand + slope * (cfg.lead_s + window.span / 2))
    per_replica = choices_per_second(
        cfg.profile, cfg.per_token_target_s, mix.prompt_tokens, mix.output_tokens, mix.choices
    )
    want = math.ceil(planned / (per_replica * cfg.headroom)) if planned > 0 else 0
    why = f"demand {demand:.3g}/s, planned {planned:.3g}/s, {per_replica:.3g}/s per replica"
    add, tail = tail_guard(window, cfg, demand, per_replica)
    if tail and want <= current and serving_replicas(window) >= current:
        want = current + 1 if add else want
        why += f"; {tail}"
    stabilized, kept = stabilize(state.proposals, want, current, now, spec.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, spec.scale_up, spec.scale_down)
    desired = bounds(limited, spec)
    values = {
        "demand": demand, "planned": planned, "per_replica": per_replica,
        "prompt_tokens": mix.prompt_tokens, "output_tokens": mix.output_tokens, "choices": mix.choices,
    }  # fmt: skip
    q = cfg.slo.window_quantile
    for family in ("pertoken", "ttft"):
        value = float(getattr(window.latency(family), q))
        if math.isfinite(value):
            values[f"{family}_{q}"] = value * 1000
    events = record_event(state.events, now, current, desired, spec)
    new_state = PlannerState(desired, history, mix, kept, events)
    return Decision(desired, current, True, f"{why}: {current} -> {desired}", values), new_state


def planner_decide_fn(
    cfg: PlannerConfig,
) -> Callable[[WindowStats, ScalerSpec, PlannerState, float], tuple[Decision, PlannerState]]:
    """``planner_decide`` bound to ``cfg``: the ``decide(window, spec, state, now)`` of a policy."""

    def decide(
        window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float
    ) -> tuple[Decision, PlannerState]:
        return planner_decide(window, spec, state, now, cfg)

    return decide
