"""The paged KV cache's tensors: fixed-size pages under an explicit byte budget.

Each sequence holds a list of pages (its page table); position p lives in page table[p // page_size]
at offset p % page_size. Which page is whose is the scheduler's (`kv_pages.PagePool`, no torch); this
module holds the keys and values the runner writes and reads through the tables a schedule gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from triton_backend.kv_pages import PAGE_SIZE, PagePool, pages_for


@dataclass(frozen=True)
class CacheShape:
    n_layer: int
    n_head: int
    head_dim: int
    max_len: int
    dtype: torch.dtype
    page_size: int = PAGE_SIZE

    @property
    def element_bytes(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def bytes_per_page(self) -> int:
        return 2 * self.n_layer * self.n_head * self.page_size * self.head_dim * self.element_bytes

    @property
    def pages_per_sequence(self) -> int:
        """Pages of one full-context sequence."""
        return -(-self.max_len // self.page_size)

    def pages_for(self, tokens: int) -> int:
        return pages_for(tokens, self.page_size)


def pages_for_budget(shape: CacheShape, budget_bytes: int, min_sequences: int) -> int:
    """Pages that fit the budget; it must hold `min_sequences` full-context sequences, or it is an error."""
    pages = budget_bytes // shape.bytes_per_page
    need = shape.pages_per_sequence * min_sequences
    if pages < need:
        raise ValueError(
            f"kv_cache_bytes: {budget_bytes} holds {pages} pages of {shape.page_size} tokens, below the "
            f"{need} that {min_sequences} full-context sequence(s) need ({need * shape.bytes_per_page} bytes)"
        )
    return int(pages)


class PagedKVCache:
    def __init__(self, shape: CacheShape, num_pages: int, device: torch.device) -> None:
        self.shape = shape
        self.num_pages = num_pages
        # One page past the pool is never handed out: padded rows of a captured decode step write there.
        self.scratch_page = num_pages
        dims = (shape.n_layer, num_pages + 1, shape.page_size, shape.n_head, shape.head_dim)
        self.k = torch.zeros(dims, dtype=shape.dtype, device=device)
        self.v = torch.zeros(dims, dtype=shape.dtype, device=device)

    def page_pool(self) -> PagePool:
        """A pool of this cache's pages, for the scheduler to hand out."""
        return PagePool(self.num_pages, self.shape.page_size, self.shape.max_len)

    def copy_pages(self, pairs: list[tuple[int, int]]) -> None:
        """Copy each (source, destination) page: a prefilled prompt shared with a request's other choices."""
        source = torch.tensor([src for src, _ in pairs], device=self.k.device)
        target = torch.tensor([dst for _, dst in pairs], device=self.k.device)
        self.k[:, target] = self.k[:, source]
        self.v[:, target] = self.v[:, source]
