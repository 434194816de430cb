"""Decode steps on a CUDA device: GPT-2's whole forward pass replayed from one CUDA graph a step.

Eager GPT2-XL decode launches about a thousand kernels a step, and at small batches their launch cost,
not the GPU, sets the inter-token latency. Here each batch-size bucket's step is captured once at
start-up over static input buffers (token ids, positions, page tables); a step copies its inputs in,
replays the graph of the smallest bucket that holds the batch, and reads the logits out. Rows past
the batch point at the cache's scratch page, so padding never touches a real sequence. Attention reads
the paged cache in place (`gpu_kernels`), so the graph's shapes do not depend on context length; the
residual adds are fused with the LayerNorms that follow them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from triton_backend.gpu_kernels import add_layer_norm, paged_decode_attention
from triton_backend.kv_cache import PagedKVCache

_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)


def batch_buckets(max_batch: int) -> list[int]:
    """Captured batch sizes: fine steps where padding would cost most, and max_batch itself."""
    return [b for b in _BUCKETS if b < max_batch] + [max_batch]


class GraphDecoder:
    def __init__(self, model: GPT2LMHeadModel, cache: PagedKVCache, scales: list[float], max_batch: int) -> None:
        self.model = model
        self.cache = cache
        self.scales = scales
        config = model.config
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.page_size = cache.shape.page_size
        self.max_batch = max_batch
        device = cache.k.device
        self.ids = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.tables = torch.full(
            (max_batch, cache.shape.pages_per_sequence), cache.scratch_page, dtype=torch.int32, device=device
        )
        # Inputs are staged in pinned host memory and copied in one go, off the Python thread's path.
        self._staging = torch.zeros(max_batch, 2 + cache.shape.pages_per_sequence, dtype=torch.long).pin_memory()
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._gelu_epilogue = self._epilogue_is_tanh_gelu()
        self._capture(batch_buckets(max_batch))

    @torch.inference_mode()
    def decode(self, page_tables: list[list[int]], token_ids: list[int], positions: list[int]) -> torch.Tensor:
        """Same contract as `GPT2Runner.decode`; the logits are valid until the next call."""
        batch = len(page_tables)
        bucket = next(b for b in self._graphs if b >= batch)
        width = self.tables.shape[1]
        scratch = self.cache.scratch_page
        rows = [
            [token, position, *table, *[scratch] * (width - len(table))]
            for token, position, table in zip(token_ids, positions, page_tables, strict=True)
        ]
        staging = self._staging[:bucket]
        staging[:batch] = torch.tensor(rows)
        staging[batch:, :2] = 0
        staging[batch:, 2:] = scratch
        on_device = staging.to(self.ids.device, non_blocking=True)
        self.ids[:bucket].copy_(on_device[:, 0])
        self.positions[:bucket].copy_(on_device[:, 1])
        self.tables[:bucket].copy_(on_device[:, 2:])
        graph, logits = self._graphs[bucket]
        graph.replay()
        return logits[:batch]

    def _capture(self, buckets: list[int]) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for bucket in sorted(buckets, reverse=True):  # largest first: the others reuse its memory
                for _ in range(2):  # Triton compiles and cuBLAS picks kernels outside the capture
                    self._forward(bucket)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    logits = self._forward(bucket)
                self._graphs[bucket] = (graph, logits)
        torch.cuda.current_stream().wait_stream(stream)
        self._graphs = dict(sorted(self._graphs.items()))

    def _forward(self, batch: int) -> torch.Tensor:
        transformer: Any = self.model.transformer
        blocks = list(transformer.h)
        ids, positions, tables = self.ids[:batch], self.positions[:batch], self.tables[:batch]
        hidden = transformer.wte(ids) + transformer.wpe(positions)
        normed = blocks[0].ln_1(hidden)
        for layer, block in enumerate(blocks):
            q, k, v = block.attn.c_attn(normed).view(batch, 3, self.n_head, self.head_dim).unbind(1)
            attn = paged_decode_attention(
                q, k, v, self.cache.k[layer], self.cache.v[layer], tables, positions, self.scales[layer]
            )
            merged = block.attn.c_proj(attn.view(batch, self.n_head * self.head_dim))
            normed = add_layer_norm(hidden, merged, block.ln_2)
            mlp = block.mlp.c_proj(self._fc_activation(block.mlp, normed))
            after = blocks[layer + 1].ln_1 if layer + 1 < len(blocks) else transformer.ln_f
            normed = add_layer_norm(hidden, mlp, after)
        logits: torch.Tensor = self.model.lm_head(normed).float()
        return logits

    def _fc_activation(self, mlp: Any, x: torch.Tensor) -> torch.Tensor:
        # GPT-2's gelu_new is GELU's tanh approximation, which cuBLASLt applies in the matmul's epilogue;
        # transformers spells it as seven elementwise kernels.
        if self._gelu_epilogue:
            return torch._addmm_activation(mlp.c_fc.bias, x, mlp.c_fc.weight, use_gelu=True)
        if self.model.config.activation_function == "gelu_new":
            return F.gelu(mlp.c_fc(x), approximate="tanh")
        out: torch.Tensor = mlp.act(mlp.c_fc(x))
        return out

    @torch.inference_mode()
    def _epilogue_is_tanh_gelu(self) -> bool:
        """Whether this build's fused GELU matmul is GPT-2's gelu_new (tanh approximation; the CPU
        build's is exact GELU). Checked in fp32, where the two differ by far more than rounding."""
        if self.model.config.activation_function != "gelu_new":
            return False
        device = self.cache.k.device
        for rows in (1, self.max_batch):
            x, w, b = (torch.randn(*shape, device=device) * 2 for shape in ((rows, 64), (64, 256), (256,)))
            fused = torch._addmm_activation(b, x, w, use_gelu=True)
            plain = torch.addmm(b, x, w)
            off_tanh = (fused - F.gelu(plain, approximate="tanh")).abs().max()
            off_exact = (fused - F.gelu(plain)).abs().max()
            if not off_tanh * 10 < off_exact:
                return False
        return True
