"""The planner (``scaler.type: planner``): replicas sized from the work arriving and the capacity the
pods have shown, with the SLO's attainment as the feedback.

Each round, from the window's statistics:

1. **Work** (:func:`measure_work`): demand in choices per second (those that got their first token in
   the window, over its span, plus the requests waiting, drained over one start-up), over what one
   replica carries at the SLO's per-token limit for the window's mix (prompt and output tokens, choices:
   :func:`observe_mix`) according to the engine profile (:func:`autoscaler.capacity.choices_per_second`):
   the work, in *profiled replicas' worth*; forecast one start-up ahead from its rise, where the rise is
   more than its scatter (:func:`forecast`); and the *peak work*, the larger of the window's and of its
   last round's alone, where a burst shorter than the window shows at its own rate.
2. **Attainment** (:func:`miss_share`): the share of the window's choices over a limit the SLO names,
   read from the latency histograms at the limits. The window is *short* (:func:`short_of_target`) when
   its misses exceed what the target allows by more than chance gives for that many requests.
3. **Capacity, learned** (:func:`learn_capacity`): what one replica carries within the SLO, as a multiple of
   the profile's figure, starts at the profile's 1. A short window lowers it to what the replicas carried
   within the SLO at the highest peak work its requests arrived into (per replica, less the share missed),
   taken one window later, once that load is known. Windows that meet the target with no replica more
   than the plan asks for (by the work or the burst floor) raise it by :data:`RISE` a start-up: it finds
   out when the traffic lets a replica carry more, and a short window sets it back.
4. **Size** (:func:`plan`): the work forecast over ``headroom`` of the learned capacity, or the *burst floor*
   over all of it, the larger: the 90th percentile, over the start-up-long slots remembered, of each slot's
   highest peak work, what arrives within one start-up, which a pod asked for then would not catch. The
   floor trades GPU-seconds for attainment where bursts come faster than a start-up; the reason says when
   it sets the count.
5. **Steps judged by their effect** (:func:`judge_trial`): a scale-up that a short window asked for is a
   trial. Once the new count has served a whole window, a trial that did not close half the gap between
   the misses and the target did not help: the capacity it cost is given back, the misses left are
   remembered as misses more replicas do not fix (the target allows them while they last), and the
   count goes back after the stabilization window. Requests that miss even on an idle replica (a long prompt before
   a one-token output) or that arrive in clumps no count separates do not ratchet the fleet up.
6. HPA's steps of :mod:`autoscaler.decide`: ``stabilize``, ``rate_limit`` and ``bounds``.

What it remembers of the work seen and of misses more replicas did not fix is forgotten after
:data:`MEMORY_STARTUPS` start-ups. Pure: ``decide(window, spec, state, now) ->
(Decision, PlannerState)``, no I/O, no clock. The simulator runs the same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from autoscaler.aggregate import WindowStats, nearest_rank
from autoscaler.capacity import choices_per_second
from autoscaler.config import PlannerSpec, ScalerSpec
from autoscaler.decide import Decision, bounds, rate_limit, record_event, serving_replicas, stabilize
from autoscaler.profile import EngineProfile
from autoscaler.slo import SLO

#: What the planner remembers spans this many start-ups: long enough to hold several bursts and the
#: gaps between them, short enough that a quieter hour or a changed mix is not planned by an old one.
MEMORY_STARTUPS = 10
#: The burst floor's quantile of the start-up-long slots' peaks: one outlier among the ten slots of the
#: memory does not hold the fleet; a burst that recurs does.
BURST_QUANTILE = 0.9
#: Standard deviations of a binomial count of misses beyond what the target allows before a window is
#: short (about 98% one-sided): a window of 100 requests at a 99% target is short from 3 misses, not 2.
CHANCE_Z = 2.0
#: One short window cuts the learned capacity by at most this share: requests already late when a burst
#: ends would read as a replica carrying almost nothing, and a few misses on a lightly loaded replica (a
#: cold start, a clump) as a replica carrying what little it had; the next short window cuts again.
MAX_CUT = 0.5
#: Standard errors a rise of the work must exceed to count as a trend (about 98% one-sided): the forecast
#: multiplies the slope by a start-up, so a slope of noise would size the fleet.
TREND_Z = 2.0
#: How fast the learned capacity rises while windows meet the target at the plan: this share a start-up.
#: Slow against what a short window takes away, so that the fleet probes its edge rarely.
RISE = 0.01
#: The mix planned before the pods' counters have measured one (tokens of a prompt, of an output).
DEFAULT_PROMPT_TOKENS = 256.0
DEFAULT_OUTPUT_TOKENS = 128.0


@dataclass(frozen=True)
class PlannerConfig:
    profile: EngineProfile
    slo: SLO
    lead_s: float
    """One pod start-up (and a round): how long a pod asked for now takes to serve."""
    headroom: float = PlannerSpec.headroom
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS
    """The mix until the pods' counters have measured one: mean prompt tokens of a request ..."""
    output_tokens: float = DEFAULT_OUTPUT_TOKENS
    """... and mean generated tokens of a choice."""
    long_output_tokens: float = DEFAULT_OUTPUT_TOKENS
    """A long choice's tokens: a request-latency limit spread over them is a per-token one."""

    @property
    def memory_s(self) -> float:
        return MEMORY_STARTUPS * self.lead_s

    @property
    def per_token_limit_s(self) -> float:
        return self.slo.per_token_allowed(self.long_output_tokens)


def planner_config(spec: PlannerSpec, profile: EngineProfile) -> PlannerConfig:
    """The live planner's settings from ``scaler.planner`` and the profile it names."""
    slo = SLO(
        ttft_s=spec.ttft_slo / 1000.0,
        per_token_s=spec.per_token_slo / 1000.0,
        attain=("pertoken", "ttft"),
        target=spec.slo_percentile,
    )
    return PlannerConfig(profile, slo, spec.startup or profile.startup_s, spec.headroom)


@dataclass(frozen=True)
class Mix:
    """Mean prompt tokens of a request, generated tokens of a choice, choices of a request."""

    prompt_tokens: float
    output_tokens: float
    choices: float
    measured: bool = False


@dataclass(frozen=True)
class Trial:
    """A scale-up a short window asked for, until a window served by its count says whether it helped."""

    since: float
    before: int
    after: int
    missed: float
    """The share missed that asked for it."""
    load: float
    """Work per replica then, in profiled replicas' worth."""
    capacity: float
    """The learned capacity before the short window that asked for it: restored if it did not help."""


@dataclass(frozen=True)
class Shortfall:
    """Short windows seen since ``since``, waiting one window for the load their requests arrived into: a
    window's average rises for a whole window after a burst begins, while its misses show at once."""

    since: float
    first: float
    """When the first of them was seen."""
    missed: float
    """The most any of them missed."""
    fewest: int
    """The fewest replicas that served them."""


@dataclass(frozen=True)
class PlannerState:
    replicas: int
    work: tuple[tuple[float, float], ...] = ()
    """The peak work of each round, in profiled replicas' worth (the burst floor's history)."""
    averages: tuple[tuple[float, float], ...] = ()
    """The window's work of each round over the trend's span (:func:`forecast`)."""
    mix: Mix | None = None
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    capacity: float = 1.0
    """What one replica carries within the SLO, as a multiple of the profile's figure (:func:`learn_capacity`)."""
    unfixed: tuple[tuple[float, float], ...] = ()
    """Trials that did not help: when, and the share missed beyond the target that they left."""
    trial: Trial | None = None
    pending: Shortfall | None = None
    serving: tuple[tuple[float, int], ...] = ()
    """The replicas serving at each round over the last window's span."""

    @classmethod
    def initial(cls, replicas: int, now: float) -> PlannerState:
        """First seen (a start, a restart, a new leader): the replicas it has stand as a proposal made
        now, so no scale-in comes before a stabilization window, as with :meth:`PolicyState.initial`."""
        return cls(replicas, proposals=((now, replicas),))

    def with_replicas(self, replicas: int) -> PlannerState:
        return replace(self, replicas=replicas)


def observe_mix(window: WindowStats, last: Mix | None, cfg: PlannerConfig) -> Mix:
    """The window's mix when requests finished in it (the pods' counters), else the last one known.

    Choices per request come from the histograms (finished choices / finished requests); prompt
    tokens are counted at admission and generated tokens as they stream, so over a window each
    ratio is that of the requests that went through it.
    """
    before = last or Mix(cfg.prompt_tokens, cfg.output_tokens, 1.0)
    requests = window.latency("request").count
    choices = max(window.latency("pertoken").count / requests, 1.0) if requests > 0 else before.choices
    finished = window.counters.get("finished", 0.0)
    prompt = window.counters.get("prompt_tokens")
    generated = window.counters.get("generation_tokens")
    if finished <= 0 or prompt is None or generated is None:
        return replace(before, choices=choices)
    return Mix(max(prompt / finished, 1.0), max(generated / (finished * choices), 1.0), choices, True)


def measure_work(window: WindowStats, cfg: PlannerConfig, mix: Mix) -> tuple[float, float, float, float]:
    """Demand (choices/s), what one replica carries of this mix by the profile (choices/s), the work (their
    ratio: profiled replicas' worth), and the peak work: the larger of the window's and of its last round's
    alone (``window.recent``), where a burst shorter than the window shows at its own rate. A rate that
    rises as outputs shorten is not more load."""
    backlog = window.gauges.get("waiting", 0.0) * mix.choices / cfg.lead_s
    demand = window.latency("ttft").count / window.span + backlog
    per_replica = choices_per_second(
        cfg.profile, cfg.per_token_limit_s, mix.prompt_tokens, mix.output_tokens, mix.choices
    )
    recent = window.recent
    latest = recent.latency("ttft").count / recent.span + backlog if recent and recent.span > 0 else demand
    return demand, per_replica, demand / per_replica, max(demand, latest) / per_replica


#: The latency histogram each limit of an SLO is read from, and the limit.
_LIMITS: dict[str, tuple[str, Callable[[SLO], float]]] = {
    "request": ("request", lambda slo: slo.request_s),
    "ttft": ("ttft", lambda slo: slo.ttft_s),
    "pertoken": ("pertoken", lambda slo: slo.per_token_s),
}


def miss_share(window: WindowStats, slo: SLO) -> tuple[float, float]:
    """The share of the window's choices over a limit ``slo`` names, and how many choices it is of (NaN
    and 0 without observations). Over several limits the shares add up: a choice late on two counts is
    counted twice, so this errs towards a miss, never away from one."""
    total, count = 0.0, 0.0
    for name in slo.attain:
        family, limit = _LIMITS[name]
        stats = window.latency(family)
        share = stats.share_over(limit(slo))
        if stats.count <= 0 or math.isnan(share):
            continue
        total += share
        count = max(count, stats.count)
    return (min(total, 1.0), count) if count > 0 else (math.nan, 0.0)


def short_of_target(missed: float, count: float, allowed: float) -> bool:
    """Whether ``missed`` of ``count`` choices exceeds the ``allowed`` share by more than chance: the
    misses over ``allowed * count`` plus :data:`CHANCE_Z` binomial standard deviations."""
    if math.isnan(missed) or count <= 0:
        return False
    expected = allowed * count
    return missed * count > expected + CHANCE_Z * math.sqrt(expected * (1 - allowed)) + 1e-9


def learn_capacity(capacity: float, shortfall: float | None, at_plan: bool, elapsed: float, lead_s: float) -> float:
    """The learned capacity after a round: down to a ``shortfall`` (what replicas carried within the SLO in
    a short window) when there is one below it, by :data:`MAX_CUT` at most; else up by :data:`RISE` a
    start-up over the ``elapsed`` s since the last round when the window met the target ``at_plan`` (no
    replica more than the plan asks for)."""
    if shortfall is not None:
        return max(min(capacity, shortfall), capacity * (1 - MAX_CUT))
    return capacity * (1 + RISE) ** (elapsed / lead_s) if at_plan else capacity


def burst_level(history: tuple[tuple[float, float], ...], now: float, lead_s: float) -> float:
    """What can arrive within one start-up: the :data:`BURST_QUANTILE` of the peak work of each start-up-long
    slot of ``history`` (counted back from ``now``); 0 without history."""
    peaks: dict[int, float] = {}
    for t, w in history:
        slot = int((now - t) // lead_s)
        peaks[slot] = max(peaks.get(slot, 0.0), w)
    return nearest_rank(BURST_QUANTILE, sorted(peaks.values())) if peaks else 0.0


def rising(points: tuple[tuple[float, float], ...], span: float) -> float:
    """The least-squares slope of the windows' work ``points`` less :data:`TREND_Z` standard errors, or 0
    when that is not positive: the rise their own scatter does not explain. Windows ``span`` long taken
    every round overlap, so the error counts one measurement per ``span`` of the time they cover."""
    n = len(points)
    if n < 3:
        return 0.0
    mt, mv = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    slope = sum((t - mt) * (v - mv) for t, v in points) / var if var > 0 else 0.0
    if slope <= 0:
        return 0.0
    residual = sum((v - mv - slope * (t - mt)) ** 2 for t, v in points)
    independent = (points[-1][0] - points[0][0]) / span + 1.0
    return max(slope - TREND_Z * math.sqrt(residual / (var * max(independent - 2.0, 1.0))), 0.0)


def forecast(averages: tuple[tuple[float, float], ...], span: float, lead_s: float) -> float:
    """The work one start-up ahead: the last window's, plus its significant rise (:func:`rising`) over the
    start-up and the half window its average lags by. Fitted over the last start-up and at least two
    windows (over less, every window shares most of its requests with every other, and their scatter says
    nothing of the noise), and only once the rounds cover half of that (after a start, a slope is noise)."""
    fitted = max(lead_s, 2 * span)
    now, work = averages[-1]
    points = tuple((t, w) for t, w in averages if t > now - fitted)
    slope = rising(points, span) if now - points[0][0] >= fitted / 2 else 0.0
    return work + slope * (lead_s + span / 2)


def plan(work: float, burst: float, capacity: float, headroom: float) -> tuple[int, str]:
    """Replicas for ``work`` with each replica at ``headroom`` of ``capacity`` (profiled replicas' worth), or
    for the ``burst`` level at all of it (already the peak of what a start-up brings, it needs no margin on
    top), the larger, and which of the two set it."""
    by_work, by_burst = math.ceil(work / (capacity * headroom) - 1e-9), math.ceil(burst / capacity - 1e-9)
    if by_burst > by_work:
        return by_burst, f"the burst floor ({burst:.3g} within a start-up)"
    return by_work, "the work a start-up ahead"


def judge_trial(trial: Trial, missed: float, short: bool, load: float, allowed: float, backlog: bool) -> bool | None:
    """Whether a trial helped, judged on a window its count served whole: True (met the target, or closed
    at least half the gap), False (did not), None (cannot tell: more work per replica than before, or a
    ``backlog``, the overload that asked for it still being served)."""
    if not short or missed <= (trial.missed + allowed) / 2:
        return True
    return None if load > trial.load or backlog else False


def planner_decide(
    window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float, cfg: PlannerConfig
) -> tuple[Decision, PlannerState]:
    current = state.replicas
    if window.pods == 0 or window.span <= 0:
        held = bounds(current, spec)
        return Decision(held, current, held != current, f"no data; holding {current} replicas"), state
    keep = now - cfg.memory_s
    mix = observe_mix(window, state.mix, cfg)
    demand, per_replica, work, peak = measure_work(window, cfg, mix)
    history = tuple((t, w) for t, w in state.work if t > keep) + ((now, peak),)
    fitted = now - max(cfg.lead_s, 2 * window.span)
    averages = tuple((t, w) for t, w in state.averages if t > fitted) + ((now, work),)
    ahead = forecast(averages, window.span, cfg.lead_s)
    serving = tuple((t, n) for t, n in state.serving if t > keep) + ((now, serving_replicas(window)),)
    # A window's outcomes belong to the load its requests arrived into and the replicas that served them:
    # over its span, and as far again back as its slowest requests took (they finished in it, late).
    late = window.latency("request").p99
    since = now - window.span - (late if math.isfinite(late) else 0.0)
    loaded = max(w for t, w in history if t >= since)
    fewest = min(n for t, n in serving if t >= since)
    most = max(n for t, n in serving if t > now - window.span)
    unfixed = tuple(u for u in state.unfixed if u[0] > keep)
    # A trial stands while its step does (the rate limits may bring it in parts), and is judged on what
    # of it serves.
    trial = state.trial if state.trial and state.trial.since > keep and current > state.trial.before else None
    pending = state.pending
    capacity = state.capacity
    target_misses = 1 - cfg.slo.target
    floor = max((m for _, m in unfixed), default=0.0)
    allowed = target_misses + floor
    missed, count = miss_share(window, cfg.slo)
    short = short_of_target(missed, count, allowed)
    if floor > 0 and not short and short_of_target(missed, count, target_misses):
        unfixed += ((now, min(missed - target_misses, floor)),)  # still there: remembered from now
    notes = []
    shortfall: float | None = None
    if trial is not None and fewest >= min(trial.after, current):
        # Requests waiting, or finishing later than a window after they came: an overload's backlog.
        backlog = window.gauges.get("waiting", 0.0) > 0 or not late <= window.span
        helped = judge_trial(trial, missed, short, loaded / fewest, allowed, backlog)
        if helped is False:
            capacity = max(capacity, trial.capacity)
            unfixed += ((now, missed - target_misses),)
            floor = max(floor, missed - target_misses)
            notes.append(
                f"{trial.before} -> {trial.after} did not raise attainment ({1 - trial.missed:.2%} -> "
                f"{1 - missed:.2%}): {floor:.2%} missed beyond the target taken as what more replicas do not fix"
            )
        trial = None
    elif short and trial is None and fewest > 0:
        before = pending or Shortfall(since, now, missed, fewest)
        pending = replace(before, missed=max(before.missed, missed), fewest=min(before.fewest, fewest))
    asked: tuple[float, float] | None = None
    if pending is not None and now - pending.first >= window.span:
        # At most what the replicas carried within the SLO at the highest load their requests met.
        asked = (pending.missed, max(w for t, w in history if t >= pending.since) / pending.fewest)
        shortfall = asked[1] * (1 - max(pending.missed - floor, 0.0))
        pending = None
    elapsed = now - state.serving[-1][0] if state.serving else 0.0
    burst = burst_level(history, now, cfg.lead_s)
    # The window met the target with no replica more than the plan asks for (by the work or the floor).
    at_plan = not short and not math.isnan(missed) and most <= plan(work, burst, capacity, cfg.headroom)[0]
    learned = learn_capacity(capacity, shortfall, at_plan, elapsed, cfg.lead_s)
    why_capacity = f"{learned:.3g}x the profile's" + (
        f" (a short window: at most {shortfall:.3g})" if shortfall is not None and shortfall < capacity else ""
    )
    want, term = plan(ahead, burst, learned, cfg.headroom)
    if asked is not None and learned < capacity and want > current:
        trial = Trial(now, current, want, *asked, capacity)
    attained = "no requests finished" if math.isnan(missed) else f"attainment {1 - missed:.2%}"
    why = (
        f"demand {demand:.3g}/s, {work:.3g} profiled replicas' worth ({per_replica:.3g}/s each), {ahead:.3g} a "
        f"start-up ahead; capacity "
        f"{why_capacity}; {want} by {term}; {attained} (target {cfg.slo.target:.2%}"
        + (f", {floor:.2%} more allowed: misses more replicas did not fix" if floor > 0 else "")
        + (", short" if short else "")
        + ")"
        + "".join(f"; {n}" for n in notes)
    )
    stabilized, proposals = stabilize(state.proposals, want, current, now, spec.stabilization_window)
    limited = rate_limit(stabilized, current, state.events, now, spec.scale_up, spec.scale_down)
    desired = bounds(limited, spec)
    values = {
        "demand": demand, "work": work, "per_replica": per_replica, "capacity": learned, "burst": burst,
        "forecast": ahead, "planned": max(ahead, burst) * per_replica, "missed": missed, "allowed": allowed,
        "prompt_tokens": mix.prompt_tokens, "output_tokens": mix.output_tokens, "choices": mix.choices,
    }  # fmt: skip
    q = cfg.slo.window_quantile
    for family in ("pertoken", "ttft"):
        value = float(getattr(window.latency(family), q))
        if math.isfinite(value):
            values[f"{family}_{q}"] = value * 1000
    events = record_event(state.events, now, current, desired, spec)
    new_state = PlannerState(
        desired, history, averages, mix, proposals, events, learned, unfixed, trial, pending, serving
    )
    return Decision(desired, current, True, f"{why}: {current} -> {desired}", values), new_state


def planner_decide_fn(
    cfg: PlannerConfig,
) -> Callable[[WindowStats, ScalerSpec, PlannerState, float], tuple[Decision, PlannerState]]:
    """``planner_decide`` bound to ``cfg``: the ``decide(window, spec, state, now)`` of a policy."""

    def decide(window: WindowStats, spec: ScalerSpec, state: PlannerState, now: float) -> tuple[Decision, PlannerState]:
        return planner_decide(window, spec, state, now, cfg)

    return decide
