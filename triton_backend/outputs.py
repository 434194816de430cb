"""What an engine step hands out about a request: plain data (no torch), for the response sender, the
serving metrics and the simulator. The scheduler returns a `RequestUpdate` (tokens and ends); the
engine adds the text and the time to make the `RequestOutput` it sends."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class FinishReason(str, Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True)
class RequestUpdate:
    """What one step changed of one request, as the scheduler reports it (vLLM's EngineCoreOutput)."""

    request_id: str
    token_ids: tuple[tuple[int, ...], ...]  # the ids each choice produced in this step
    total_tokens: tuple[int, ...]
    finish_reasons: tuple[FinishReason | None, ...]
    num_input_tokens: int
    finished: bool
    arrival: float


@dataclass(frozen=True)
class RequestOutput:
    """What one engine step produced for one request: plain data for the sender and the metrics."""

    request_id: str
    time: float
    texts: tuple[str, ...]  # new text of each choice
    token_ids: tuple[tuple[int, ...], ...]  # the ids each choice produced in this step
    total_tokens: tuple[int, ...]
    finish_reasons: tuple[FinishReason | None, ...]
    num_input_tokens: int
    finished: bool
    arrival: float
    error: str | None = None

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return tuple(len(ids) for ids in self.token_ids)
