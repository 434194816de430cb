"""The ``dynamo`` anchor: NVIDIA Dynamo's SLA planner on one aggregated engine per replica.

Dynamo's planner (``ai-dynamo/dynamo``, ``components/src/dynamo/planner/``; design in
``docs/design-docs/planner-design.md``; user guide: NVIDIA's "Planner Guide",
docs.nvidia.com/dynamo, components/planner/planner-guide) with ``optimization_target: sla`` (the
profile-driven one; the default ``throughput`` target is static queue and KV thresholds with no
profile) runs two loops when both of its modes are on:

* **throughput** (``core/throughput_scaling.py``), every ``throughput_adjustment_interval``: the
  requests, mean input and output lengths of the last interval go to a load predictor, and the
  predicted requests per second over what one engine serves within the TTFT and ITL targets (its
  performance model, bootstrapped from the pre-deployment profile) give a replica count; in
  aggregated mode a TTFT over its target at that rate is only logged. With load scaling on, that
  count is only a lower bound;
* **load** (``core/load_scaling.py``, aggregated mode), every ``load_adjustment_interval``: the
  performance model estimates each engine's next TTFT (its queued prefill, chunked, with the running
  decode piggybacked) and ITL (its running and queued decode). One replica more when every engine is
  over the TTFT or the ITL target; one fewer when, with its load spread over one engine fewer
  (``N/(N-1)``), the queue-induced TTFT stays under ``sensitivity`` of its budget, the ITL under
  ``sensitivity`` of its target and the KV cache holds it; never below the throughput bound, and no
  new step while the last one is still starting.

Here the performance model is the engine profile (:mod:`autoscaler.capacity`) at the interval's
mean input length (``spread=False``: Dynamo's interpolator is read at the mean ISL, every request
taken to be that long), the engines are the window's mean engine (the pods export sums, not each
engine's queue; the Service spreads the load), the requests received in an interval are those that
started plus the queue's growth, and the targets are the SLO's: TTFT where the SLO names it, else
Dynamo's default, and the per-token latency the SLO allows a long output as the ITL. What differs
from Dynamo's defaults, and why:

* the load predictor is ``constant`` (next interval = last interval), not the default ``arima``
  (pmdarima's auto-ARIMA, which this project does not carry): ARIMA itself returns the last value
  for its first five intervals (``core/load/predictors.py``, ``minimum_data_points=5``: 15 minutes
  at the 180 s interval) and whenever the series is constant;
* load scaling is on (``enable_load_scaling`` defaults to false in ``sla`` mode): the issue compares
  the throughput mode together with its +-1 load mode, the co-existence the design doc describes;
* the spec's ``max_deployment_count`` replaces ``max_gpu_budget`` (8 GPUs), as the other anchors
  take their bounds from the spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats
from autoscaler.capacity import choices_per_second, step_estimate
from autoscaler.config import ScalerSpec
from autoscaler.decide import Decision, bounds, serving_replicas
from autoscaler.planner import PlannerConfig
from autoscaler.profile import EngineProfile
from nlgsim.policy import Policy

# Defaults of components/src/dynamo/planner/config/defaults.py (ai-dynamo/dynamo), class
# BasePlannerDefaults and SLAPlannerDefaults:
#: ``throughput_adjustment_interval = 180``: seconds between throughput (predictive) decisions.
DYNAMO_THROUGHPUT_INTERVAL_S = 180.0
#: ``load_adjustment_interval = 5``: seconds between load (+-1) decisions; the simulator's rounds
#: are its ticks when they are longer.
DYNAMO_LOAD_INTERVAL_S = 5.0
#: ``load_scaling_down_sensitivity = 80`` (percent): scale down only within 80% of a target.
DYNAMO_SCALE_DOWN_SENSITIVITY = 0.80
#: ``min_endpoint = 1``: the fewest engines either mode asks for.
DYNAMO_MIN_ENDPOINT = 1
#: ``ttft = 500.0`` (ms): the TTFT target where the SLO does not name one.
DYNAMO_TTFT_S = 0.5


@dataclass(frozen=True)
class DynamoTargets:
    """What the planner plans for: its TTFT and ITL targets (seconds) and the profile as its model."""

    profile: EngineProfile
    ttft_s: float
    itl_s: float
    prompt_tokens: float
    """Mean input length until a window has measured one (Dynamo's ``isl`` default plays this part)."""
    output_tokens: float


def dynamo_targets(cfg: PlannerConfig) -> DynamoTargets:
    """The targets a user of Dynamo would set for the report's SLO."""
    ttft = cfg.slo.ttft_s if "ttft" in cfg.slo.attain else DYNAMO_TTFT_S
    itl = cfg.slo.per_token_allowed(cfg.long_output_tokens)
    return DynamoTargets(cfg.profile, ttft, itl, cfg.prompt_tokens, cfg.output_tokens)


@dataclass(frozen=True)
class DynamoState:
    replicas: int
    samples: tuple[tuple[float, float], ...] = ()
    """(time, requests per second) at each round since the last throughput decision."""
    lengths: tuple[float, float] | None = None
    """The last measured (input, output) tokens per request; None until a window measures them."""
    lower_bound: int = 0
    """The throughput mode's replica count, the load mode's floor (0 before its first decision)."""
    next_throughput: float | None = None
    waiting_at_last: float = 0.0
    """Requests waiting at the last throughput decision (or the first round)."""
    next_load: float = -math.inf
    events: tuple[tuple[float, int], ...] = ()
    """Unused (Dynamo has no rate window); the control loop restores it after a failed actuation."""

    @classmethod
    def initial(cls, replicas: int, now: float) -> DynamoState:
        # Nothing to seed: the planner decides each adjustment interval afresh from its predictors.
        return cls(replicas)

    def with_replicas(self, replicas: int) -> DynamoState:
        return replace(self, replicas=replicas)


def estimated_itl(t: DynamoTargets, sequences: float, isl: float, osl: float) -> float:
    """One engine's next ITL with ``sequences`` running and queued: a decode step with its share of
    prefill (:func:`autoscaler.capacity.step_estimate`), stretched linearly past the engine's batch as
    Dynamo's regression on decode KV tokens would be."""
    profile = t.profile
    batch = min(max(1, math.ceil(sequences)), profile.max_batch)
    return step_estimate(profile, batch, isl, osl, 1.0, spread=False) * max(1.0, sequences / profile.max_batch)


def estimated_ttft(t: DynamoTargets, queued: float, running: float, isl: float, osl: float) -> float:
    """One engine's next TTFT for a request arriving behind ``queued`` ones: their prompts and its own
    prefilled in chunks of ``prefill_chunk_tokens``, each chunk's step also decoding ``running``."""
    profile = t.profile
    prompts = queued + 1
    chunks = math.ceil(prompts * isl / profile.prefill_chunk_tokens)
    decode = 0.0
    if running >= 0.5:
        decode = profile.decode_step_s(min(math.ceil(running), profile.max_batch), isl + osl / 2)
    return prompts * profile.prefill_time_s(max(1, round(isl))) + chunks * decode


def throughput_bound(t: DynamoTargets, demand: float, isl: float, osl: float) -> tuple[int, float]:
    """The throughput mode's replicas for ``demand`` requests per second, and one engine's capacity."""
    capacity = choices_per_second(t.profile, t.itl_s, isl, osl, 1.0, spread=False)
    return max(math.ceil(demand / capacity), DYNAMO_MIN_ENDPOINT), capacity


def load_step(t: DynamoTargets, n: int, running: float, waiting: float, isl: float, osl: float) -> tuple[int, str]:
    """The load mode's +-1 on the mean engine of ``n``: the change and what decided it."""
    ttft = estimated_ttft(t, waiting, running, isl, osl)
    itl = estimated_itl(t, running, isl, osl)  # the waiting are prompts: they weigh on the TTFT
    est = (
        f"est. TTFT {ttft * 1000:.3g} ms (target {t.ttft_s * 1000:g}), "
        f"ITL {itl * 1000:.3g} ms (target {t.itl_s * 1000:.3g})"
    )
    if ttft > t.ttft_s or itl > t.itl_s:
        return 1, f"{est}: over, +1"
    if n <= 1:
        return 0, f"{est}: within"
    c = n / (n - 1)
    own = estimated_ttft(t, 0.0, running * c, isl, osl)
    budget = (t.ttft_s - own) * DYNAMO_SCALE_DOWN_SENSITIVITY
    queue_induced = estimated_ttft(t, waiting * c, running * c, isl, osl) - own
    kv_tokens = (running * (isl + osl / 2) + waiting * isl) * c
    post_itl = estimated_itl(t, (running + waiting) * c, isl, osl)
    sens = f"{DYNAMO_SCALE_DOWN_SENSITIVITY:.0%}"
    if budget <= 0 or queue_induced >= budget:
        return 0, f"{est}; on {n - 1} engines the queued TTFT would exceed {sens} of its budget: hold"
    if kv_tokens >= t.profile.total_pages * t.profile.page_size:
        return 0, f"{est}; on {n - 1} engines the KV cache would not hold the load: hold"
    if post_itl >= t.itl_s * DYNAMO_SCALE_DOWN_SENSITIVITY:
        return 0, f"{est}; on {n - 1} engines ITL {post_itl * 1000:.3g} ms would exceed {sens} of its target: hold"
    return -1, f"{est}; within {sens} of both on {n - 1} engines: -1"


def _lengths(window: WindowStats, last: tuple[float, float] | None) -> tuple[float, float] | None:
    finished = window.counters.get("finished", 0.0)
    prompt, generated = window.counters.get("prompt_tokens"), window.counters.get("generation_tokens")
    if finished <= 0 or prompt is None or generated is None:
        return last
    return max(prompt / finished, 1.0), max(generated / finished, 1.0)


def dynamo_decide(
    window: WindowStats, spec: ScalerSpec, state: DynamoState, now: float, t: DynamoTargets
) -> tuple[Decision, DynamoState]:
    """One round: record the traffic, a throughput decision when its interval has passed, then a load
    decision on its own period above the throughput bound."""
    current = state.replicas
    if window.pods == 0 or window.span <= 0 or "running" not in window.gauges:
        return Decision(current, current, False, "no data: holding", {}), state
    rate = window.latency("ttft").count / window.span
    lengths = _lengths(window, state.lengths)
    isl, osl = lengths or (t.prompt_tokens, t.output_tokens)
    samples = (*state.samples, (now, rate))
    state = replace(state, samples=samples, lengths=lengths)
    waiting_now = window.gauges.get("waiting", 0.0)
    if state.next_throughput is None:
        state = replace(state, next_throughput=now + DYNAMO_THROUGHPUT_INTERVAL_S, waiting_at_last=waiting_now)
    values: dict[str, float] = {}
    why = []
    if state.next_throughput is not None and now >= state.next_throughput:
        # Dynamo counts the requests its frontend received in the interval: those that started plus
        # the growth of the queue (a saturated fleet starts only what it can carry). The constant
        # predictor forecasts that rate unchanged.
        queued = (waiting_now - state.waiting_at_last) / DYNAMO_THROUGHPUT_INTERVAL_S
        demand = max(sum(r for _, r in samples) / len(samples) + queued, 0.0)
        bound, capacity = throughput_bound(t, demand, isl, osl)
        state = replace(
            state, samples=(), lower_bound=bound, waiting_at_last=waiting_now,
            next_throughput=now + DYNAMO_THROUGHPUT_INTERVAL_S,
        )  # fmt: skip
        values.update(demand=demand, per_replica=capacity)
        why.append(f"throughput: predicted {demand:.3g} req/s over {capacity:.3g} per engine -> bound {bound}")
    # The throughput bound takes effect at the next load decision, as in Dynamo's pipeline.
    if now < state.next_load:
        why.append(f"next load decision at {state.next_load:g} s")
        return Decision(current, current, True, f"Dynamo {'; '.join(why)}", values), state
    state = replace(state, next_load=now + DYNAMO_LOAD_INTERVAL_S)
    ready = min(serving_replicas(window), current)
    if ready < current:
        why.append(f"load: scaling in progress ({ready} of {current} ready), observing only")
        return Decision(current, current, True, f"Dynamo {'; '.join(why)}", values), state
    running, waiting = window.gauges["running"] / ready, window.gauges.get("waiting", 0.0) / ready
    step, said = load_step(t, ready, running, waiting, isl, osl)
    why.append(f"load: {said}")
    wanted = max(current + step, DYNAMO_MIN_ENDPOINT, state.lower_bound)
    desired = bounds(wanted, spec)
    values["lower_bound"] = float(state.lower_bound)
    reason = f"Dynamo {'; '.join(why)}; floor {state.lower_bound}: {current} -> {desired}"
    return Decision(desired, current, True, reason, values), replace(state, replicas=desired)


def dynamo_policy(spec: ScalerSpec, cfg: PlannerConfig | None, name: str = "dynamo") -> Policy:
    """Dynamo's planner with the targets ``cfg``'s SLO sets; ``spec`` gives only the bounds."""
    if cfg is None:
        raise ValueError(f"--policy {name!r} needs the planner's settings: the engine profile and the SLO")
    t = dynamo_targets(cfg)

    def decide(window: WindowStats, spec: ScalerSpec, state: DynamoState, now: float) -> tuple[Decision, DynamoState]:
        return dynamo_decide(window, spec, state, now, t)

    targets = {"ttft_estimate": t.ttft_s * 1000, "itl_estimate": t.itl_s * 1000}
    return Policy(name, spec, decide, DynamoState.initial, targets)
