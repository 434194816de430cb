"""The engine's units of work: a request, its status, and the choices (sequences) it asks for, as the
scheduler keeps them: token ids, page tables, ends. No torch and no text: the engine keeps each
choice's sampler state and text stream on its side, keyed by request id and choice index. What a step
hands out about them (`RequestUpdate`, `FinishReason`) is plain data in `outputs`. The scheduler
alone moves a request from status to status."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from triton_backend.model_shapes import EOS_TOKEN_ID
from triton_backend.outputs import FinishReason
from triton_backend.sampling_params import SamplingParams


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

    # A member is equal only to itself: hashed by identity, in C, where Enum's hash of its name runs in
    # Python (every move looks its status up twice).
    __hash__ = object.__hash__


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
@dataclass(eq=False, slots=True)
class Sequence:
    """One choice: its tokens, its KV pages, and how it ended."""

    request_id: str
    index: int
    params: SamplingParams
    token_ids: list[int]  # the prompt, then what it generated
    generated: int = 0
    pages: list[int] = field(default_factory=list)
    cached: int = 0  # tokens whose keys and values are in the cache
    reserved_pages: int = 0  # what admission set aside for this choice (prompt + predicted output)
    finish_reason: FinishReason | None = None
    taken: int = 0  # of `generated`, those handed out in updates (`take_new`)
    prompt_tokens: int = 0
    # Kept by a scheduler that counts lengths lazily (`Scheduler(lazy=True)`, the simulator's): while
    # the choice decodes, `generated` is its count at that scheduler's step `synced`, one more each
    # step since; `stop_at` is the count at which its caller knows it stops (0: none known).
    synced: int = 0
    stop_at: int = 0

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    @property
    def position(self) -> int:
        """Where the last token goes in the cache when it is decoded."""
        return len(self.token_ids) - 1

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    def append(self, token: int, stop: bool = False) -> None:
        """Take a sampled token and whether it ends the choice: `stop` (its text reached a stop string,
        which the engine's detokenizer sees), EOS, or max_tokens. `Scheduler.advance` writes this out
        for the simulator's rows: the two change together."""
        self.token_ids.append(token)
        self.generated += 1
        params = self.params
        if stop or (token == EOS_TOKEN_ID and not params.ignore_eos):
            self.finish_reason = FinishReason.STOP
        elif self.generated >= params.max_tokens:
            self.finish_reason = FinishReason.LENGTH

    def take_new(self) -> tuple[int, ...]:
        """The token ids produced since the last call."""
        new = self.generated - self.taken
        self.taken = self.generated
        return tuple(self.token_ids[-new:]) if new else ()


@dataclass(eq=False, slots=True)
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float
    prompt_tokens: int  # len(prompt_ids), where the request holds them (`counted`)
    sequences: list[Sequence] = field(default_factory=list)
    predicted_tokens: int = 0  # S3's predicted output length of each choice
    preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING
    admitted_as: int = 0  # the scheduler's count of admissions when it was last admitted

    @classmethod
    def with_choices(cls, request_id: str, prompt_ids: list[int], params: SamplingParams, arrival: float) -> Request:
        """A request with its `params.n` choices, each starting from the prompt."""
        tokens = len(prompt_ids)
        request = cls(request_id, list(prompt_ids), params, arrival, tokens)
        request.sequences = [
            Sequence(request_id, i, params, list(prompt_ids), prompt_tokens=tokens) for i in range(params.n)
        ]
        return request

    @classmethod
    def counted(cls, request_id: str, prompt_tokens: int, params: SamplingParams, arrival: float) -> Request:
        """A request of a `prompt_tokens`-token prompt that holds no token ids, for a scheduler that
        counts lengths (`Scheduler(lazy=True)`, the simulator's): it reads counts only, and a prompt
        of tokens nobody reads would cost a list per choice."""
        request = cls(request_id, [], params, arrival, prompt_tokens)
        request.sequences = [Sequence(request_id, i, params, [], prompt_tokens=prompt_tokens) for i in range(params.n)]
        return request

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
        for seq in self.sequences:  # a loop: cheaper than all() over a generator, and asked each step
            if seq.generated:
                return False
        return True

    def prefill_targets(self) -> list[tuple[Sequence, int]]:
        """Each sequence still to prefill, with how many tokens it must have cached before decoding.

        A fresh request prefills its prompt once, in its first choice. A preempted one recomputes
        each running choice up to (not including) its last token, which the next decode step feeds.
        """
        if self.fresh:
            first = self.sequences[0]
            return [(first, self.prompt_tokens)] if first.cached < self.prompt_tokens else []
        # Its position from its counts, not its token list: a lazy scheduler appends no tokens.
        targets = [(s, s.prompt_tokens + s.generated - 1) for s in self.sequences if s.running]
        return [(s, position) for s, position in targets if s.cached < position]

    @property
    def finished(self) -> bool:
        return self.status.finished
