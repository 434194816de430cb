"""The engine's units of work: a request, its status, and the choices (sequences) it asks for. What a
step hands out about them (`RequestOutput`, `FinishReason`) is plain data in `outputs`, which needs no
torch. The scheduler alone moves a request from status to status."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from triton_backend.detokenizer import TextStream
from triton_backend.model_shapes import EOS_TOKEN_ID
from triton_backend.outputs import FinishReason
from triton_backend.sampling_params import SamplingParams

if TYPE_CHECKING:  # the engine makes the states (torch generators); a sequence only holds one
    from triton_backend.sampler import SamplingState


class RequestStatus(Enum):
    WAITING = "waiting"  # queued, never admitted
    PREFILLING = "prefilling"  # admitted; its tokens are going into the cache, a chunk a step
    RUNNING = "running"  # admitted; each unfinished choice decodes a token a step
    PREEMPTED = "preempted"  # its pages were taken back; queued, to be recomputed from its tokens
    FINISHED = "finished"  # every choice ended by itself (each choice's reason is on its sequence)
    FINISHED_ABORTED = "finished_aborted"  # cancelled by its client, or by the engine on a failed step

    @property
    def finished(self) -> bool:
        return self is RequestStatus.FINISHED or self is RequestStatus.FINISHED_ABORTED


#: The moves a request may make; anything else is a scheduler bug, raised where it happens.
TRANSITIONS: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED_ABORTED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED_ABORTED}),
    RequestStatus.PREFILLING: frozenset(
        {RequestStatus.RUNNING, RequestStatus.PREEMPTED, RequestStatus.FINISHED_ABORTED}
    ),
    RequestStatus.RUNNING: frozenset({RequestStatus.FINISHED, RequestStatus.PREEMPTED, RequestStatus.FINISHED_ABORTED}),
    RequestStatus.FINISHED: frozenset(),
    RequestStatus.FINISHED_ABORTED: frozenset(),
}


# Sequences and requests compare by identity: the scheduler looks requests up in its lists, and
# field-by-field equality made every miss cost a dataclass comparison.
@dataclass(eq=False)
class Sequence:
    """One choice: its own KV pages, sampler state and text stream."""

    index: int
    sampling: SamplingState
    text: TextStream
    pages: list[int] = field(default_factory=list)
    cached: int = 0  # tokens whose keys and values are in the cache
    reserved_tokens: int = 0  # what admission set aside for this choice (prompt + predicted output)
    finish_reason: FinishReason | None = None
    # Tokens produced since the last output, and the text they released.
    new_token_ids: list[int] = field(default_factory=list)
    new_text: str = ""

    @property
    def generated(self) -> int:
        return self.sampling.generated

    @property
    def last_token(self) -> int:
        return self.sampling.token_ids[-1]

    @property
    def position(self) -> int:
        """Where the last token goes in the cache when it is decoded."""
        return len(self.sampling.token_ids) - 1

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    def append(self, token: int) -> None:
        """Take a sampled token: its text, and whether it ends the choice (EOS, a stop string, max_tokens)."""
        state = self.sampling
        state.token_ids.append(token)
        state.generated += 1
        self.new_token_ids.append(token)
        self.new_text += self.text.push(token)
        params = state.params
        if self.text.stopped or (token == EOS_TOKEN_ID and not params.ignore_eos):
            self.finish_reason = FinishReason.STOP
        elif state.generated >= params.max_tokens:
            self.finish_reason = FinishReason.LENGTH
        if self.finish_reason is not None:
            self.new_text += self.text.finish()

    def take_new(self) -> tuple[str, tuple[int, ...]]:
        """The text and token ids produced since the last call."""
        text, ids = self.new_text, tuple(self.new_token_ids)
        self.new_text = ""
        self.new_token_ids.clear()
        return text, ids


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float
    sequences: list[Sequence] = field(default_factory=list)
    predicted_tokens: int = 0  # S3's predicted output length of each choice
    preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING

    def move_to(self, status: RequestStatus) -> None:
        if status not in TRANSITIONS[self.status]:
            raise RuntimeError(f"request {self.request_id!r} cannot go from {self.status.value} to {status.value}")
        self.status = status

    @property
    def deadline(self) -> float | None:
        return None if self.params.deadline is None else self.arrival + self.params.deadline

    @property
    def fresh(self) -> bool:
        """Nothing generated yet: one prefill of the prompt serves every choice."""
        return all(seq.generated == 0 for seq in self.sequences)

    def prefill_targets(self) -> list[tuple[Sequence, int]]:
        """Each sequence still to prefill, with how many tokens it must have cached before decoding.

        A fresh request prefills its prompt once, in its first choice. A preempted one recomputes
        each running choice up to (not including) its last token, which the next decode step feeds.
        """
        if self.fresh:
            first = self.sequences[0]
            return [(first, len(self.prompt_ids))] if first.cached < len(self.prompt_ids) else []
        return [(s, s.position) for s in self.sequences if s.running and s.cached < s.position]

    @property
    def finished(self) -> bool:
        return self.status.finished
