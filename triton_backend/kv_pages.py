"""The KV cache's pages as numbers: which are free, which each sequence holds. No torch.

The scheduler owns this pool (vLLM v1's block pool under its KVCacheManager): it admits, grows and
preempts sequences against it, and writes each sequence's page table; the runner owns the tensors
(`kv_cache.PagedKVCache`) and reads those tables from the schedule. The simulator drives the same
pool, so KV pressure and preemption need no tensors there.
"""

from __future__ import annotations

PAGE_SIZE = 16


def pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


class PagePool:
    """`num_pages` pages of `page_size` tokens; `max_len` is the longest sequence (the model's context)."""

    def __init__(self, num_pages: int, page_size: int, max_len: int) -> None:
        for name, value in (("num_pages", num_pages), ("page_size", page_size), ("max_len", max_len)):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.max_len = max_len
        # A stack, the pages freed last on top: taking and giving back many at once are slices, and
        # the same requests get the same pages on every run.
        self._free = list(range(num_pages - 1, -1, -1))

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def used_pages(self) -> int:
        return self.num_pages - len(self._free)

    def pages_for(self, tokens: int) -> int:
        return pages_for(tokens, self.page_size)

    def can_allocate(self, pages: int) -> bool:
        return pages <= len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("KV cache has no free page; the scheduler should have preempted")
        return self._free.pop()

    def allocate_to(self, pages: list[int], count: int) -> None:
        """Appends `count` free pages to `pages` (a sequence's page table)."""
        pages.extend(self.take(count))

    def take(self, count: int) -> list[int]:
        """`count` free pages, in the order `count` calls of `allocate` give them."""
        free = self._free
        if count > len(free):
            raise RuntimeError("KV cache has no free page; the scheduler should have preempted")
        if count <= 0:
            return []
        taken = free[-1 : -count - 1 : -1]
        del free[-count:]
        return taken

    def release(self, pages: list[int]) -> None:
        """Takes `pages` back and empties the list (the sequence's page table)."""
        self._free.extend(pages)
        pages.clear()
