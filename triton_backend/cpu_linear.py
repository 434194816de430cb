"""CPU float32 serving: GPT-2's projections and LM head through oneDNN with weights packed once.

MKL's GEMM behind ``torch.addmm`` (what transformers' ``Conv1D`` calls) is tuned for large matrices;
for the 1-64 rows of a decode step it runs at a fraction of what the same cores do with oneDNN's
``_linear_pointwise`` over a weight reordered ahead of time (the path ``torch.compile`` takes on a
CPU when it freezes weights). Measured here: 2-3x for 16-64 rows, 1.6x for one
(benchmarks/engine_cpu.md). The packed layout depends on the CPU, so weights are packed where they
are served, never saved.

:func:`pack_cpu_linears` swaps a model's modules in place; each swap is checked against the module it
replaces on a random input, and a module whose packed result differs stays as it was.

oneDNN builds a primitive for each row count it is given and keeps up to 1,024 of them (its primitive
cache, about 0.6 MB each at GPT-2's widths). A served engine's steps have every row count from 1 to
max_num_seqs + prefill_chunk_tokens, so over hours of traffic the cache filled and the model's memory
rose by about half a GB (benchmarks/soak.md). Rows are padded up to :func:`padded_rows` instead:
exact up to `EXACT_ROWS` (batch-1 latency pays nothing), then to one of `STEPS_PER_DOUBLING` counts
per doubling, so no step computes more than an eighth of padding and a width needs about 50
primitives for the default settings, built in the first minutes of traffic.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import GPT2LMHeadModel
from transformers.activations import NewGELUActivation

log = logging.getLogger(__name__)

_RTOL = _ATOL = 1e-4


def available() -> bool:
    return bool(torch._C._has_mkldnn) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


#: The rows oneDNN lays packed weights out for.
BATCH_HINT = 16
EXACT_ROWS = 16
STEPS_PER_DOUBLING = 8


def padded_rows(rows: int) -> int:
    """The row count oneDNN is given for ``rows`` rows: ``rows`` up to `EXACT_ROWS`, above it the
    next multiple of 1/`STEPS_PER_DOUBLING` of the power of two at or below ``rows``."""
    if rows <= EXACT_ROWS:
        return rows
    step = (1 << (rows.bit_length() - 1)) // STEPS_PER_DOUBLING
    return -(-rows // step) * step


class PackedLinear(torch.nn.Module):
    """``x @ weight.T + bias`` with ``weight`` [out, in] packed for oneDNN; any leading dimensions.

    ``gelu_tanh`` applies GPT-2's GELU (the tanh approximation) in the same call: one pass over the
    MLP's widest activation instead of the five elementwise ones transformers' ``gelu_new`` makes.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, batch_hint: int, gelu_tanh: bool = False
    ) -> None:
        super().__init__()
        self.out_features = weight.shape[0]
        self._post = ("gelu", "tanh") if gelu_tanh else ("none", "")
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_hint)
        self.bias = None if bias is None else bias.detach().contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        count = rows.shape[0]
        if (padded := padded_rows(count)) != count:
            rows = torch.nn.functional.pad(rows, (0, 0, 0, padded - count))
        attr, algorithm = self._post
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, attr, [], algorithm)
        return out[:count].view(*x.shape[:-1], self.out_features)


def pack_cpu_linears(model: GPT2LMHeadModel, batch_hint: int, seed: int = 0) -> int:
    """Replaces the attention and MLP projections of every block and the LM head (untied from the
    embedding, which stays) with :class:`PackedLinear`, GPT-2's GELU fused into the MLP's first
    projection; returns how many were replaced. A model packed before (build_engine packs it before
    it reads the memory left for the KV cache) is left as it is; the count is then of its packed modules.

    Only for float32 models on the CPU; anything else is left alone (returns 0).
    """
    first = next(model.parameters())
    if first.device.type != "cpu" or first.dtype != torch.float32 or not available():
        return 0
    if packed := sum(isinstance(module, PackedLinear) for module in model.modules()):
        return packed
    generator = torch.Generator().manual_seed(seed)
    replaced = 0

    def swap(
        owner: torch.nn.Module, name: str, weight: torch.Tensor, bias: torch.Tensor | None, act: Any = None
    ) -> bool:
        """Replaces ``owner.name`` (followed by ``act``, fused in, when given) if the packed module
        computes the same on a random input."""
        nonlocal replaced
        original = getattr(owner, name)
        packed = PackedLinear(weight, bias, batch_hint, gelu_tanh=act is not None)
        probe = torch.randn(3, weight.shape[1], generator=generator)
        with torch.inference_mode():
            want = original(probe) if act is None else act(original(probe))
            if not torch.allclose(packed(probe), want, rtol=_RTOL, atol=_ATOL):
                log.warning("oneDNN's packed %s differs from the original; keeping the original", name)
                return False
        setattr(owner, name, packed)
        replaced += 1
        return True

    block: Any
    for block in model.transformer.h:
        for owner, name in ((block.attn, "c_attn"), (block.attn, "c_proj"), (block.mlp, "c_proj")):
            conv = getattr(owner, name)  # transformers' Conv1D keeps its weight as [in, out]
            swap(owner, name, conv.weight.t(), conv.bias)
        fc, act = block.mlp.c_fc, block.mlp.act
        fuse = act if isinstance(act, NewGELUActivation) else None
        if swap(block.mlp, "c_fc", fc.weight.t(), fc.bias, fuse) and fuse is not None:
            block.mlp.act = torch.nn.Identity()
    swap(model, "lm_head", model.lm_head.weight, model.lm_head.bias)
    return replaced
