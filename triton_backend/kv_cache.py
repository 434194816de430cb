"""The KV cache: fixed slots of a whole context each, with an explicit memory budget.

A slot holds every layer's keys and values for one sequence up to the model's context, so a running
sequence can never run out of room mid-stream. The number of slots follows from a byte budget, and
the scheduler admits work only while slots are free. Slots are handed out lowest-first, so the running
batch usually occupies slots 0..B-1 and the runner can read the cache as a view without copying.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CacheShape:
    n_layer: int
    n_head: int
    head_dim: int
    max_len: int
    dtype: torch.dtype

    @property
    def bytes_per_slot(self) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.n_layer * self.n_head * self.max_len * self.head_dim * element


def slots_for_budget(shape: CacheShape, budget_bytes: int, max_slots: int) -> int:
    """How many slots fit the budget, at most `max_slots`; at least one or the budget is an error."""
    slots = min(max_slots, budget_bytes // shape.bytes_per_slot)
    if slots < 1:
        raise ValueError(
            f"kv_cache_bytes: {budget_bytes} is below one sequence's KV cache "
            f"({shape.bytes_per_slot} bytes); raise it or use a smaller preset"
        )
    return int(slots)


class SlotKVCache:
    def __init__(self, shape: CacheShape, num_slots: int, device: torch.device) -> None:
        self.shape = shape
        self.num_slots = num_slots
        dims = (shape.n_layer, num_slots, shape.n_head, shape.max_len, shape.head_dim)
        self.k = torch.zeros(dims, dtype=shape.dtype, device=device)
        self.v = torch.zeros(dims, dtype=shape.dtype, device=device)
        self._free = list(range(num_slots))
        heapq.heapify(self._free)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def used_slots(self) -> int:
        return self.num_slots - len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("KV cache has no free slot; the scheduler admitted too much")
        return heapq.heappop(self._free)

    def release(self, slot: int) -> None:
        heapq.heappush(self._free, slot)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Share a prefilled prompt with the other choices of the same request."""
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]
