"""The Triton kernels of the GPU forward pass over token rows: projections, paged attention, LayerNorm.

A step's rows are tokens: one per decoding sequence, and each prefill chunk's tokens. Every row
carries its position and a slot into the step's page tables; attention walks the paged cache in place
(no gathered copy) with a loop bound read on the device, so one launch serves every step a captured
CUDA graph replays, whatever the context lengths.

- `linear`: out = x @ W.T + b for a few rows (decode batches), streaming W once. The residual add and
  the LayerNorm before a projection run in its prologue (every program normalises the few rows
  itself; program 0 also stores the new residual stream), GELU in its epilogue. Below 16 rows the
  products are FMAs on the CUDA cores (`dot=False`); from 16 rows on, tensor cores. A projection of
  few output columns has too few column blocks to keep every multiprocessor streaming, so its
  reduction can be split too (`split`): each program then takes one slice of K, stores a float32
  partial, and the last program of a column block to finish (counted on a device counter, reset by
  that program) adds the partials in a fixed order and applies the epilogue. Deterministic, and one
  launch, as a captured step needs.
- `paged_attention`: one program per (row, head, split of the context); with several splits a second
  kernel (`_combine_kernel`) merges their partial softmaxes (flash-decoding), so a batch of one
  sequence still spreads over the multiprocessors. In a decode-only step each row's new key and
  value come from registers and are stored by the program whose split holds them (`store=True`); in
  a step with prefill rows `store_kv` writes every row's first, since rows of one chunk see each other.
- `add_layer_norm`: the residual add and LayerNorm between cuBLAS projections (larger batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the portable path runs instead
    triton = None


@dataclass(frozen=True)
class LinearConfig:
    dot: bool  # tensor cores (rows padded to >= 16) rather than CUDA-core FMAs
    block_n: int  # output columns a program
    block_k: int  # reduction depth an iteration
    warps: int
    stages: int = 1
    split: int = 1  # slices of the reduction, each a program's (split-K)


@dataclass(frozen=True)
class SplitWorkspace:
    """Device memory a split-K projection uses: float32 partials, and a counter per column block
    (all zero between launches). Launches on one stream run one after another, so one workspace
    serves every projection of a step."""

    partials: torch.Tensor
    counters: torch.Tensor

    @staticmethod
    def allocate(device: torch.device, floats: int, blocks: int) -> SplitWorkspace:
        return SplitWorkspace(
            torch.empty(max(floats, 1), dtype=torch.float32, device=device),
            torch.zeros(max(blocks, 1), dtype=torch.int32, device=device),
        )


@dataclass(frozen=True)
class AttentionConfig:
    split: int  # context positions a program (a multiple of block); >= max_len: no split
    block: int  # positions an iteration
    warps: int


def available() -> bool:
    """Whether the `triton` package is installed (CUDA builds of torch bring it)."""
    return triton is not None


if triton is not None:

    @triton.jit  # type: ignore[untyped-decorator]
    def _linear_finish(  # type: ignore[no-untyped-def]
        acc, bias_ptr, out_ptr, rows, row_ok, n, n_ok, stride_om, BIAS: tl.constexpr, GELU: tl.constexpr
    ):
        if BIAS:
            acc += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GELU:  # GPT-2's gelu_new: GELU's tanh approximation; tanh(y) = 1 - 2 / (exp(2y) + 1)
            inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0))
        out_at = rows[:, None] * stride_om + n[None, :]
        tl.store(out_ptr + out_at, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])

    @triton.jit  # type: ignore[untyped-decorator]
    def _linear_kernel(  # type: ignore[no-untyped-def]  # Triton rejects non-constexpr annotations
        x_ptr, delta_ptr, h_out_ptr, ln_w_ptr, ln_b_ptr, w_ptr, bias_ptr, out_ptr, partials_ptr, counters_ptr,
        M, N, K, KS, eps, stride_xm, stride_wn, stride_om,
        ROWS: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KP: tl.constexpr, SPLIT: tl.constexpr,
        ADD: tl.constexpr, NORM: tl.constexpr, BIAS: tl.constexpr, GELU: tl.constexpr,
        DOT: tl.constexpr, IEEE: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0)
        part = tl.program_id(1)
        rows = tl.arange(0, ROWS)
        row_ok = rows < M
        n = pid * BN + tl.arange(0, BN)
        n_ok = n < N
        element = x_ptr.dtype.element_ty
        mean = tl.zeros((ROWS,), tl.float32)
        rstd = tl.zeros((ROWS,), tl.float32)
        if NORM:
            cols = tl.arange(0, KP)
            whole = row_ok[:, None] & (cols < K)[None, :]
            whole_at = rows[:, None] * stride_xm + cols[None, :]
            h = tl.load(x_ptr + whole_at, mask=whole, other=0.0)
            if ADD:
                # The sum is rounded to the stream's dtype before it is normalised, as unfused ops do.
                h = (h.to(tl.float32) + tl.load(delta_ptr + whole_at, mask=whole, other=0.0).to(tl.float32)).to(
                    element
                )
                if (pid == 0) & (part == 0):
                    tl.store(h_out_ptr + whole_at, h, mask=whole)
            hf = h.to(tl.float32)
            mean = tl.sum(hf, axis=1) / K
            centred = tl.where(whole, hf - mean[:, None], 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / K + eps)
        acc = tl.zeros((ROWS, BN), tl.float32)
        for k0 in range(part * KS, part * KS + KS, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < K
            ok = row_ok[:, None] & k_ok[None, :]
            at = rows[:, None] * stride_xm + ks[None, :]
            x = tl.load(x_ptr + at, mask=ok, other=0.0)
            if ADD:
                x = (x.to(tl.float32) + tl.load(delta_ptr + at, mask=ok, other=0.0).to(tl.float32)).to(element)
            if NORM:
                gain = tl.load(ln_w_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
                shift = tl.load(ln_b_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
                x = ((x.to(tl.float32) - mean[:, None]) * rstd[:, None] * gain[None, :] + shift[None, :]).to(element)
            w = tl.load(w_ptr + n[:, None] * stride_wn + ks[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            if DOT:
                if IEEE:
                    acc += tl.dot(x, tl.trans(w), input_precision="ieee")
                else:
                    acc += tl.dot(x, tl.trans(w))
            else:
                acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
        if SPLIT == 1:
            _linear_finish(acc, bias_ptr, out_ptr, rows, row_ok, n, n_ok, stride_om, BIAS, GELU)
        else:
            tile = rows[:, None] * N + n[None, :]
            tile_ok = row_ok[:, None] & n_ok[None, :]
            tl.store(partials_ptr + part * M * N + tile, acc, mask=tile_ok)
            tl.debug_barrier()  # every thread's partial is written before the counter releases them
            if tl.atomic_add(counters_ptr + pid, 1) == SPLIT - 1:
                total = tl.zeros((ROWS, BN), tl.float32)
                for s in tl.static_range(SPLIT):  # a fixed order: the sum does not depend on who came last
                    total += tl.load(partials_ptr + s * M * N + tile, mask=tile_ok, other=0.0, cache_modifier=".cg")
                tl.atomic_xchg(counters_ptr + pid, 0)
                _linear_finish(total, bias_ptr, out_ptr, rows, row_ok, n, n_ok, stride_om, BIAS, GELU)

    @triton.jit  # type: ignore[untyped-decorator]
    def _attention_kernel(  # type: ignore[no-untyped-def]
        qkv_ptr, k_ptr, v_ptr, out_ptr, acc_ptr, ml_ptr, tables_ptr, slots_ptr, positions_ptr, scale,
        stride_row, stride_page, stride_off, stride_head, stride_table, stride_out,
        HEADS: tl.constexpr, PAGE: tl.constexpr, BLOCK: tl.constexpr, DIM: tl.constexpr,
        SPLIT: tl.constexpr, SPLITS: tl.constexpr, STORE: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        position = tl.load(positions_ptr + r)
        start = s * SPLIT
        if start <= position:
            dims = tl.arange(0, DIM)
            offs = tl.arange(0, BLOCK)
            row = r * stride_row + h * DIM + dims
            q = (tl.load(qkv_ptr + row).to(tl.float32) * scale).to(tl.float32)  # scale arrives as fp64 from inductor
            table = tables_ptr + tl.load(slots_ptr + r).to(tl.int64) * stride_table
            best = tl.full((), -float("inf"), tl.float32)
            total = tl.zeros((), tl.float32)
            acc = tl.zeros((DIM,), tl.float32)
            end = tl.minimum(start + SPLIT, position + 1)
            if STORE:
                end = tl.minimum(start + SPLIT, position)
                if position < start + SPLIT:
                    # This split holds the new position: store its key and value, start the softmax there.
                    k_new = tl.load(qkv_ptr + row + HEADS * DIM)
                    v_new = tl.load(qkv_ptr + row + 2 * HEADS * DIM)
                    page_new = tl.load(table + position // PAGE).to(tl.int64)
                    at_new = page_new * stride_page + (position % PAGE) * stride_off + h * stride_head + dims
                    tl.store(k_ptr + at_new, k_new)
                    tl.store(v_ptr + at_new, v_new)
                    best = tl.sum(q * k_new.to(tl.float32), axis=0)
                    total = tl.full((), 1.0, tl.float32)
                    acc = v_new.to(tl.float32)
            for first in range(start, end, BLOCK):
                index = first + offs
                valid = index < end
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
            if SPLITS == 1:
                tl.store(out_ptr + r * stride_out + h * DIM + dims, (acc / total).to(out_ptr.dtype.element_ty))
            else:
                part = (r * HEADS + h) * SPLITS + s
                tl.store(acc_ptr + part * DIM + dims, acc)
                tl.store(ml_ptr + part * 2, best)
                tl.store(ml_ptr + part * 2 + 1, total)

    @triton.jit  # type: ignore[untyped-decorator]
    def _combine_kernel(  # type: ignore[no-untyped-def]
        acc_ptr, ml_ptr, positions_ptr, out_ptr, stride_out,
        HEADS: tl.constexpr, DIM: tl.constexpr, SPLIT: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0)
        h = tl.program_id(1)
        used = tl.load(positions_ptr + r) // SPLIT + 1
        splits = tl.arange(0, SPLITS_P2)
        ok = splits < used
        part = (r * HEADS + h) * SPLITS + splits
        best = tl.load(ml_ptr + part * 2, mask=ok, other=-float("inf"))
        total = tl.load(ml_ptr + part * 2 + 1, mask=ok, other=0.0)
        weight = tl.where(ok, tl.exp(best - tl.max(best, axis=0)), 0.0)
        dims = tl.arange(0, DIM)
        acc = tl.load(acc_ptr + part[:, None] * DIM + dims[None, :], mask=ok[:, None], other=0.0)
        out = tl.sum(weight[:, None] * acc, axis=0) / tl.sum(weight * total, axis=0)
        tl.store(out_ptr + r * stride_out + h * DIM + dims, out.to(out_ptr.dtype.element_ty))

    @triton.jit  # type: ignore[untyped-decorator]
    def _store_kv_kernel(  # type: ignore[no-untyped-def]
        qkv_ptr, k_ptr, v_ptr, tables_ptr, slots_ptr, positions_ptr,
        stride_row, stride_page, stride_off, stride_table, WIDTH: tl.constexpr, BLOCK: tl.constexpr, PAGE: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < WIDTH
        position = tl.load(positions_ptr + r)
        table = tables_ptr + tl.load(slots_ptr + r).to(tl.int64) * stride_table
        page = tl.load(table + position // PAGE).to(tl.int64)
        at = page * stride_page + (position % PAGE) * stride_off + cols
        row = qkv_ptr + r * stride_row + cols
        tl.store(k_ptr + at, tl.load(row + WIDTH, mask=ok), mask=ok)
        tl.store(v_ptr + at, tl.load(row + 2 * WIDTH, mask=ok), mask=ok)

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
        raise RuntimeError("the GPU kernels need the `triton` package (it comes with CUDA builds of torch)")


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    config: LinearConfig,
    *,
    delta: torch.Tensor | None = None,
    h_out: torch.Tensor | None = None,
    norm: torch.nn.LayerNorm | None = None,
    gelu: bool = False,
    out_dtype: torch.dtype | None = None,
    workspace: SplitWorkspace | None = None,
) -> torch.Tensor:
    """[rows, K] x weight [N, K] (rows contiguous) -> [rows, N], bias added.

    With `norm`: the rows are LayerNorm-ed first, after `delta` is added to them (when given; the sum
    is also stored in `h_out`, which must not alias `x` or `delta`). With `gelu`: tanh-GELU after.
    A config with `split` > 1 needs a `workspace` of at least split x rows x N floats and a counter
    per block of `block_n` columns.
    """
    _need_triton()
    rows, k = x.shape
    n = weight.shape[0]
    if weight.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("linear: x and weight need contiguous rows")
    if delta is not None and (norm is None or h_out is None or delta.stride() != x.stride()):
        raise ValueError("linear: delta needs norm, h_out and the strides of x")
    blocks = triton.cdiv(n, config.block_n)
    dummy = x
    if config.split > 1:
        if workspace is None:
            raise ValueError("linear: a split reduction needs a workspace")
        if workspace.partials.numel() < config.split * rows * n or workspace.counters.numel() < blocks:
            raise ValueError(
                f"linear: the workspace holds {workspace.partials.numel()} partials and "
                f"{workspace.counters.numel()} counters; split {config.split} of {rows}x{n} needs "
                f"{config.split * rows * n} and {blocks}"
            )
    out = torch.empty((rows, n), dtype=out_dtype or x.dtype, device=x.device)
    padded = _pow2(max(rows, 16 if config.dot else 1))
    slice_k = triton.cdiv(triton.cdiv(k, config.split), config.block_k) * config.block_k
    _linear_kernel[(blocks, config.split)](
        x, delta if delta is not None else dummy, h_out if h_out is not None else dummy,
        norm.weight if norm is not None else dummy, norm.bias if norm is not None else dummy,
        weight, bias if bias is not None else dummy, out,
        workspace.partials if workspace is not None else dummy, workspace.counters if workspace is not None else dummy,
        rows, n, k, slice_k, norm.eps if norm is not None else 0.0, x.stride(0), weight.stride(0), out.stride(0),
        ROWS=padded, BN=config.block_n, BK=config.block_k, KP=_pow2(k), SPLIT=config.split,
        ADD=delta is not None, NORM=norm is not None, BIAS=bias is not None, GELU=gelu,
        DOT=config.dot, IEEE=x.dtype == torch.float32, num_warps=config.warps, num_stages=config.stages,
    )  # fmt: skip
    return out


def paged_attention(
    qkv: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    config: AttentionConfig,
    store: bool,
) -> torch.Tensor:
    """Attention of each row's query over its sequence's positions 0..position.

    qkv [rows, 3 * heads * dim] (q, k, v of each row, contiguous); k_cache, v_cache [pages,
    page_size, heads, dim] (one layer); tables [slots, max_pages] page ids; slots [rows] a row's
    table; positions [rows]. With `store` the rows' keys and values are stored here (rows must then
    be distinct sequences); without, `store_kv` has stored them. Returns [rows, heads * dim].
    """
    _need_triton()
    rows = qkv.shape[0]
    _, page, heads, dim = k_cache.shape
    max_len = tables.shape[1] * page
    split = min(config.split, max_len)
    splits = -(-max_len // split)
    out = torch.empty((rows, heads * dim), dtype=qkv.dtype, device=qkv.device)
    parts = rows * heads * splits if splits > 1 else 1
    acc = torch.empty((parts, dim), dtype=torch.float32, device=qkv.device)
    best_total = torch.empty((parts, 2), dtype=torch.float32, device=qkv.device)
    _attention_kernel[(rows, heads, splits)](
        qkv, k_cache, v_cache, out, acc, best_total, tables, slots, positions, scale,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), tables.stride(0), out.stride(0),
        HEADS=heads, PAGE=page, BLOCK=config.block, DIM=dim, SPLIT=split, SPLITS=splits, STORE=store,
        num_warps=config.warps,
    )  # fmt: skip
    if splits > 1:
        _combine_kernel[(rows, heads)](
            acc,
            best_total,
            positions,
            out,
            out.stride(0),
            HEADS=heads,
            DIM=dim,
            SPLIT=split,
            SPLITS=splits,
            SPLITS_P2=_pow2(splits),
        )
    return out


def store_kv(
    qkv: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
) -> None:
    """Store each row's key and value (from qkv, laid out as for `paged_attention`) at its position."""
    _need_triton()
    _, page, heads, dim = k_cache.shape
    width = heads * dim
    _store_kv_kernel[(qkv.shape[0],)](
        qkv, k_cache, v_cache, tables, slots, positions,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), tables.stride(0),
        WIDTH=width, BLOCK=_pow2(width), PAGE=page,
    )  # fmt: skip


def add_layer_norm(hidden: torch.Tensor, delta: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """hidden += delta (in place); returns norm(hidden). Both [rows, width], contiguous."""
    _need_triton()
    rows, width = hidden.shape
    out = torch.empty_like(hidden)
    _add_layer_norm_kernel[(rows,)](
        hidden, delta, norm.weight, norm.bias, out, width, norm.eps, BLOCK=triton.next_power_of_2(width)
    )
    return out
