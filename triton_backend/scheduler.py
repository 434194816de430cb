"""Which sequences run each step, and the KV pages they hold: iteration-level scheduling.

Requests wait in earliest-deadline-first order (those without a deadline behind, first come first
served; preempted requests go first of all). The head is admitted when the free pages, less what the
running requests still have reserved, cover its prompt and S3's predicted output for each choice. A
step decodes every running choice once and prefills at most `prefill_chunk_tokens` tokens, so a long
prompt stalls the running streams by one bounded chunk at a time. When a sequence needs a page and
none is free (a length was underestimated), the most recently admitted request is preempted: its
pages are freed and it is recomputed later from its tokens, none lost or repeated.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from triton_backend.kv_cache import PagedKVCache
from triton_backend.length_predictor import LengthPredictor
from triton_backend.sequence import Request, Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    prefill_chunk_tokens: int = 256
    max_num_seqs: int = 64

    def __post_init__(self) -> None:
        if self.prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens: must be >= 1, got {self.prefill_chunk_tokens}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs: must be >= 1, got {self.max_num_seqs}")


@dataclass(frozen=True)
class PrefillChunk:
    request: Request
    sequence: Sequence
    start: int
    end: int
    last: bool  # the request's prefill is complete after this chunk


@dataclass
class Schedule:
    prefill: list[PrefillChunk] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: SchedulerConfig, cache: PagedKVCache, predictor: LengthPredictor) -> None:
        self.config = config
        self.cache = cache
        self.predictor = predictor
        self._waiting: list[tuple[float, int, Request]] = []
        self._order = itertools.count()
        self.prefilling: list[Request] = []  # admitted, in admission order
        self.running: list[Request] = []  # admitted, in admission order
        self.preemptions = 0  # sequences preempted so far

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self.prefilling or self.running)

    def add(self, request: Request) -> None:
        request.predicted_tokens = self.predictor.predict(request.params, len(request.prompt_ids))
        deadline = request.deadline
        heapq.heappush(self._waiting, (deadline if deadline is not None else float("inf"), next(self._order), request))

    def remove(self, request_id: str) -> Request | None:
        for group in (self.prefilling, self.running):
            for request in group:
                if request.request_id == request_id:
                    group.remove(request)
                    self._free(request)
                    return request
        for i, (_, _, request) in enumerate(self._waiting):
            if request.request_id == request_id:
                self._waiting.pop(i)
                heapq.heapify(self._waiting)
                return request
        return None

    def schedule(self) -> Schedule:
        plan = Schedule()
        self._make_room_for_decode(plan)
        plan.decode = [seq for request in self.running for seq in request.sequences if seq.running]
        self._admit(len(plan.decode))
        self._plan_prefill(plan)
        return plan

    def prefill_finished(self, request: Request) -> None:
        self.prefilling.remove(request)
        self.running.append(request)

    def sequence_finished(self, request: Request, seq: Sequence) -> None:
        self.cache.release(seq.pages)
        if seq.generated:
            self.predictor.observe(request.params, len(request.prompt_ids), seq.generated, request.predicted_tokens)

    def request_finished(self, request: Request) -> None:
        for group in (self.running, self.prefilling):
            if request in group:
                group.remove(request)
        self._free(request)

    def _make_room_for_decode(self, plan: Schedule) -> None:
        page_size = self.cache.shape.page_size
        for request in list(self.running):
            if request in plan.preempted:
                continue  # preempted below, while making room for an earlier one
            for seq in request.sequences:
                if seq.running and seq.position // page_size >= len(seq.pages):
                    if not self._ensure_free_page(plan, keep=request):
                        break
                    seq.pages.append(self.cache.allocate())

    def _ensure_free_page(self, plan: Schedule, keep: Request) -> bool:
        """Preempt the latest-admitted other requests until a page is free; False if `keep` went too."""
        while self.cache.free_pages == 0:
            victim = self._latest_admitted()
            self._preempt(victim, plan)
            if victim is keep:
                return False
        return True

    def _latest_admitted(self) -> Request:
        # Prefilling requests were admitted after every running one.
        return self.prefilling[-1] if self.prefilling else self.running[-1]

    def _preempt(self, request: Request, plan: Schedule) -> None:
        for group in (self.running, self.prefilling):
            if request in group:
                group.remove(request)
        self._free(request)
        plan.prefill = [chunk for chunk in plan.prefill if chunk.request is not request]
        request.preemptions += 1
        # The prediction was too short: admit it next time against a doubled one (S3's re-bucketing),
        # so it is not preempted over and over.
        generated = max(seq.generated for seq in request.sequences)
        request.predicted_tokens = min(request.params.max_tokens, max(2 * generated, 2 * request.predicted_tokens))
        self.preemptions += sum(1 for seq in request.sequences if seq.running)
        plan.preempted.append(request)
        heapq.heappush(self._waiting, (-float("inf"), next(self._order), request))

    def _free(self, request: Request) -> None:
        for seq in request.sequences:
            self.cache.release(seq.pages)
            seq.cached = 0

    def _admit(self, decoding: int) -> None:
        """`decoding`: the running requests' unfinished choices."""
        # Every waiting request has a choice to run, so none fits beside a full batch.
        if not self._waiting or decoding >= self.config.max_num_seqs:
            return
        running_seqs = decoding + sum(1 for r in self.prefilling for s in r.sequences if s.running)
        outstanding = sum(
            max(0, self.cache.shape.pages_for(s.reserved_tokens) - len(s.pages))
            for r in self.running + self.prefilling
            for s in r.sequences
            if s.running
        )
        while self._waiting:
            request = self._waiting[0][2]
            choices = [s for s in request.sequences if s.running]
            reserve = [self._reservation(request, s) for s in choices]
            need = sum(self.cache.shape.pages_for(tokens) for tokens in reserve)
            too_many = running_seqs + len(choices) > self.config.max_num_seqs
            if too_many or need > self.cache.free_pages - outstanding:
                # Strict order: a large head waits rather than being overtaken forever.
                if running_seqs or self.prefilling:
                    return
            heapq.heappop(self._waiting)
            for seq, tokens in zip(choices, reserve, strict=True):
                seq.reserved_tokens = tokens
            outstanding += need
            running_seqs += len(choices)
            self.prefilling.append(request)

    def _reservation(self, request: Request, seq: Sequence) -> int:
        remaining = max(request.predicted_tokens - seq.generated, 1)
        return min(len(seq.sampling.token_ids) + remaining, self.cache.shape.max_len)

    def _plan_prefill(self, plan: Schedule) -> None:
        budget = self.config.prefill_chunk_tokens
        for request in list(self.prefilling):
            if request in plan.preempted:
                # Preempted while an earlier one made room. The engine leaves no later request holding
                # pages while an earlier one still prefills, so this is defence: planning it would run a
                # chunk for a request that is back in the queue.
                continue
            targets = request.prefill_targets()
            for index, (seq, target) in enumerate(targets):
                if budget == 0:
                    return
                end = min(target, seq.cached + budget)
                pages_needed = self.cache.shape.pages_for(end) - len(seq.pages)
                for _ in range(pages_needed):
                    if not self._ensure_free_page(plan, keep=request):
                        return
                    seq.pages.append(self.cache.allocate())
                last = index == len(targets) - 1 and end == target
                if last and request.fresh and not self._give_siblings_pages(request, plan):
                    return
                plan.prefill.append(PrefillChunk(request, seq, seq.cached, end, last))
                budget -= end - seq.cached
                seq.cached = end
            if not targets:  # preempted right after its prefill: nothing to recompute
                plan.prefill.append(PrefillChunk(request, request.sequences[0], 0, 0, True))

    def _give_siblings_pages(self, request: Request, plan: Schedule) -> bool:
        """Pages for the other choices, which get a copy of the first choice's prompt."""
        prompt_pages = self.cache.shape.pages_for(len(request.prompt_ids))
        for seq in request.sequences[1:]:
            while len(seq.pages) < prompt_pages:
                if not self._ensure_free_page(plan, keep=request):
                    return False
                seq.pages.append(self.cache.allocate())
        return True
