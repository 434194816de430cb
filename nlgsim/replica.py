"""One simulated replica: ``triton_backend.engine.Engine`` timed by an engine profile.

It follows the real engine step for step (``triton_backend/scheduler.py`` and ``engine.py``):

1. schedule: requests wait first come, first served (the replays set no deadlines, so the real
   scheduler's earliest-deadline order is arrival order); the head is admitted while the running
   choices stay within ``max_batch`` (the engine's ``max_num_seqs``). The real scheduler also checks
   KV pages against each choice's predicted length; with the default cache (room for ``max_num_seqs``
   full contexts) pages never bind first, and with ``ignore_eos`` and exact ``max_tokens`` (how traces
   are replayed) predictions are exact, so nothing is preempted: neither is modelled;
2. run: one decode step for every running choice, then prefill chunks of the admitted prompts in
   admission order, at most ``prefill_chunk_tokens`` prompt tokens per step in all;
3. update: a request whose prompt is fully prefilled emits the first token of every choice and its
   choices join the running batch; a choice that reached its length finishes and leaves the batch; a
   request finishes with its last choice.

Everything a step produces is emitted when the step ends, as the engine does. Step duration is
``decode_step_s(batch, context)`` (the mean context, or the longest where the profile says its engine
pads attention to it: ``extra.decode_cost_context``) plus the prefill cost of each chunk, ``P(end) - P(start)`` of
the profile's prefill curve P. The engine steps back to back while it has work, so every decoded
token's inter-token latency is the duration of the step that made it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from autoscaler.profile import DecodeCurve
from nlgsim.instruments import PodInstruments
from nlgsim.profile import EngineProfile
from nlgsim.workload import Request


@dataclass
class RequestState:
    """What happened to one request; times are seconds from the start of the run."""

    request: Request
    replica: int = -1
    admitted: float = -1.0
    prefilled: int = 0
    first_token: float = -1.0
    finish: float = -1.0
    per_token: float = 0.0
    """The worst choice's latency / its tokens (the thesis's per-token latency)."""
    choices_left: int = 0


class _Choice(NamedTuple):
    """A running choice; the heap orders by finish step, then admission (``order`` is unique, so a
    comparison never reaches the state; a tuple compares in C, which the heap does millions of times)."""

    finish_step: int
    order: int
    state: RequestState
    tokens: int
    context_at_finish: int


OnDone = Callable[[RequestState, float], None]


class Replica:
    """A continuous-batching engine. The simulator calls ``submit``, ``start`` and ``finish``."""

    def __init__(self, index: int, profile: EngineProfile, on_done: OnDone) -> None:
        self.index = index
        self.profile = profile
        self.on_done = on_done
        self.metrics = PodInstruments()
        self.waiting: deque[RequestState] = deque()
        self.prefilling: list[RequestState] = []
        self.running: list[_Choice] = []  # heap by finish step
        self.busy = False
        self.outstanding = 0  # requests submitted and not finished
        self.used_seqs = 0
        self._running_requests: dict[int, int] = {}  # request id -> unfinished choices
        self._step = 0
        self._order = 0
        self._sum_ctx = 0  # context tokens of the running choices
        self._t0 = 0.0
        self._decoded = 0
        self._chunks: list[tuple[RequestState, int]] = []
        self._curves: dict[int, DecodeCurve] = {}  # decode latency by batch size
        self._pad_to_longest = profile.extra.get("decode_cost_context") == "max"

    def submit(self, state: RequestState) -> None:
        if state.request.choices > self.profile.max_batch:
            raise ValueError(
                f"request {state.request.id} has {state.request.choices} choices but the engine has "
                f"{self.profile.max_batch} sequences at once (the profile's max_batch, the engine's "
                "max_num_seqs)"
            )
        state.replica = self.index
        state.choices_left = state.request.choices
        self.waiting.append(state)
        self.outstanding += 1
        self.metrics.requests_waiting = len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def start(self, now: float) -> float:
        """Begin one engine step at ``now``; returns when it ends. Call only when ``has_work()``."""
        p = self.profile
        self.busy = True
        self._t0 = now
        free = p.max_batch - self.used_seqs
        while self.waiting and self.waiting[0].request.choices <= free:
            state = self.waiting.popleft()
            free -= state.request.choices
            self.used_seqs += state.request.choices
            state.admitted = now
            self.prefilling.append(state)
        t = now
        self._decoded = len(self.running)
        if self._decoded:
            t += self._curve(self._decoded)(self._decode_context())
        budget = p.prefill_chunk_tokens
        self._chunks = []
        for state in self.prefilling:
            if budget == 0:
                break
            start = state.prefilled
            end = min(state.request.prompt_tokens, start + budget)
            t += p.prefill_time_s(end) - (p.prefill_time_s(start) if start else 0.0)
            self._chunks.append((state, end))
            budget -= end - start
        self.metrics.requests_waiting = len(self.waiting)
        return t

    def finish(self, now: float) -> None:
        """End the step started last; ``now`` is the time ``start`` returned."""
        m = self.metrics
        if self._decoded:
            self._step += 1
            self._sum_ctx += self._decoded
            m.generation_tokens += self._decoded
            m.inter_token_latency.observe(now - self._t0, self._decoded)
            while self.running and self.running[0].finish_step <= self._step:
                choice = heapq.heappop(self.running)
                self._sum_ctx -= choice.context_at_finish
                self._finish_choice(choice.state, choice.tokens, now)
        for state, end in self._chunks:
            state.prefilled = end
            req = state.request
            if end < req.prompt_tokens:
                continue
            self.prefilling.remove(state)
            m.prompt_tokens += req.prompt_tokens
            state.first_token = now
            self._running_requests[req.id] = req.choices
            for tokens in req.output_tokens:
                m.time_to_first_token.observe(now - req.arrival)
                m.generation_tokens += 1
                if tokens <= 1:
                    self._finish_choice(state, 1, now)
                    continue
                self._order += 1
                ctx = req.prompt_tokens + tokens
                heapq.heappush(
                    self.running, _Choice(self._step + tokens - 1, self._order, state, tokens, ctx)
                )
                self._sum_ctx += req.prompt_tokens + 1
        self._chunks = []
        self.busy = False
        m.requests_running = len(self._running_requests)
        m.requests_waiting = len(self.waiting)
        # Pages hold what is cached: the running choices' contexts and the prompts prefilled so far.
        cached = self._sum_ctx + sum(s.prefilled for s in self.prefilling)
        m.kv_cache_usage = min(1.0, cached / self.profile.page_size / self.profile.total_pages)

    def decode_ahead(self, end: float, until: float) -> float:
        """Finish the step in progress (it ends at ``end``) and run the steps after it here, without the
        simulator's event queue, while a step ends before ``until`` and changes nothing anyone else
        reads but the pod's metrics: nothing is admitted or prefilled and no choice finishes in it.
        Returns when the step then in progress ends.

        ``until`` is the caller's promise that nothing reaches this replica (a request) or reads it
        (a scrape) before then. Each step is finished and the next started with exactly the
        arithmetic of ``finish`` and ``start``, so the outcome is the same, bit for bit, as stepping
        through the queue; what it saves is the queue's work and ``finish``'s general case on the
        steps that make up most of a long run (a batch decoding between arrivals and finishes).
        """
        decoded = self._decoded
        if self._chunks or not decoded or end >= until:
            return end
        running = self.running
        m = self.metrics
        itl = m.inter_token_latency
        curve = self._curve(decoded)
        # The loop is DecodeCurve.__call__ and Histogram.observe written out (the same arithmetic, in
        # the same order): calls are most of a step's cost in Python.
        grid, below, above, weight = curve.context, curve.below, curve.above, curve.weight
        inline = not self._pad_to_longest and above is not None and len(grid) > 1
        bounds, counts = itl.bounds, itl.counts
        last = len(grid) - 2
        step, sum_ctx, t0 = self._step, self._sum_ctx, self._t0
        total, count = itl.total, itl.count
        limit = running[0].finish_step - 1  # the step in which the first choice finishes is not ours
        start = step
        while end < until and step < limit:
            step += 1
            sum_ctx += decoded
            value = end - t0
            counts[bisect_left(bounds, value)] += decoded
            total += value * decoded
            count += decoded
            t0 = end
            if inline:
                assert above is not None
                x = sum_ctx / decoded
                j = min(max(bisect_right(grid, x) - 1, 0), last)
                wj = (x - grid[j]) / (grid[j + 1] - grid[j])
                lo = below[j] + (below[j + 1] - below[j]) * wj
                hi = above[j] + (above[j + 1] - above[j]) * wj
                end += max(lo + (hi - lo) * weight, 1e-6)
            else:
                self._step, self._sum_ctx = step, sum_ctx
                end += curve(self._decode_context())
        if step > start:
            self._step, self._sum_ctx, self._t0 = step, sum_ctx, t0
            itl.total, itl.count = total, count
            m.generation_tokens += decoded * (step - start)
            m.kv_cache_usage = min(1.0, sum_ctx / self.profile.page_size / self.profile.total_pages)
        return end

    def _curve(self, batch: int) -> DecodeCurve:
        curve = self._curves.get(batch)
        if curve is None:
            curve = self._curves[batch] = self.profile.decode_curve(batch)
        return curve

    def _decode_context(self) -> float:
        """The context a decode step costs as: the running choices' mean, or their longest where the
        profile's engine pads every sequence's attention to it (the eager path)."""
        if self._pad_to_longest:
            return float(max(c.context_at_finish - (c.finish_step - self._step) for c in self.running))
        return self._sum_ctx / self._decoded

    def _finish_choice(self, state: RequestState, tokens: int, t: float) -> None:
        req = state.request
        latency = t - req.arrival
        tpot = latency / tokens
        state.per_token = max(state.per_token, tpot)
        self.metrics.time_per_output_token.observe(tpot)
        self.used_seqs -= 1
        state.choices_left -= 1
        if state.choices_left > 0:
            return
        del self._running_requests[req.id]
        state.finish = t
        self.metrics.request_latency.observe(latency)
        self.metrics.requests_finished += 1
        self.outstanding -= 1
        self.on_done(state, t)
