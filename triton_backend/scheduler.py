"""Which requests run each step: iteration-level scheduling with budgeted (chunked) prefill.

Requests wait in earliest-deadline-first order (those without a deadline behind, first come first
served); the head is admitted when the KV cache has a slot for each of its choices. A step decodes
every running choice once and prefills at most `prefill_chunk_tokens` prompt tokens, so a long prompt
arriving stalls the running streams by one bounded chunk at a time, not by its whole prefill.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from triton_backend.sequence import Request, Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    prefill_chunk_tokens: int = 256

    def __post_init__(self) -> None:
        if self.prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens: must be >= 1, got {self.prefill_chunk_tokens}")


@dataclass(frozen=True)
class PrefillChunk:
    request: Request
    start: int
    end: int


@dataclass
class Schedule:
    admitted: list[Request] = field(default_factory=list)
    prefill: list[PrefillChunk] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._waiting: list[tuple[float, int, Request]] = []
        self._order = itertools.count()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self.prefilling or self.running)

    def add(self, request: Request) -> None:
        deadline = request.deadline
        key = deadline if deadline is not None else float("inf")
        heapq.heappush(self._waiting, (key, next(self._order), request))

    def remove(self, request_id: str) -> Request | None:
        for group in (self.prefilling, self.running):
            for request in group:
                if request.request_id == request_id:
                    group.remove(request)
                    return request
        for i, (_, _, request) in enumerate(self._waiting):
            if request.request_id == request_id:
                self._waiting.pop(i)
                heapq.heapify(self._waiting)
                return request
        return None

    def schedule(self, free_slots: int) -> Schedule:
        plan = Schedule()
        plan.decode = sorted(
            (seq for request in self.running for seq in request.sequences if seq.finish_reason is None),
            key=lambda seq: seq.slot if seq.slot is not None else -1,
        )
        while self._waiting and self._waiting[0][2].params.n <= free_slots:
            _, _, request = heapq.heappop(self._waiting)
            free_slots -= request.params.n
            plan.admitted.append(request)
            self.prefilling.append(request)
        budget = self.config.prefill_chunk_tokens
        for request in self.prefilling:
            if budget == 0:
                break
            end = min(len(request.prompt_ids), request.prefilled + budget)
            plan.prefill.append(PrefillChunk(request, request.prefilled, end))
            budget -= end - request.prefilled
        return plan

    def prefill_finished(self, request: Request) -> None:
        self.prefilling.remove(request)
        self.running.append(request)

    def finished(self, request: Request) -> None:
        if request in self.running:
            self.running.remove(request)
        elif request in self.prefilling:
            self.prefilling.remove(request)
