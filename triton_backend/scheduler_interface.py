"""The scheduler's seam, as the engine and the simulator use it (vLLM v1's SchedulerInterface). No torch.

A step is `schedule()`, then whatever runs it (the model and the sampler in the engine, a profile's
step time in the simulator), then `update_from_output(schedule, sampled)`, which returns what changed
of each request. `Engine` takes any scheduler of this shape; `engine_factory` builds the real one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from triton_backend.engine_stats import EngineStats
from triton_backend.outputs import FinishReason, RequestUpdate

if TYPE_CHECKING:
    from triton_backend.scheduler import Schedule
    from triton_backend.sequence import Request


@dataclass(frozen=True)
class SampledTokens:
    """What a step produced, keyed by request id (vLLM's ModelRunnerOutput)."""

    tokens: Mapping[str, Mapping[int, int]]  # request id -> choice index -> the token it sampled
    # (request id, choice index) of each choice whose text reached a stop string with this token: the
    # detokenizer, on the engine's output side, is what sees it.
    stopped: Set[tuple[str, int]] = field(default_factory=frozenset)


class SchedulerInterface(Protocol):
    def add_request(self, request: Request) -> None:
        """Queue a request; ValueError (naming the field) for a duplicate id or more choices than fit."""

    def schedule(self) -> Schedule: ...

    def update_from_output(self, schedule: Schedule, output: SampledTokens) -> list[RequestUpdate]:
        """Each request that got tokens, in the step's order; those it finished have left."""

    def finish_requests(self, request_ids: Iterable[str], reason: FinishReason) -> list[RequestUpdate]:
        """End requests where they stand, their unfinished choices with `reason`, and free their pages.
        One update per request that was here."""

    def make_stats(self) -> EngineStats: ...

    @property
    def has_work(self) -> bool: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int:
        """Admitted requests: prefilling or decoding."""

    @property
    def num_prefilling(self) -> int: ...
