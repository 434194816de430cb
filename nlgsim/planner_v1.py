"""``planner-v1``: the planner as it was before it took attainment as its feedback, kept as a row of the
workload suite's report (``benchmarks/suite``) until the planner of :mod:`autoscaler.planner` beats it on
both sets; it runs in the simulator only, at the settings it shipped with (:class:`PlannerConfig`'s defaults
and :data:`PLAN_FRACTION`).

Replicas planned from the engine profile, ahead of demand.

HPA-style policies react to a latency that has already moved; by then the load has been too high
for a whole window, and a new pod still needs its start-up time. This policy instead:

1. measures demand in choices per second: choices that got their first token in the window
   (``ttft`` count / span), plus the requests waiting in the pods drained over ``drain_s``;
2. measures the mix from the pods' counters (:func:`observe_mix`): prompt tokens per finished
   request, generated tokens per finished choice, choices per request; until a window has finished
   requests it keeps the last measurement, and before the first one the configured lengths;
3. converts demand into work, in replicas' worth: demand over what one replica carries within the
   planned per-token latency for that mix (:func:`autoscaler.capacity.choices_per_second`), so that a
   rate that rises as outputs shorten is not read as more load;
4. forecasts work ``lead_s`` ahead (one pod start-up) from the trend of the last ``trend_window_s``
   (at least two windows' spans, :func:`trend_span_s`), never below work now: a window's work is its
   average, that of half a window ago, so the forecast reaches half a window further; the slope counts
   only the rise its scatter does not explain (:func:`significant_slope`), and until the work seen spans
   half the trend window (after a start or a restart) there is no trend, its slope being noise;
5. takes the burst level (:func:`burst_level`): the ``burst_quantile`` of the peak work of each
   start-up-long slot over the last ``burst_lookback_s``, what can arrive within one start-up;
6. sizes for both (the larger count says which term set it): the forecast's replicas each at
   ``headroom`` of what it carries, the burst level's at all of it (already a high quantile, it needs no
   margin on top); and the TTFT of the replicas as an M/M/c queue of prefills, each request allowed
   the wait its SLO leaves it (:func:`queue_replicas`: a short output's per-token limit leaves little);
   it scales in only when no burst that needed the last replica (work over what one replica fewer
   carries at ``headroom``) is due within a start-up
   (:func:`scale_in_hold`, from the gaps between the bursts seen) and the TTFT queue would still be
   met by one replica fewer at ``N / (N - 1)`` of the rate (:func:`queue_scale_in_hold`);
7. guards the tail (:func:`tail_guard`): when the window's per-token latency or TTFT at the SLO's
   quantile is over what the SLO allows while every pod is ready and the tail is theirs (requests
   wait now, or they have served the whole window: :func:`tail_replicas`), one replica more, but only when
   the evidence says waiting or the batch made requests slow (:func:`load_evidence`: queue time,
   TTFT beyond what the longest prompt takes alone, slow steps, KV cache nearly full, demand per
   replica above capacity). Requests that miss the SLO even on an idle replica (long prompts, short
   outputs) keep the tail high whatever the replica count; adding pods for them would ratchet up and
   never scale in, so they are reported ("over SLO, not load") instead. A miss it takes as load is
   remembered over the burst lookback (:func:`learned_floor`): a plan at that work or more asks for one
   replica more than the fewest that served the window, from the start of the next burst, where the capacity
   model (mean lengths, arrivals as they come on average) is optimistic for the mix;
8. then the HPA steps of :mod:`autoscaler.decide`: ``stabilize``, ``rate_limit`` and ``bounds``.

Pure: ``decide(window, spec, state, now) -> (Decision, PlannerState)``, no I/O, no clock. The
simulator runs the same code (``nlgsim.planner``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats, nearest_rank
from autoscaler.capacity import choices_per_second, exponential_lengths, slo_batch, step_estimate
from autoscaler.config import ScalerSpec
from autoscaler.decide import Decision, bounds, rate_limit, record_event, serving_replicas, stabilize
from autoscaler.planner import Mix, rising
from autoscaler.planner import PlannerConfig as CurrentConfig
from autoscaler.profile import EngineProfile
from autoscaler.slo import SLO
from nlgsim.policy import Policy

#: Its policy name in the simulator.
NAME = "planner-v1"

#: ``burst_lookback: 0``: the burst level looks back this many start-ups, long enough to hold several
#: gaps between bursts and short enough to let a quieter hour scale in.
BURST_LOOKBACK_STARTUPS = 10

#: The plan fraction it shipped with: the per-token latency planned, as a share of what the SLO allows.
PLAN_FRACTION = 0.6


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
    burst_lookback_s: float = 0.0
    """How far back the burst level looks (:func:`burst_level`); 0: ``BURST_LOOKBACK_STARTUPS`` leads."""
    burst_quantile: float = 0.9
    """Quantile of the start-up-long slots' peak demands that the burst level takes."""

    @property
    def lookback_s(self) -> float:
        return self.burst_lookback_s or BURST_LOOKBACK_STARTUPS * self.lead_s


@dataclass(frozen=True)
class PlannerState:
    replicas: int
    work: tuple[tuple[float, float], ...] = ()
    """The work seen each round, in replicas' worth: the trend's, the burst level's and scale-in's history."""
    mix: Mix | None = None
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    misses: tuple[tuple[float, float, int], ...] = ()
    """The SLO misses the tail guard took as load, over the burst lookback: when, the work then, and one
    replica more than the fewest that served the window (:func:`learned_floor`)."""
    serving: tuple[tuple[float, int], ...] = ()
    """The replicas serving at each round over the last window's span (:func:`tail_replicas`)."""

    @classmethod
    def initial(cls, replicas: int, now: float) -> PlannerState:
        """First seen (a start, a restart, a new leader): the replicas it has stand as a proposal made
        now, so no scale-in comes before a stabilization window, as with :meth:`PolicyState.initial`."""
        return cls(replicas, proposals=((now, replicas),))

    def with_replicas(self, replicas: int) -> PlannerState:
        return replace(self, replicas=replicas)


def trend_span_s(cfg: PlannerConfig, span: float) -> float:
    """How far back the trend is fitted: ``trend_window_s``, and at least two windows of ``span`` s.

    Each round's work is the average over the last ``span`` s, so points less than a span apart share
    data. Over less than two spans every point overlaps every other: they lie close to a line whatever
    the load did, their scatter understates the noise that :func:`significant_slope` tests the slope
    against, and a slope of noise passes, which the lead then multiplies into replicas. Two spans hold
    three windows that do not overlap (now, one span back, two back), the fewest a line's error can be
    told from.
    """
    return max(cfg.trend_window_s, 2 * span)


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


def burst_level(
    history: tuple[tuple[float, float], ...], now: float, lead_s: float, lookback_s: float, q: float
) -> float:
    """What can arrive within one start-up: the ``q`` quantile, over the start-up-long slots of the
    last ``lookback_s`` (counted back from ``now``), of each slot's peak demand; 0 without history.

    A pod asked for now serves from one start-up on, so the demand to plan for is the highest a
    start-up's time brings, not the mean; the quantile over many slots keeps one outlier from
    holding the fleet, and the slots' peaks keep bursts shorter than a slot from averaging away.
    """
    peaks: dict[int, float] = {}
    for t, d in history:
        if now - t < lookback_s:
            slot = int((now - t) // lead_s)
            peaks[slot] = max(peaks.get(slot, 0.0), d)
    if not peaks:
        return 0.0
    return nearest_rank(q, sorted(peaks.values()))


def erlang_c(servers: int, offered: float) -> float:
    """Erlang C: the probability that an arrival waits, ``servers`` servers at ``offered`` erlangs."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocked = 1.0  # Erlang B by its recursion, which stays in [0, 1] for any number of servers
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    return servers * blocked / (servers - offered * (1 - blocked))


def prefill_service_s(cfg: PlannerConfig, prompt: float, batch: int, tokens: float) -> float:
    """Mean seconds a replica spends bringing one prompt to its first token while decoding ``batch``
    sequences, in a mix whose mean prompt is ``prompt`` tokens (:func:`autoscaler.capacity.exponential_lengths`):
    each prefill chunk shares a step with the batch's decode (chunked prefill)."""
    profile = cfg.profile
    decode = profile.decode_step_s(batch, prompt + tokens / 2)
    lengths = exponential_lengths(profile, prompt)
    each = (profile.prefill_time_s(n) + math.ceil(n / profile.prefill_chunk_tokens) * decode for n in lengths)
    return sum(each) / len(lengths)


def wait_budget_s(slo: SLO, tokens: int, step_s: float) -> float:
    """The TTFT a choice of ``tokens`` tokens can take and still meet every limit ``slo`` names, its
    other tokens coming one decode step (``step_s``) apart: the TTFT limit; the per-token latency,
    which is the whole latency over the tokens, so a short output's is mostly its TTFT; the request
    latency, less its decode."""
    limits = []
    if "ttft" in slo.attain:
        limits.append(slo.ttft_s)
    if "pertoken" in slo.attain:
        limits.append(tokens * slo.per_token_s - (tokens - 1) * step_s)
    if "request" in slo.attain:
        limits.append(slo.request_s - (tokens - 1) * step_s)
    return min(limits)


def queue_replicas(cfg: PlannerConfig, rate: float, mix: Mix, limit: int) -> int:
    """The fewest replicas (up to ``limit``) whose TTFT meets the SLO at ``rate`` requests a second.

    Each replica prefills one prompt at a time, so the replicas are an M/M/c queue of prefills
    (Erlang C): a request waits past ``w`` with probability ``C * exp(-(c / S - rate) * w)``, and its
    TTFT is that wait plus its own prefill ``S``. What a request may wait is its TTFT budget
    (:func:`wait_budget_s`) less ``S``, and that depends on its output: a choice of a few tokens has
    little more than the per-token limit times its tokens for its first one. The pods measure only the
    mean output, so the outputs are taken as exponential around it, as the prompts are
    (:func:`autoscaler.capacity.exponential_lengths`); those with no wait to spare are infeasible and do
    not count, as the SLO's attainment leaves them out. ``S`` and the decode steps after the first token
    are those of the batch each of ``c`` replicas runs at its share of ``rate`` (:func:`running_batch`),
    not of the fullest batch the per-token target allows: a lightly loaded replica steps fast. The
    count is the fewest ``c`` whose probability of waiting past the budget, averaged over the outputs,
    is within ``1 - target``.
    """
    if rate <= 0:
        return 0
    profile = cfg.profile
    most = slo_batch(profile, cfg.per_token_target_s, mix.prompt_tokens, mix.output_tokens, mix.choices)
    # The outputs that meet the SLO alone on an idle replica (a batch of one); the others are infeasible.
    lengths = exponential_lengths(profile, mix.output_tokens)
    lightest = prefill_service_s(cfg, mix.prompt_tokens, 1, mix.output_tokens)
    outputs = [k for k, slack in zip(lengths, _slacks(cfg, mix, 1, lightest, lengths), strict=True) if slack > 0]
    if not outputs:
        return 0  # the mix's requests miss the SLO even alone: no replica count helps them
    allowed = (1 - cfg.slo.target) * len(outputs)
    # Fewer replicas than the prefills' load at the lightest batch would saturate at any batch.
    c = max(math.floor(rate * lightest), 0) + 1
    while c < limit:
        batch = running_batch(cfg, rate * mix.choices / c, mix, most)
        service = prefill_service_s(cfg, mix.prompt_tokens, batch, mix.output_tokens)
        if rate * service < c:
            waits = erlang_c(c, rate * service)
            decay = c / service - rate
            # An output with no wait to spare at this batch misses whenever it waits at all.
            slacks = _slacks(cfg, mix, batch, service, outputs)
            missed = sum(math.exp(-decay * slack) if slack > 0 else 1.0 for slack in slacks)
            if waits * missed <= allowed:
                return c
        c += 1
    return limit


def _slacks(cfg: PlannerConfig, mix: Mix, batch: int, service: float, outputs: list[int]) -> list[float]:
    """What a choice of each of ``outputs`` tokens may wait beyond its prefill ``service`` on a replica
    running ``batch``."""
    step = step_estimate(cfg.profile, batch, mix.prompt_tokens, mix.output_tokens, mix.choices)
    return [wait_budget_s(cfg.slo, k, step) - service for k in outputs]


def running_batch(cfg: PlannerConfig, choices_per_s: float, mix: Mix, most: int) -> int:
    """The sequences a replica runs at ``choices_per_s``: by Little's law, the rate times how long a
    choice decodes, at the steps that batch makes (a few rounds of that fixed point), at most ``most``."""
    batch = 1
    for _ in range(8):
        step = step_estimate(cfg.profile, batch, mix.prompt_tokens, mix.output_tokens, mix.choices)
        nxt = min(max(math.ceil(choices_per_s * mix.output_tokens * step), 1), most)
        if nxt == batch:
            break
        batch = nxt
    return batch


def scale_in_hold(
    history: tuple[tuple[float, float], ...], now: float, cfg: PlannerConfig, current: int
) -> str:  # fmt: skip
    """Why ``current`` replicas must stay ("" when one may go): a burst that ``current - 1`` replicas
    would not carry at ``headroom`` is expected within a start-up.

    ``history`` is the work seen, in replicas' worth. Its excursions over ``current - 1`` replicas at
    the headroom the forecast is sized with are the bursts that needed the last replica: what one
    replica carries is modelled from mean lengths and is optimistic for a mix's spread, so the replicas
    left are held to the margin a scale-out would have given them, not run full. The gaps between the
    bursts' starts say when the next is due. The replica stays until the ``burst_quantile`` of those
    gaps (one start-up with a single burst seen) has passed since the last one: a pod removed sooner is
    likely wanted back before a new one is ready.
    """
    if current <= 1:
        return ""
    level = (current - 1) * cfg.headroom
    starts: list[float] = []
    last = None
    over_before = False
    for t, d in history:
        over = d > level
        if over and not over_before:
            starts.append(t)
        if over:
            last = t
        over_before = over
    if last is None:
        return ""
    gaps = sorted(b - a for a, b in zip(starts, starts[1:], strict=False))
    due = nearest_rank(cfg.burst_quantile, gaps) if gaps else 0.0
    hold = max(due, cfg.lead_s)
    if now - last >= hold:
        return ""
    return (
        f"{now - last:.0f} s after work over {level:.3g} replicas' worth ({current - 1} at {cfg.headroom:g}); "
        f"next burst due within {hold:.0f} s ({len(starts)} bursts seen)"
    )


def queue_scale_in_hold(cfg: PlannerConfig, rate: float, mix: Mix, current: int, limit: int) -> str:
    """Why ``current`` replicas must stay for the first token ("" when one may go): the TTFT queue
    (:func:`queue_replicas`) at ``current / (current - 1)`` times ``rate`` needs them all.

    Near the count the queue asks for, its answer turns on small changes of the measured rate and mix:
    a replica let go on one round is asked back on the next, and the requests between meet one replica
    fewer for a whole start-up. Kept only while the remaining replicas would carry the load the one
    leaving carries as well, a replica goes once the queue is clear of that margin."""
    if current <= 1 or rate <= 0:
        return ""
    heavier = queue_replicas(cfg, rate * current / (current - 1), mix, limit)
    if heavier < current:
        return ""
    return f"the TTFT queue at {current}/{current - 1} of the planned rate needs {heavier}"


def longest_idle_ttft_s(profile: EngineProfile) -> float:
    """TTFT of the longest prompt the model takes, alone on an idle replica: no request's TTFT is
    longer unless it waited (behind other prefills or for a batch slot)."""
    return profile.prefill_time_s(profile.max_context)


def load_evidence(
    window: WindowStats, cfg: PlannerConfig, demand: float, per_replica: float
) -> list[str]:  # fmt: skip
    """What says that waiting or batch size, not the requests themselves, made the tail slow.

    A request the profile says is slow even alone (a long prompt with a one-token output) keeps the
    per-token tail high at any replica count; it shows neither in the time requests waited nor in
    the time between tokens. So the evidence is: time spent queued (Triton's queue histogram where
    the pods export it), a TTFT tail longer than the longest prompt takes alone (only waiting makes
    it so), a tail of inter-token latency over the per-token allowance (steps slowed by the batch),
    a nearly full KV cache, or demand per replica over capacity. Requests waiting at one scrape are
    not: in a burst some always are.
    """
    evidence = []
    idle = longest_idle_ttft_s(cfg.profile)
    queue = window.latency("queue")
    if queue.count > 0 and math.isfinite(queue.p99) and queue.p99 > idle:
        evidence.append(f"queue time p99 {queue.p99 * 1000:.3g} ms")
    ttft = window.latency("ttft").p99
    if math.isfinite(ttft) and ttft > idle:
        evidence.append(f"TTFT p99 {ttft * 1000:.3g} ms over the longest prompt's {idle * 1000:.3g} ms alone")
    itl = window.latency("itl").p99
    allowed = cfg.slo.per_token_allowed(cfg.long_output_tokens)
    if math.isfinite(itl) and itl > allowed:
        evidence.append(f"inter-token p99 {itl * 1000:.3g} ms over {allowed * 1000:.3g} ms")
    kv = window.gauges.get("kv_usage", 0.0)
    if kv >= cfg.kv_usage_high:
        evidence.append(f"KV cache {kv:.0%} used")
    serving = serving_replicas(window)
    if serving > 0 and demand / serving > per_replica:
        evidence.append(f"demand {demand / serving:.3g}/s per replica over capacity {per_replica:.3g}/s")
    return evidence


def remember_miss(
    misses: tuple[tuple[float, float, int], ...], now: float, cfg: PlannerConfig, work: float, serving: int, load: bool
) -> tuple[tuple[float, float, int], ...]:  # fmt: skip
    """The misses within the burst lookback, with this round's when the tail guard found load (``load``):
    ``serving`` replicas missed the SLO at ``work``, so it needed one more at least."""
    kept = tuple(m for m in misses if m[0] > now - cfg.lookback_s)
    return kept + ((now, work, serving + 1),) if load and serving > 0 else kept


def learned_floor(misses: tuple[tuple[float, float, int], ...], level: float) -> tuple[int, float]:
    """The most replicas a remembered miss needed at a work no higher than ``level``, and that work
    ((0, 0) when none applies).

    The capacity model reads the mix's mean lengths and takes arrivals as they come on average; a mix
    whose requests come in clumps, or whose short outputs after long prompts leave little time for the
    first token, needs more replicas for the same work than it says. The tail guard finds that out one
    replica at a time, and only while every replica serves; remembered, a miss sizes the next burst as
    high from its start. A miss says only that one replica more was needed at that work, so it asks for
    no more than that, and only at that work or above: a miss in a light window (one clump) holds no
    count at a heavier one beyond what it showed, and none at a lighter one.
    """
    applies = [(n, w) for _, w, n in misses if w <= level]
    return max(applies, default=(0, 0.0))


def tail_replicas(served: tuple[tuple[float, int], ...], waiting: float) -> int:
    """The replicas a window's tail is evidence about (``served``: the replicas serving at each round of
    the window, the last now). While requests wait now, those serving now: the backlog is theirs to
    clear. Otherwise the fewest that served at any round: right after a scale-up the window still holds
    what fewer replicas served, and taken as the new count's, its tail would ask for one more again and
    be remembered as the new count falling short."""
    return served[-1][1] if waiting > 0 else min(n for _, n in served)


def tail_guard(window: WindowStats, cfg: PlannerConfig, demand: float, per_replica: float) -> tuple[bool, str]:
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
    return False, f"{', '.join(over)}: over SLO, not load (no queueing, batch, KV or demand over capacity)"


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
    per_replica = choices_per_second(
        cfg.profile, cfg.per_token_target_s, mix.prompt_tokens, mix.output_tokens, mix.choices
    )
    # In replicas' worth of work: a rate that rises as the outputs shorten is not more load.
    work = demand / per_replica
    fitted = trend_span_s(cfg, window.span)
    kept = max(fitted, cfg.lookback_s)
    history = tuple((t, w) for t, w in state.work if t > now - kept) + ((now, work),)
    recent = tuple((t, w) for t, w in history if t > now - fitted)
    # The window's work is its average, which stands for its middle, span / 2 ago: the forecast
    # reaches from there to one start-up ahead. A slope over less than half the trend window (after a
    # start or a restart) is mostly noise, which the lead multiplies: no trend until then.
    spanned = recent[-1][0] - recent[0][0] >= fitted / 2
    slope = rising(recent, window.span) if spanned else 0.0
    forecast = max(work, work + slope * (cfg.lead_s + window.span / 2))
    burst = burst_level(history, now, cfg.lead_s, cfg.lookback_s, cfg.burst_quantile)
    # The headroom keeps the forecast's replicas below full; the burst level is already a high quantile
    # of the peaks, so its replicas may run full (at the planned per-token latency) while it lasts.
    by_forecast = math.ceil(forecast / cfg.headroom) if forecast > 0 else 0
    by_burst = math.ceil(burst) if burst > 0 else 0
    throughput = max(by_forecast, by_burst)
    planned = max(forecast, burst) * per_replica
    queued = queue_replicas(cfg, planned / mix.choices, mix, spec.max_deployment_count)
    want, term = (queued, "TTFT queue") if queued > throughput else (throughput, "throughput")
    source = "burst" if by_burst > by_forecast else "forecast"
    why = (
        f"demand {demand:.3g}/s, {work:.3g} replicas' worth at {per_replica:.3g}/s each, planned "
        f"{max(forecast, burst):.3g} ({source}); {want} by {term}"
    )
    add, tail = tail_guard(window, cfg, demand, per_replica)
    served = tuple((t, n) for t, n in state.serving if t > now - window.span) + ((now, serving_replicas(window)),)
    accountable = tail_replicas(served, waiting)
    # Misses of earlier rounds only: this round's is the tail guard's to answer, with its evidence.
    remembered = tuple(m for m in state.misses if m[0] > now - cfg.lookback_s)
    learned, at = learned_floor(remembered, max(forecast, burst))
    # What is held for the burst lookback claims no more than the whole window shows: the fewest that
    # served it fell short. Requests waiting now say the count serving now is short too, which one
    # replica more answers; some wait in any burst, so they make no lasting lesson.
    misses = remember_miss(state.misses, now, cfg, work, min(n for _, n in served), add)
    if learned > want:
        want = learned
        why += f"; {learned} learned: the SLO missed at {at:.3g} replicas' worth on {learned - 1}"
    if tail and want <= current and accountable >= current:
        want = current + 1 if add else want
        why += f"; {tail}"
    if want < current:
        hold = scale_in_hold(history, now, cfg, current)
        hold = hold or queue_scale_in_hold(cfg, planned / mix.choices, mix, current, spec.max_deployment_count)
        if hold:
            want = current
            why += f"; held: {hold}"
    stabilized, proposals = stabilize(state.proposals, want, current, now, spec.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, spec.scale_up, spec.scale_down)
    desired = bounds(limited, spec)
    values = {
        "demand": demand, "forecast": forecast, "burst": burst, "planned": planned, "per_replica": per_replica,
        "forecast_replicas": by_forecast, "burst_replicas": by_burst, "throughput_replicas": throughput,
        "queue_replicas": queued, "learned_replicas": learned,
        "prompt_tokens": mix.prompt_tokens, "output_tokens": mix.output_tokens, "choices": mix.choices,
    }  # fmt: skip
    q = cfg.slo.window_quantile
    for family in ("pertoken", "ttft"):
        value = float(getattr(window.latency(family), q))
        if math.isfinite(value):
            values[f"{family}_{q}"] = value * 1000
    events = record_event(state.events, now, current, desired, spec)
    new_state = PlannerState(desired, history, mix, proposals, events, misses, served)
    return Decision(desired, current, True, f"{why}: {current} -> {desired}", values), new_state


def planner_decide_fn(
    cfg: PlannerConfig,
) -> Callable[[WindowStats, ScalerSpec, PlannerState, float], tuple[Decision, PlannerState]]:
    """``planner_decide`` bound to ``cfg``: the ``decide(window, spec, state, now)`` of a policy."""

    def decide(window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float) -> tuple[Decision, PlannerState]:
        return planner_decide(window, spec, state, now, cfg)

    return decide


def planner_v1_policy(spec: ScalerSpec, current: CurrentConfig, name: str = NAME) -> Policy:
    """The old planner on the workload the current one's settings ``current`` describe (the SLO, the lengths
    it assumes until the pods have measured them, the lead time), at the settings it shipped with."""
    cfg = PlannerConfig(
        profile=current.profile,
        per_token_target_s=current.per_token_limit_s * PLAN_FRACTION,
        slo=current.slo,
        prompt_tokens=current.prompt_tokens,
        output_tokens=current.output_tokens,
        long_output_tokens=current.long_output_tokens,
        lead_s=current.lead_s,
    )
    q = cfg.slo.window_quantile
    targets = {
        f"pertoken_{q}": cfg.slo.per_token_allowed(cfg.long_output_tokens) * 1000,
        f"ttft_{q}": cfg.slo.ttft_s * 1000,
    }
    return Policy(name, spec, planner_decide_fn(cfg), PlannerState.initial, targets)
