"""What a step asks of the model, as plain data: the decode rows and prefill chunks, and the
:class:`ModelRunner` protocol the engine runs them through.

Both sides import this module and nothing of each other: `runner.GPT2Runner` (the eager forward pass)
and `graph_steps.GraphSteps` (its CUDA-graph replay, handed to the runner by `engine_factory`) run
these inputs; `engine` builds them from a schedule. It imports no torch at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from triton_backend.kv_cache import PagedKVCache


@dataclass(frozen=True)
class DecodeInput:
    pages: list[int]  # the sequence's page table
    token_id: int  # the last token, to cache at `position`
    position: int


@dataclass(frozen=True)
class PrefillInput:
    pages: list[int]  # the sequence's page table
    token_ids: list[int]  # the tokens to cache, at positions start..
    start: int


class ModelRunner(Protocol):
    """What the engine needs of the model: its KV cache, and one forward pass over a step's decode rows
    and prefill chunks (`runner.GPT2Runner` serves; the host-overhead benchmark brings an instant one)."""

    @property
    def cache(self) -> PagedKVCache: ...

    def step(
        self, decode: list[DecodeInput], chunks: list[PrefillInput]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]: ...


class StepGraphs(Protocol):
    """Steps replayed from captured graphs (`graph_steps.GraphSteps`): the logits of each decode row and
    of each chunk's last token, or None for a step no graph holds (the runner then runs it eagerly)."""

    def step(
        self, decode: list[DecodeInput], prefill: list[PrefillInput]
    ) -> tuple[torch.Tensor, torch.Tensor] | None: ...
