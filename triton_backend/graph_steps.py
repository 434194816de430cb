"""Engine steps on a CUDA device: GPT-2's forward pass over a step's token rows, replayed from CUDA graphs.

Eager GPT2-XL launches about a thousand kernels a forward pass, and at decode sizes their launch cost,
not the GPU, sets the inter-token latency; an eager prefill chunk stalls the streams for as long. So
every step runs from a graph captured at start-up over static input buffers (token ids, positions,
page tables): a step copies its inputs in with one transfer, replays the graph of the smallest bucket
that holds its rows and reads the logits out. Two families of graphs:

- decode: one row per decoding sequence. Each row's new key and value are stored by the attention
  kernel itself, and batches of up to a few rows run the projections as our streaming kernels with the
  residual add and LayerNorm in their prologue (`gpu_configs` says up to how many, per GPU model).
- mixed: the decode rows and the prefill chunks' tokens in one pass, so a chunk costs the running
  streams its GPU time only, not an eager pass's launches. Every row's key and value are stored
  first (rows of one chunk attend to each other); logits are computed for one row per sequence.

Rows past the step's own point at a page table of the cache's scratch page only, so padding never
touches a real sequence. `capture=False` runs the same forward pass without graphs (tests on the CPU,
under Triton's interpreter).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from triton_backend.gpu_configs import KernelChoices, choices_for
from triton_backend.gpu_kernels import (
    LinearConfig,
    SplitWorkspace,
    add_layer_norm,
    linear,
    paged_attention,
    store_kv,
)
from triton_backend.kv_cache import PagedKVCache
from triton_backend.model_runner import DecodeInput, PrefillInput

_DECODE_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)
_MIXED_BUCKETS = (16, 32, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096)


def batch_buckets(max_batch: int) -> list[int]:
    """Captured decode batch sizes: fine steps where padding would cost most, and max_batch itself."""
    return [b for b in _DECODE_BUCKETS if b < max_batch] + [max_batch]


def mixed_buckets(max_rows: int) -> list[int]:
    """Captured row counts of steps with prefill tokens, and max_rows itself."""
    return [b for b in _MIXED_BUCKETS if b < max_rows] + [max_rows]


class GraphSteps:
    def __init__(
        self,
        model: GPT2LMHeadModel,
        cache: PagedKVCache,
        scales: list[float],
        max_batch: int,
        max_prefill_tokens: int = 0,
        capture: bool = True,
        choices: KernelChoices | None = None,
    ) -> None:
        self.model = model
        self.cache = cache
        self.scales = scales
        self.max_batch = max_batch
        self.max_rows = max_batch + max_prefill_tokens if max_prefill_tokens else 0
        device = cache.k.device
        self.choices = choices or choices_for(torch.cuda.get_device_name(device) if device.type == "cuda" else "")
        rows = max(max_batch, self.max_rows)
        self._workspace = SplitWorkspace.allocate(device, *self.choices.split_needs(rows))
        self.slots = max_batch + 1  # the last one's table is all scratch: padding rows use it
        self.width = cache.shape.pages_per_sequence
        # One int32 buffer holds every input, so a step copies them in with one transfer.
        self._layout = [rows, rows, rows, self.slots * self.width, self.slots]
        ints = torch.zeros(sum(self._layout), dtype=torch.int32, device=device)
        ids, positions, slots, tables, logit_rows = torch.split(ints, self._layout)
        self._ints, self._ids, self._positions, self._slots = ints, ids, positions, slots
        self._tables, self._logit_rows = tables.view(self.slots, self.width), logit_rows
        pin = device.type == "cuda"
        self._staging = [torch.zeros(ints.numel(), dtype=torch.int32, pin_memory=pin) for _ in range(2)]
        self._flip = 0
        self._reset(self._staging[0].numpy())
        ints.copy_(self._staging[0])
        self._weights = _transposed_projections(model)
        self._gelu_epilogue = device.type == "cuda" and self._epilogue_is_tanh_gelu()
        self._decode_buckets = batch_buckets(max_batch)
        self._mixed_buckets = mixed_buckets(self.max_rows) if self.max_rows else []
        self._graphs: dict[tuple[str, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._capture = capture
        if capture:
            self._capture_all(self._decode_buckets, self._mixed_buckets)

    @torch.inference_mode()
    def step(
        self, decode: list[DecodeInput], prefill: list[PrefillInput]
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Decode rows and prefill chunks in one pass. Returns the logits of each decode row and of
        each chunk's last token (valid until the next call), or None if the step does not fit a
        captured graph (the caller runs it eagerly)."""
        rows = len(decode) + sum(len(chunk.token_ids) for chunk in prefill)
        if prefill:
            if rows > self.max_rows or len(decode) + len(prefill) >= self.slots:
                return None
            key = ("mixed", next(b for b in self._mixed_buckets if b >= rows))
        else:
            if len(decode) > self.max_batch:
                return None
            key = ("decode", next(b for b in self._decode_buckets if b >= len(decode)))
        staging = self._staging[self._flip]
        self._flip ^= 1
        self._fill(staging.numpy(), decode, prefill, key[1])
        self._ints.copy_(staging, non_blocking=True)
        logits = self._run(key)
        return logits[: len(decode)], logits[len(decode) : len(decode) + len(prefill)]

    def _run(self, key: tuple[str, int]) -> torch.Tensor:
        if not self._capture:
            return self._forward(key)
        graph, logits = self._graphs[key]
        graph.replay()
        return logits

    def _reset(self, staging: np.ndarray[Any, Any]) -> None:
        """Every row padding: token 0 at position 0 in the all-scratch slot; every table scratch."""
        rows = self._layout[0]
        staging[: 3 * rows] = 0
        staging[2 * rows : 3 * rows] = self.slots - 1
        staging[3 * rows : 3 * rows + self.slots * self.width] = self.cache.scratch_page
        staging[3 * rows + self.slots * self.width :] = 0

    def _fill(
        self,
        staging: np.ndarray[Any, Any],
        decode_rows: list[DecodeInput],
        prefill: list[PrefillInput],
        bucket: int,
    ) -> None:
        self._reset(staging)
        rows = self._layout[0]
        ids, pos, slots = staging[:rows], staging[rows : 2 * rows], staging[2 * rows : 3 * rows]
        decode = len(decode_rows)
        ids[:decode] = [d.token_id for d in decode_rows]
        pos[:decode] = [d.position for d in decode_rows]
        slots[:decode] = np.arange(decode)
        logit_rows = list(range(decode))
        row = decode
        for index, chunk in enumerate(prefill):
            end = row + len(chunk.token_ids)
            ids[row:end] = chunk.token_ids
            pos[row:end] = np.arange(chunk.start, chunk.start + len(chunk.token_ids))
            slots[row:end] = decode + index
            logit_rows.append(end - 1)
            row = end
        if not prefill:
            slots[decode:bucket] = np.arange(decode, bucket)  # decode graphs: row i uses slot i
        tables = [*(d.pages for d in decode_rows), *(chunk.pages for chunk in prefill)]
        lengths = np.fromiter((len(t) for t in tables), dtype=np.int64, count=len(tables))
        before = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # entries of the tables ahead of each
        starts = np.repeat(np.arange(len(tables)) * self.width - before, lengths)
        flat = np.fromiter(itertools.chain.from_iterable(tables), dtype=np.int32, count=int(lengths.sum()))
        base = 3 * rows
        staging[base + starts + np.arange(len(flat))] = flat
        staging[base + self.slots * self.width : base + self.slots * self.width + len(logit_rows)] = logit_rows

    def _capture_all(self, decode: list[int], mixed: list[int]) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        keys = [("mixed", b) for b in sorted(mixed, reverse=True)]
        keys += [("decode", b) for b in sorted(decode, reverse=True)]
        with torch.inference_mode(), torch.cuda.stream(stream):
            for key in keys:  # largest first: the others reuse its memory
                for _ in range(2):  # Triton compiles and cuBLAS picks kernels outside the capture
                    self._forward(key)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    logits = self._forward(key)
                self._graphs[key] = (graph, logits)
        torch.cuda.current_stream().wait_stream(stream)

    def _forward(self, key: tuple[str, int]) -> torch.Tensor:
        family, rows = key
        mixed = family == "mixed"
        transformer: Any = self.model.transformer
        blocks = list(transformer.h)
        ids, positions, slots = self._ids[:rows], self._positions[:rows], self._slots[:rows]
        attention = self.choices.attention_for(rows)
        hidden = transformer.wte(ids) + transformer.wpe(positions)
        pending: torch.Tensor | None = None  # the last projection's output, not yet added to hidden
        for layer, block in enumerate(blocks):
            hidden, qkv = self._norm_project(hidden, pending, block.ln_1, block.attn.c_attn, rows)
            k_cache, v_cache = self.cache.k[layer], self.cache.v[layer]
            if mixed:
                store_kv(qkv, k_cache, v_cache, self._tables, slots, positions)
            attn = paged_attention(
                qkv, k_cache, v_cache, self._tables, slots, positions, self.scales[layer], attention, store=not mixed
            )
            merged = self._project(attn, block.attn.c_proj, rows)
            hidden, fc = self._norm_project(hidden, merged, block.ln_2, block.mlp.c_fc, rows, gelu=True)
            pending = self._project(fc, block.mlp.c_proj, rows)
        assert pending is not None
        normed = add_layer_norm(hidden, pending, transformer.ln_f)
        if mixed:
            normed = normed.index_select(0, self._logit_rows)
        head = self.model.lm_head.weight
        config = self.choices.linear_for(normed.shape[0], head.shape[0], head.shape[1])
        if config is not None:
            return linear(normed, head, None, config, out_dtype=torch.float32, workspace=self._workspace)
        logits: torch.Tensor = self.model.lm_head(normed).float()
        return logits

    def _config(self, rows: int, module: Any) -> LinearConfig | None:
        k, n = module.weight.shape  # transformers' Conv1D: weight [in, out]
        return self.choices.linear_for(rows, n, k)

    def _norm_project(
        self, hidden: torch.Tensor, pending: torch.Tensor | None, norm: Any, module: Any, rows: int, gelu: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden += pending; returns it and module(norm(hidden)), GELU-ed if asked."""
        config = self._config(rows, module)
        if config is not None:
            weight = self._weights[id(module)]
            if pending is None:
                return hidden, linear(
                    hidden, weight, module.bias, config, norm=norm, gelu=gelu, workspace=self._workspace
                )
            summed = torch.empty_like(hidden)  # the kernel's programs all read hidden: the sum goes elsewhere
            out = linear(
                hidden, weight, module.bias, config, delta=pending, h_out=summed, norm=norm, gelu=gelu,
                workspace=self._workspace,
            )  # fmt: skip
            return summed, out
        normed = norm(hidden) if pending is None else add_layer_norm(hidden, pending, norm)
        if not gelu:
            return hidden, torch.addmm(module.bias, normed, module.weight)
        if self._gelu_epilogue:
            return hidden, torch._addmm_activation(module.bias, normed, module.weight, use_gelu=True)
        return hidden, F.gelu(torch.addmm(module.bias, normed, module.weight), approximate="tanh")

    def _project(self, x: torch.Tensor, module: Any, rows: int) -> torch.Tensor:
        config = self._config(rows, module)
        if config is not None:
            return linear(x, self._weights[id(module)], module.bias, config, workspace=self._workspace)
        return torch.addmm(module.bias, x, module.weight)

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


def _transposed_projections(model: GPT2LMHeadModel) -> dict[int, torch.Tensor]:
    """Each projection's weight as [out, in] with rows contiguous, the layout our kernels stream.

    transformers' Conv1D keeps [in, out]; the storage is transposed in place, so the module (and
    cuBLAS, which takes either layout) keeps working on a strided view and no memory is added.
    """
    weights = {}
    transformer: Any = model.transformer
    for block in transformer.h:
        for module in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            module.weight.data = module.weight.data.t().contiguous().t()
            weights[id(module)] = module.weight.t()
    return weights
