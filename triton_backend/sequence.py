"""The engine's units of work: a request, and the choices (sequences) it asks for. What a step hands
out about them (`RequestOutput`, `FinishReason`) is plain data in `outputs`, which needs no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from triton_backend.detokenizer import TextStream
from triton_backend.outputs import FinishReason
from triton_backend.sampler import SamplingState
from triton_backend.sampling_params import SamplingParams


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


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float
    sequences: list[Sequence] = field(default_factory=list)
    predicted_tokens: int = 0  # S3's predicted output length of each choice
    preemptions: int = 0

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
        return all(seq.finish_reason is not None for seq in self.sequences)
