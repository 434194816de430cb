"""GPT-2's forward pass over the paged KV cache: batched chunked prefill, batched decode.

The layers (layer norms, projections, MLP) are the transformers modules with their weights; only
attention is ours, because it reads and writes each sequence's own pages at its own position. That is
what lets sequences of different lengths decode together in one batch. The gather index of a step is
built once and serves every layer. On a GPU, steps replay CUDA graphs instead (`graph_steps`, which
`engine_factory` builds and hands in); on the CPU in float32 the projections and the LM head run
through oneDNN with packed weights (cpu_linear), swapped into the model when the runner is built.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from triton_backend import cpu_linear
from triton_backend.kv_cache import CacheShape, PagedKVCache
from triton_backend.model_runner import DecodeInput, PrefillInput, StepGraphs


def cache_shape(model: GPT2LMHeadModel) -> CacheShape:
    config = model.config
    return CacheShape(
        n_layer=config.n_layer,
        n_head=config.n_head,
        head_dim=config.n_embd // config.n_head,
        max_len=config.n_positions,
        dtype=next(model.parameters()).dtype,
    )


def attention_scales(model: GPT2LMHeadModel) -> list[float]:
    """Each layer's attention scale, as transformers' GPT-2 applies it."""
    config = model.config
    base = 1.0 / (config.n_embd // config.n_head) ** 0.5 if config.scale_attn_weights else 1.0
    by_layer = config.scale_attn_by_inverse_layer_idx
    return [base / (i + 1) if by_layer else base for i in range(config.n_layer)]


class GPT2Runner:
    """With `graphs`, a step they hold replays them (`graph_steps.GraphSteps` on a CUDA device);
    every other step runs eagerly over a gathered cache.

    The runner owns `model` from then on: on the CPU in float32 (and with `pack_cpu`) its projections
    are replaced in place by oneDNN-packed ones, sized for batches of `batch_hint` rows.
    """

    def __init__(
        self,
        model: GPT2LMHeadModel,
        cache: PagedKVCache,
        graphs: StepGraphs | None = None,
        pack_cpu: bool = True,
        batch_hint: int = cpu_linear.BATCH_HINT,
    ) -> None:
        self.model = model
        self.cache = cache
        self.device = next(model.parameters()).device
        config = model.config
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.page_size = cache.shape.page_size
        self.scales = attention_scales(model)
        self.packed_linears = cpu_linear.pack_cpu_linears(model, batch_hint) if pack_cpu else 0
        self.graphs = graphs

    @torch.inference_mode()
    def step(
        self, decode: list[DecodeInput], chunks: list[PrefillInput]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """A step's decode rows and prefill chunks; returns the logits of each decode row and of each
        chunk's last position (fp32; None for an empty part). One graph replay where one fits."""
        if self.graphs is not None:
            done = self.graphs.step(decode, chunks)
            if done is not None:
                return (done[0] if decode else None), (done[1] if chunks else None)
        decoded = (
            self.decode([d.pages for d in decode], [d.token_id for d in decode], [d.position for d in decode])
            if decode
            else None
        )
        return decoded, self.prefill(chunks) if chunks else None

    @torch.inference_mode()
    def prefill(self, chunks: list[PrefillInput]) -> torch.Tensor:
        """Cache each chunk's tokens at positions start.. of its sequence, all chunks in one forward
        pass; returns the logits of each chunk's last position [chunks, vocab] (fp32).

        The chunks are laid end to end: a query sees the keys of its own sequence up to its position
        (the cached history and its chunk so far), nothing of the others.
        """
        device, page = self.device, self.page_size
        lists: tuple[list[int], ...] = tuple([] for _ in range(6))
        ids, positions, query_of, read_pages, key_pos, key_of = lists
        write_slot: list[int] = []
        for index, chunk in enumerate(chunks):
            total = chunk.start + len(chunk.token_ids)
            ids += chunk.token_ids
            positions += range(chunk.start, total)
            query_of += [index] * len(chunk.token_ids)
            held = chunk.pages[: -(-total // page)]
            read_pages += held
            key_pos += range(len(held) * page)  # the last page's slots past `total` are masked below
            key_of += [index] * (len(held) * page)
            write_slot += [chunk.pages[p // page] * page + p % page for p in range(chunk.start, total)]
        pos = torch.tensor(positions, device=device)
        same = torch.tensor(query_of, device=device)[:, None] == torch.tensor(key_of, device=device)[None, :]
        visible = same & (torch.tensor(key_pos, device=device)[None, :] <= pos[:, None])
        read, write = torch.tensor(read_pages, device=device), torch.tensor(write_slot, device=device)
        hidden = self._embed(torch.tensor([ids], device=device), pos[None, :])
        for layer, block in enumerate(self.model.transformer.h):
            q, k, v = self._qkv(block, hidden)
            keys, values = self._write_and_read(layer, write, k[0].transpose(0, 1), v[0].transpose(0, 1), read)
            keys, values = (t.view(-1, self.n_head, self.head_dim).transpose(0, 1)[None] for t in (keys, values))
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=self.scales[layer])
            hidden = self._finish_block(block, hidden, attn)
        ends = torch.tensor(list(itertools.accumulate(len(c.token_ids) for c in chunks)), device=device) - 1
        return self._logits(hidden[0, ends])

    @torch.inference_mode()
    def decode(
        self, page_tables: list[list[int]], token_ids: list[int], positions: list[int]
    ) -> torch.Tensor:
        """One token for each sequence at its position; returns logits [batch, vocab] (fp32)."""
        if self.graphs is not None:
            rows = [DecodeInput(*row) for row in zip(page_tables, token_ids, positions, strict=True)]
            done = self.graphs.step(rows, [])
            if done is not None:
                return done[0]
        batch = len(page_tables)
        ids = torch.tensor(token_ids, device=self.device)[:, None]
        pos = torch.tensor(positions, device=self.device)
        width = -(-(max(positions) + 1) // self.page_size)
        # [batch, width] pages; past a sequence's end they repeat its first page, and are masked.
        read = torch.tensor([t[:width] + [t[0]] * (width - len(t[:width])) for t in page_tables], device=self.device)
        write = read[torch.arange(batch, device=self.device), pos // self.page_size] * self.page_size
        write = write + pos % self.page_size
        span = width * self.page_size
        visible = (torch.arange(span, device=self.device)[None, :] <= pos[:, None])[:, None, None, :]
        hidden = self._embed(ids, pos[:, None])
        shape = (batch, span, self.n_head, self.head_dim)
        for layer, block in enumerate(self.model.transformer.h):
            q, k, v = self._qkv(block, hidden)
            keys, values = self._write_and_read(layer, write, k[:, :, 0], v[:, :, 0], read.view(-1))
            attn = F.scaled_dot_product_attention(
                q, keys.view(shape).transpose(1, 2), values.view(shape).transpose(1, 2),
                attn_mask=visible, scale=self.scales[layer],
            )  # fmt: skip
            hidden = self._finish_block(block, hidden, attn)
        return self._logits(hidden[:, -1])

    def _write_and_read(
        self, layer: int, write: torch.Tensor, k: torch.Tensor, v: torch.Tensor, read: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [tokens, heads, dim] at cache slots `write` (page * page_size + offset: one index
        over whole rows, which copies far faster than two); gather the whole pages `read`
        [pages, page_size, heads, dim]. Whole pages, not slots: on a CPU the gather of a decode step's
        keys took 4.5x as long slot by slot as page by page, more than the attention over them."""
        rows = (-1, self.n_head, self.head_dim)
        k_pages, v_pages = self.cache.k[layer], self.cache.v[layer]
        k_pages.view(rows).index_copy_(0, write, k)
        v_pages.view(rows).index_copy_(0, write, v)
        return k_pages.index_select(0, read), v_pages.index_select(0, read)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        transformer = self.model.transformer
        embedded: torch.Tensor = transformer.wte(ids) + transformer.wpe(positions)
        return embedded

    def _qkv(self, block: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, length, _ = hidden.shape
        qkv = block.attn.c_attn(block.ln_1(hidden))
        heads = qkv.view(batch, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        return heads[0], heads[1], heads[2]

    def _finish_block(self, block: Any, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = attn.shape
        merged = attn.transpose(1, 2).reshape(batch, length, self.n_head * self.head_dim)
        hidden = hidden + block.attn.c_proj(merged)
        mlp = block.mlp  # its modules called directly: the MLP's own forward adds an identity dropout
        out: torch.Tensor = hidden + mlp.c_proj(mlp.act(mlp.c_fc(block.ln_2(hidden))))
        return out

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        normed = self.model.transformer.ln_f(last_hidden)
        logits: torch.Tensor = self.model.lm_head(normed)
        return logits.float()
