"""The two Triton kernels of the GPU decode step: paged attention and a fused residual add + LayerNorm.

`paged_decode_attention` stores each sequence's new key and value in its page and attends over its
cached positions, walking the page table in place: no gathered copy, and a loop bound read on the
device (the positions), so one launch serves every step of a captured CUDA graph. The new position's
own key and value come from registers. One program per (sequence, head), DECODE_BLOCK positions an iteration.

`add_layer_norm` adds a block's output to the residual stream and normalises the sum for the next
block in one pass: at decode sizes each kernel costs about its launch, so two fewer per layer matter.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the portable path runs instead
    triton = None


# Positions an iteration and warps a program of the attention kernel: the best of a sweep of
# 16-128 x 1-8 on an H100 (gpt2-xl fp16, context 192; benchmarks/engine_gpu.md).
DECODE_BLOCK = 16
DECODE_WARPS = 1


def available() -> bool:
    """Whether the `triton` package is installed (CUDA builds of torch bring it)."""
    return triton is not None


if triton is not None:

    @triton.jit  # type: ignore[untyped-decorator]
    def _decode_kernel(  # type: ignore[no-untyped-def]  # Triton rejects non-constexpr annotations
        q_ptr, k_new_ptr, v_new_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, positions_ptr, scale,
        stride_qb, stride_qh, stride_page, stride_off, stride_head, stride_tb, stride_ob, stride_oh,
        PAGE: tl.constexpr, BLOCK: tl.constexpr, DIM: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        dims = tl.arange(0, DIM)
        offs = tl.arange(0, BLOCK)
        row = b * stride_qb + h * stride_qh + dims
        q = tl.load(q_ptr + row).to(tl.float32) * scale
        k_new = tl.load(k_new_ptr + row)
        v_new = tl.load(v_new_ptr + row)
        position = tl.load(positions_ptr + b)
        table = tables_ptr + b * stride_tb
        page_new = tl.load(table + position // PAGE).to(tl.int64)
        at_new = page_new * stride_page + (position % PAGE) * stride_off + h * stride_head + dims
        tl.store(k_ptr + at_new, k_new)
        tl.store(v_ptr + at_new, v_new)
        # The online softmax starts from the new position; the loop covers positions before it.
        best = tl.sum(q * k_new.to(tl.float32), axis=0)
        total = tl.full((), 1.0, tl.float32)
        acc = v_new.to(tl.float32)
        for start in range(0, position, BLOCK):
            index = start + offs
            valid = index < position
            page = tl.load(table + index // PAGE, mask=valid, other=0).to(tl.int64)
            where = (page * stride_page + (index % PAGE) * stride_off + h * stride_head)[:, None] + dims[None, :]
            k = tl.load(k_ptr + where, mask=valid[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_ptr + where, mask=valid[:, None], other=0.0).to(tl.float32)
            scores = tl.where(valid, tl.sum(k * q[None, :], axis=1), -float("inf"))
            new_best = tl.maximum(best, tl.max(scores, axis=0))
            correction = tl.exp(best - new_best)
            weights = tl.exp(scores - new_best)
            acc = acc * correction + tl.sum(weights[:, None] * v, axis=0)
            total = total * correction + tl.sum(weights, axis=0)
            best = new_best
        tl.store(out_ptr + b * stride_ob + h * stride_oh + dims, (acc / total).to(out_ptr.dtype.element_ty))

    @triton.jit  # type: ignore[untyped-decorator]
    def _add_layer_norm_kernel(  # type: ignore[no-untyped-def]
        hidden_ptr, delta_ptr, weight_ptr, bias_ptr, out_ptr, width, eps, BLOCK: tl.constexpr
    ):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < width
        at = row * width + cols
        x = tl.load(hidden_ptr + at, mask=mask, other=0.0).to(tl.float32)
        x += tl.load(delta_ptr + at, mask=mask, other=0.0).to(tl.float32)
        # Normalise the sum as stored (rounded to the stream's dtype), as an unfused add then LayerNorm would.
        x = x.to(hidden_ptr.dtype.element_ty)
        tl.store(hidden_ptr + at, x, mask=mask)
        x = x.to(tl.float32)
        mean = tl.sum(x, axis=0) / width
        centred = tl.where(mask, x - mean, 0.0)
        inv_std = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / width + eps)
        weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + at, (centred * inv_std * weight + bias).to(out_ptr.dtype.element_ty), mask=mask)


def _need_triton() -> None:
    if triton is None:
        raise RuntimeError("the GPU decode kernels need the `triton` package (it comes with CUDA builds of torch)")


def paged_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Store k, v at each sequence's position and attend from q over positions 0..position.

    q, k, v [batch, heads, dim] with equal strides and a contiguous last dim; k_cache, v_cache
    [pages, page_size, heads, dim] (one layer); tables [batch, max_pages] page ids; positions [batch].
    Returns [batch, heads, dim].
    """
    _need_triton()
    batch, heads, dim = q.shape
    out = torch.empty((batch, heads, dim), dtype=q.dtype, device=q.device)
    _decode_kernel[(batch, heads)](
        q, k, v, k_cache, v_cache, out, tables, positions, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        tables.stride(0), out.stride(0), out.stride(1),
        PAGE=k_cache.shape[1], BLOCK=DECODE_BLOCK, DIM=dim, num_warps=DECODE_WARPS,
    )  # fmt: skip
    return out


def add_layer_norm(hidden: torch.Tensor, delta: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """hidden += delta (in place); returns norm(hidden). Both [rows, width], contiguous."""
    _need_triton()
    rows, width = hidden.shape
    out = torch.empty_like(hidden)
    _add_layer_norm_kernel[(rows,)](
        hidden, delta, norm.weight, norm.bias, out, width, norm.eps, BLOCK=triton.next_power_of_2(width)
    )
    return out
