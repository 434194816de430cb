"""One simulated replica: the engine's own scheduler, timed by an engine profile.

``triton_backend.scheduler.Scheduler`` (torch-free) decides every step, as it does in the engine:
requests wait first come, first served (the replays set no deadlines, so its earliest-deadline order is
arrival order); the head is admitted when the running choices stay within ``max_batch`` (the engine's
``max_num_seqs``) and the free KV pages, less what the running requests still have reserved, cover its
prompt and S3's predicted output for each choice; a step decodes every running choice once and
prefills at most ``prefill_chunk_tokens`` prompt tokens in admission order; when a choice needs a page
and none is free, the latest admitted request is preempted and recomputed later. This module only
times what a ``Schedule`` holds and plays the model's part:

- a step lasts ``decode_step_s(batch, context)`` for its decode rows (their mean context, or the
  longest where the profile's engine pads attention to it: ``extra.decode_cost_context``), plus
  ``P(end) - P(start)`` of the profile's prefill curve P for each chunk, recomputed ones included;
- every choice that samples in a step gets a token when the step ends; a choice shorter than its
  request's longest is told to stop at its length (its EOS), so each choice ends where the trace says.

Everything a step produces is emitted when the step ends, as the engine does, and the engine steps back
to back while it has work, so every decoded token's inter-token latency is the duration of the step
that made it.

The scheduler keeps lengths lazily (``Scheduler(lazy=True)``): a step costs O(1) plus its events (a
page taken, a choice ended, a request admitted), not O(batch). Its requests hold prompt lengths, not
token ids (``Request.counted``). ``Replica.run_ahead`` finishes the steps between events at once: the
prefill steps in which no choice ends, then the decode steps (``decode_ahead``, the scheduler taking
them back together). A replica whose metrics nobody scrapes (``instruments=False``: a fleet without an
autoscaler, the oracle's) keeps none: its requests' outcomes are the same.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from nlgsim.instruments import PodInstruments
from nlgsim.profile import EngineProfile
from nlgsim.workload import Request
from triton_backend.kv_pages import PagePool
from triton_backend.length_predictor import LengthPredictor
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Schedule, Scheduler, SchedulerConfig
from triton_backend.sequence import Request as EngineRequest
from triton_backend.sequence import RequestStatus


@dataclass
class RequestState:
    """What happened to one request; times are seconds from the start of the run."""

    request: Request
    replica: int = -1
    admitted: float = -1.0
    first_token: float = -1.0
    finish: float = -1.0
    per_token: float = 0.0
    """The worst choice's latency / its tokens (the thesis's per-token latency)."""
    choices_left: int = 0


OnDone = Callable[[RequestState, float], None]
_V = TypeVar("_V")


class Replica:
    """A continuous-batching engine: the engine's scheduler, the profile's clock. The simulator calls
    ``submit``, ``start``, ``finish`` and ``decode_ahead``."""

    def __init__(self, index: int, profile: EngineProfile, on_done: OnDone, instruments: bool = True) -> None:
        self.index = index
        self.profile = profile
        self.on_done = on_done
        self.metrics = PodInstruments()
        self._observed = instruments  # whether `metrics` are kept up to date
        config = SchedulerConfig(prefill_chunk_tokens=profile.prefill_chunk_tokens, max_num_seqs=profile.max_batch)
        pages = PagePool(profile.total_pages, profile.page_size, profile.max_context)
        self.scheduler = Scheduler(config, pages, LengthPredictor(), lazy=True)
        self.busy = False
        # Whether the step in progress only decodes and the queue's head waits for a choice to end: a
        # request arriving meanwhile only queues behind it (the simulator's `run_ahead` goes past it).
        self.admits_nobody = False
        self.outstanding = 0  # requests submitted and not finished
        self._states: dict[str, RequestState] = {}
        self._schedule: Schedule | None = None
        # Submitted and still waiting, in submission order: the order the scheduler admits them in
        # (the replays set no deadline, so its earliest-deadline order is first come, first served).
        self._queued: deque[EngineRequest] = deque()
        self._t0 = 0.0
        self._curves = _Lookup(profile.decode_curve)
        self._prefill_s = _Lookup(profile.prefill_time_s)
        self._prefill_s[0] = 0.0  # a chunk from a prompt's start costs P(end)
        self._pad_to_longest = profile.extra.get("decode_cost_context") == "max"
        self._max_batch = profile.max_batch
        self._total_pages = pages.num_pages
        self._params: dict[tuple[int, int], SamplingParams] = {}  # by (max_tokens, n): a request's are read only

    def submit(self, state: RequestState) -> None:
        req = state.request
        lengths = req.output_tokens
        longest, choices = max(lengths), len(lengths)
        params = self._params.get((longest, choices))
        if params is None:
            params = self._params[longest, choices] = SamplingParams(
                max_tokens=longest, n=choices, temperature=0.0, ignore_eos=True
            )
        key = str(req.id)
        request = EngineRequest.counted(key, req.prompt_tokens, params, req.arrival)
        scheduler = self.scheduler
        try:
            scheduler.add_request(request)
        except ValueError as err:
            raise ValueError(f"request {req.id}: {err} (the profile's max_batch)") from None
        if choices > 1:
            for seq, length in zip(request.sequences, lengths, strict=True):
                if length < longest:
                    scheduler.expect_stop(seq, length)
        state.replica = self.index
        state.choices_left = choices
        self._states[key] = state
        self._queued.append(request)
        self.outstanding += 1
        if self._observed:
            self.metrics.requests_waiting = scheduler.num_waiting

    def has_work(self) -> bool:
        return self.scheduler.has_work

    def start(self, now: float) -> float:
        """Begin one engine step at ``now``; returns when it ends. Call only when ``has_work()``."""
        self.busy = True
        self._t0 = now
        scheduler = self.scheduler
        schedule = self._schedule = scheduler.schedule()
        t = now
        rows = schedule.decode_count
        if rows:
            context = scheduler.longest_decode() if self._pad_to_longest else schedule.decode_context / rows
            t += self._curves[rows](context)
        prefill = schedule.prefill
        if prefill:
            cost = self._prefill_s
            for chunk in prefill:
                t += cost[chunk.end] - cost[chunk.start]
            self.admits_nobody = False
        else:
            self.admits_nobody = rows >= self._max_batch or scheduler.num_waiting > 0
        queued = self._queued
        while queued and queued[0].status is not RequestStatus.WAITING:
            self._states[queued.popleft().request_id].admitted = now
        if self._observed:
            self.metrics.requests_waiting = scheduler.num_waiting
        return t

    def finish(self, now: float) -> None:
        """End the step started last; ``now`` is the time ``start`` returned."""
        schedule, self._schedule = self._schedule, None
        assert schedule is not None, "finish without a step started"
        decoded = schedule.decode_count
        observed = self._observed
        if decoded and observed:
            self.metrics.inter_token_latency.observe(now - self._t0, decoded)
        ended = self.scheduler.advance(schedule)
        states = self._states
        for chunk in schedule.prefill:
            if chunk.samples:  # the first tokens, from the prompts the step completed
                self._first_token(states[chunk.request.request_id], now)
                decoded += len(chunk.samples)
        for seq in ended:
            self._finish_choice(seq.request_id, seq.generated, now)
        self.busy = False
        if observed:
            self.metrics.generation_tokens += decoded
            self._record()

    def step(self, now: float) -> float:
        """``finish`` the step in progress at ``now`` and ``start`` the next; returns when that ends, or
        -1.0 when no work is left (the replica is idle)."""
        self.finish(now)
        if not self.scheduler.has_work:
            return -1.0
        return self.start(now)

    def run_ahead(self, end: float, until: float) -> float:
        """``decode_ahead``, after finishing at once the prefill steps in progress that end before ``until``
        with no choice ending in them (``Scheduler.ends_a_choice``), each with ``finish`` and the next
        begun with ``start`` at its end, as stepping would: a prompt's steps and the decoding after them
        are one event of the simulator's, not one a step."""
        schedule = self._schedule
        assert schedule is not None, "run_ahead without a step started"
        while schedule.prefill and end < until and not self.scheduler.ends_a_choice(schedule):
            self.finish(end)
            end = self.start(end)
            schedule = self._schedule
            assert schedule is not None
        return self.decode_ahead(end, until)

    def decode_ahead(self, end: float, until: float) -> float:
        """Finish the step in progress (it ends at ``end``) and the decode steps after it at once, while
        a step ends before ``until`` and no choice ends in it; returns when the step then in progress
        ends. ``until`` is the caller's promise that nothing reaches or reads this replica before then
        (no request routed to it, no scrape, no round). The scheduler says how many steps fit
        (``decode_steps_that_fit``: none past one that needs a page that is not free) and takes them
        back; each is timed and recorded with the arithmetic of ``start`` and ``finish``, so the run is
        the same, bit for bit, as stepping."""
        schedule = self._schedule
        assert schedule is not None, "decode_ahead without a step started"
        if schedule.prefill or not schedule.decode_count or end >= until:
            return end
        # The steps in which no choice ends and the pages suffice, the one in progress included.
        scheduler = self.scheduler
        limit = scheduler.decode_steps_that_fit(schedule, 1 << 30)
        if limit < 2:
            return end
        batch = schedule.decode_count
        curve = self._curves[batch]
        total = schedule.decode_context
        pad = self._pad_to_longest
        longest = scheduler.longest_decode() if pad else 0
        observed = self._observed
        itl = self.metrics.inter_token_latency
        # Histogram.observe written out (the same arithmetic, in the same order, so the run is the
        # stepped one bit for bit): a call a step is much of a step's cost in Python.
        bounds, counts = itl.bounds, itl.counts
        value = end - self._t0
        if observed:
            counts[bisect_left(bounds, value)] += batch
        total_s, count = itl.total + value * batch, itl.count + batch
        steps = 1
        step_end = end
        # DecodeCurve.__call__ written out where it can be (the same arithmetic, in the same order).
        segments, grid, weight = curve.segments or (), curve.context, curve.weight
        inline = not pad and bool(segments) and curve.above is not None
        while steps < limit:
            if inline:
                x = (total + batch * steps) / batch
                start, width, lo, lo_rise, hi, hi_rise = segments[bisect_right(grid, x)]
                w = (x - start) / width
                lo = lo + lo_rise * w
                hi = hi + hi_rise * w
                step_end = end + max(lo + (hi - lo) * weight, 1e-6)
            else:
                step_end = end + curve(longest + steps if pad else (total + batch * steps) / batch)
            if step_end >= until:
                break
            if observed:
                value = step_end - end
                counts[bisect_left(bounds, value)] += batch
                total_s += value * batch
                count += batch
            end = step_end
            steps += 1
        scheduler.take_back_decode_steps(schedule, steps)
        if observed:
            itl.total, itl.count = total_s, count
            self.metrics.generation_tokens += batch * steps
            self._record()
        if steps < limit:
            # The step after them fits too, and `start` would time it as the loop just did: it is
            # `schedule` again, in progress until `step_end`.
            scheduler.schedule_decode_again(schedule)
            self._t0 = end
            return step_end
        self._schedule = None
        return self.start(end)

    def _record(self) -> None:
        """The pod's gauges, as the engine's stats give them (``EngineStats``), read off the scheduler."""
        m, scheduler = self.metrics, self.scheduler
        m.requests_running, m.requests_waiting, used = scheduler.gauges()
        m.kv_cache_usage = used / self._total_pages

    def _first_token(self, state: RequestState, t: float) -> None:
        state.first_token = t
        if self._observed:
            req = state.request
            self.metrics.prompt_tokens += req.prompt_tokens
            for _ in range(req.choices):
                self.metrics.time_to_first_token.observe(t - req.arrival)

    def _finish_choice(self, key: str, tokens: int, t: float) -> None:
        state = self._states[key]
        req = state.request
        latency = t - req.arrival
        tpot = latency / tokens
        if tpot > state.per_token:
            state.per_token = tpot
        observed = self._observed
        if observed:
            self.metrics.time_per_output_token.observe(tpot)
        state.choices_left -= 1
        if state.choices_left > 0:
            return
        del self._states[key]
        state.finish = t
        if observed:
            self.metrics.request_latency.observe(latency)
            self.metrics.requests_finished += 1
        self.outstanding -= 1
        self.on_done(state, t)


class _Lookup(dict[int, _V]):
    """``f(n)`` by ``n``, each computed once, when first asked for: a profile's decode curves by batch
    size and prefill times by prompt length, which every step asks for."""

    def __init__(self, f: Callable[[int], _V]) -> None:
        super().__init__()
        self._f = f

    def __missing__(self, n: int) -> _V:
        value = self[n] = self._f(n)
        return value
