"""GPT-2's forward pass over the slot KV cache: chunked prefill of one sequence, batched decode.

The layers (layer norms, projections, MLP) are the transformers modules with their weights; only
attention is ours, because it reads and writes the shared cache at each sequence's own position.
That is what lets sequences of different lengths decode together in one batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from triton_backend.kv_cache import CacheShape, SlotKVCache


def cache_shape(model: GPT2LMHeadModel) -> CacheShape:
    config = model.config
    return CacheShape(
        n_layer=config.n_layer,
        n_head=config.n_head,
        head_dim=config.n_embd // config.n_head,
        max_len=config.n_positions,
        dtype=next(model.parameters()).dtype,
    )


class GPT2Runner:
    def __init__(self, model: GPT2LMHeadModel, cache: SlotKVCache) -> None:
        self.model = model
        self.cache = cache
        self.device = next(model.parameters()).device
        config = model.config
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        base = 1.0 / self.head_dim**0.5 if config.scale_attn_weights else 1.0
        by_layer = config.scale_attn_by_inverse_layer_idx
        self.scales = [base / (i + 1) if by_layer else base for i in range(config.n_layer)]

    @torch.inference_mode()
    def prefill(self, slot: int, token_ids: list[int], start: int) -> torch.Tensor:
        """Run tokens at positions start.. of `slot`; returns the last position's logits (fp32)."""
        count = len(token_ids)
        ids = torch.tensor([token_ids], device=self.device)
        positions = torch.arange(start, start + count, device=self.device)
        total = start + count
        # Query i sits at position start + i and may see keys at positions 0..start + i.
        causal = torch.arange(total, device=self.device)[None, :] <= positions[:, None]
        hidden = self._embed(ids, positions[None, :])
        for layer, block in enumerate(self.model.transformer.h):
            q, k, v = self._qkv(block, hidden)
            self.cache.k[layer, slot, :, start:total] = k[0]
            self.cache.v[layer, slot, :, start:total] = v[0]
            keys = self.cache.k[layer, slot : slot + 1, :, :total]
            values = self.cache.v[layer, slot : slot + 1, :, :total]
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=causal, scale=self.scales[layer])
            hidden = self._finish_block(block, hidden, attn)
        return self._logits(hidden[:, -1])[0]

    @torch.inference_mode()
    def decode(self, slots: list[int], token_ids: list[int], positions: list[int]) -> torch.Tensor:
        """One token for each slot at its position; returns logits [len(slots), vocab] (fp32)."""
        batch = len(slots)
        ids = torch.tensor(token_ids, device=self.device)[:, None]
        pos = torch.tensor(positions, device=self.device)
        slot_idx = torch.tensor(slots, device=self.device)
        span = max(positions) + 1
        visible = (torch.arange(span, device=self.device)[None, :] <= pos[:, None])[:, None, None, :]
        dense = slots == list(range(batch))
        hidden = self._embed(ids, pos[:, None])
        for layer, block in enumerate(self.model.transformer.h):
            q, k, v = self._qkv(block, hidden)
            self.cache.k[layer, slot_idx, :, pos] = k[:, :, 0]
            self.cache.v[layer, slot_idx, :, pos] = v[:, :, 0]
            if dense:
                keys = self.cache.k[layer, :batch, :, :span]
                values = self.cache.v[layer, :batch, :, :span]
            else:
                keys = self.cache.k[layer, slot_idx, :, :span]
                values = self.cache.v[layer, slot_idx, :, :span]
            attn = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=visible, scale=self.scales[layer]
            )
            hidden = self._finish_block(block, hidden, attn)
        return self._logits(hidden[:, -1])

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        transformer = self.model.transformer
        embedded: torch.Tensor = transformer.wte(ids) + transformer.wpe(positions)
        return embedded

    def _qkv(self, block: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, length, width = hidden.shape
        qkv = block.attn.c_attn(block.ln_1(hidden))
        heads = qkv.view(batch, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        return heads[0], heads[1], heads[2]

    def _finish_block(self, block: Any, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = attn.shape
        merged = attn.transpose(1, 2).reshape(batch, length, self.n_head * self.head_dim)
        hidden = hidden + block.attn.c_proj(merged)
        out: torch.Tensor = hidden + block.mlp(block.ln_2(hidden))
        return out

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        normed = self.model.transformer.ln_f(last_hidden)
        logits: torch.Tensor = self.model.lm_head(normed)
        return logits.float()
