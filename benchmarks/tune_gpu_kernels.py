"""Measures, on this GPU, which kernel should run each projection and attention of a captured step, and
writes the choices to triton_backend/gpu_configs.json under the device's name.

    python -m benchmarks.tune_gpu_kernels --preset gpt2-xl --dtype float16 --json $OUT/tuning.json

For every projection shape of the preset and every decode row count, our streaming kernel (`linear`,
with the residual add, LayerNorm and GELU fused where the step fuses them) in each candidate block
shape is timed against what the step does otherwise (add_layer_norm, then cuBLAS through torch). Each
timing replays a CUDA graph of `ROTATE` calls over distinct weight copies, so the weights come from
HBM as in a step (not from L2), and the launch gaps are a graph's. The attention kernel's context
split and block are chosen the same way, over a cache of the preset's size at a typical context.
Candidates are compiled first in parallel worker processes (Triton caches them on disk).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import triton

from benchmarks import harness
from benchmarks.cuda_timing import event_seconds
from triton_backend.gpu_configs import TABLE
from triton_backend.gpu_kernels import (
    AttentionConfig,
    LinearConfig,
    SplitWorkspace,
    add_layer_norm,
    linear,
    paged_attention,
)
from triton_backend.presets import preset_config

GPU = torch.device("cuda")
ROWS = (1, 2, 4, 8, 16, 32, 64)
ROTATE = 12
FMA = [(4, 256, 4), (8, 128, 4), (8, 256, 4), (16, 128, 4), (16, 256, 8), (32, 64, 4)]
DOT = [(16, 128, 4, 3), (32, 128, 4, 3), (16, 256, 4, 4), (64, 64, 4, 3)]
# Split reductions, for projections whose column blocks alone are too few to keep the GPU streaming.
SPLIT_FMA = [(16, 64, 4, 1), (32, 64, 4, 1), (8, 128, 4, 1), (32, 32, 2, 1), (64, 64, 8, 1), (16, 128, 4, 3)]
SPLIT_DOT = [(16, 64, 4, 3), (32, 64, 4, 3), (64, 64, 4, 3), (16, 128, 4, 3)]
SPLIT_WAYS = (4, 8, 16)
SPLIT_ROWS = 16  # split candidates up to this many rows
SPLITS = (16, 32, 64, 128, 256, 512, 1 << 20)
ATTENTION_BLOCKS = ((16, 1), (32, 2), (64, 4))


def candidates(rows: int, n: int, k: int) -> list[LinearConfig]:
    out = [LinearConfig(True, bn, bk, warps, stages) for bn, bk, warps, stages in DOT]
    if rows <= 8:
        out += [LinearConfig(False, bn, bk, warps) for bn, bk, warps in FMA if rows * bn * bk <= 16384]
    if rows <= SPLIT_ROWS and n <= 8 * k:  # the LM head has column blocks enough
        out += [LinearConfig(True, bn, bk, w, st, ways) for bn, bk, w, st in SPLIT_DOT for ways in SPLIT_WAYS]
        if rows <= 8:
            out += [
                LinearConfig(False, bn, bk, w, st, ways)
                for bn, bk, w, st in SPLIT_FMA
                for ways in SPLIT_WAYS
                if rows * bn * bk <= 16384
            ]
    return out


def shapes(preset: str) -> list[dict[str, Any]]:
    """Each projection of a block, and the LM head: [n, k] and what the step fuses into it."""
    e = preset_config(preset).n_embd
    return [
        {"n": 3 * e, "k": e, "norm": True, "gelu": False},  # attn.c_attn after ln_1
        {"n": e, "k": e, "norm": False, "gelu": False},  # attn.c_proj
        {"n": 4 * e, "k": e, "norm": True, "gelu": True},  # mlp.c_fc after ln_2
        {"n": e, "k": 4 * e, "norm": False, "gelu": False},  # mlp.c_proj
        {"n": 50257, "k": e, "norm": False, "gelu": False},  # lm_head (ln_f runs apart)
    ]


class Operands:
    def __init__(self, shape: dict[str, Any], rows: int, dtype: torch.dtype) -> None:
        n, k = shape["n"], shape["k"]
        copies = 1 if n > 8 * k else ROTATE  # the LM head alone is far larger than L2
        self.weights = [torch.randn(n, k, device=GPU, dtype=dtype) * 0.02 for _ in range(copies)]
        self.bias = torch.randn(n, device=GPU, dtype=dtype) * 0.02
        self.x = torch.randn(rows, k, device=GPU, dtype=dtype)
        self.delta = torch.randn(rows, k, device=GPU, dtype=dtype)
        self.norm = torch.nn.LayerNorm(k, device=GPU, dtype=dtype).requires_grad_(False)
        self.workspace = SplitWorkspace.allocate(GPU, max(SPLIT_WAYS) * rows * n, n)
        self.shape = shape

    def ours(self, config: LinearConfig) -> Callable[[int], Any]:
        norm, gelu = self.shape["norm"], self.shape["gelu"]
        summed = torch.empty_like(self.x)

        def call(i: int) -> Any:
            w = self.weights[i % len(self.weights)]
            if norm:
                return linear(
                    self.x, w, self.bias, config, delta=self.delta, h_out=summed, norm=self.norm, gelu=gelu,
                    workspace=self.workspace,
                )  # fmt: skip
            return linear(self.x, w, self.bias, config, workspace=self.workspace)

        return call

    def cublas(self) -> Callable[[int], Any]:
        norm, gelu = self.shape["norm"], self.shape["gelu"]
        hidden = self.x.clone()

        def call(i: int) -> Any:
            w = self.weights[i % len(self.weights)].t()  # [k, n] view, as the step passes Conv1D's
            x = add_layer_norm(hidden, self.delta, self.norm) if norm else self.x
            if gelu:
                return F.gelu(torch.addmm(self.bias, x, w), approximate="tanh")
            return torch.addmm(self.bias, x, w)

        return call


def graph_time(call: Callable[[int], Any], count: int = ROTATE) -> float:
    """Seconds a call, from replays of a graph of `count` calls."""
    with torch.inference_mode():
        for i in range(2):
            call(i)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            for i in range(count):
                call(i)
        torch.cuda.synchronize()
        return statistics.median(event_seconds(graph.replay) / count for _ in range(25))


def _compile_shape(job: tuple[str, str, int]) -> int:
    """Worker: compile every candidate of one shape by running it once on small inputs."""
    preset, dtype_name, index = job
    dtype = getattr(torch, dtype_name)
    shape = shapes(preset)[index]
    compiled = 0
    for rows in ROWS:
        operands = Operands({**shape, "n": min(shape["n"], 256)}, rows, dtype)
        operands.weights = operands.weights[:1]
        for config in candidates(rows, shape["n"], shape["k"]):
            try:
                operands.ours(config)(0)
                compiled += 1
            except triton.runtime.errors.OutOfResources:  # too large for this GPU: timed as never
                pass
    torch.cuda.synchronize()
    return compiled


def tune_linear(preset: str, dtype: torch.dtype) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    table: dict[str, Any] = {}
    rows_out = []
    for shape in shapes(preset):
        entry = []
        for rows in ROWS:
            operands = Operands(shape, rows, dtype)
            baseline = graph_time(operands.cublas())
            timed = []
            for config in candidates(rows, shape["n"], shape["k"]):
                try:
                    timed.append((graph_time(operands.ours(config)), config))
                except triton.runtime.errors.OutOfResources:
                    continue
            best_time, best = min(timed, key=lambda t: t[0])
            weight_bytes = shape["n"] * shape["k"] * operands.x.element_size()
            row = {
                "n": shape["n"], "k": shape["k"], "rows": rows, "cublas_us": baseline * 1e6,
                "best_us": best_time * 1e6, "best": best.__dict__, "weight_bytes": weight_bytes,
                "all": [(t * 1e6, c.__dict__) for t, c in timed],
            }  # fmt: skip
            rows_out.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "all"}), flush=True)
            entry.append([rows, best.__dict__ if best_time < baseline else None])
            del operands
        entry.append([1 << 30, None])
        table[f"{shape['n']}x{shape['k']}"] = entry
    return table, rows_out


def _attend(config: AttentionConfig, qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            tables: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, layer: int,
            ) -> torch.Tensor:  # fmt: skip
    return paged_attention(qkv, k_cache[layer], v_cache[layer], tables, slots, positions, 0.125, config, True)


def tune_attention(preset: str, dtype: torch.dtype, context: int) -> tuple[list[Any], list[dict[str, Any]]]:
    config = preset_config(preset)
    heads, dim, layers = config.n_head, config.n_embd // config.n_head, config.n_layer
    page, max_len = 16, config.n_positions
    width = max_len // page
    table, rows_out = [], []
    for rows in ROWS:
        pages = rows * width + 1
        k_cache = torch.randn(layers, pages, page, heads, dim, device=GPU, dtype=dtype)
        v_cache = torch.randn_like(k_cache)
        tables = torch.arange(rows * width, device=GPU, dtype=torch.int32).view(rows, width)
        slots = torch.arange(rows, device=GPU, dtype=torch.int32)
        positions = torch.full((rows,), context, device=GPU, dtype=torch.int32)
        qkv = torch.randn(rows, 3 * heads * dim, device=GPU, dtype=dtype)
        timed = []
        for split in SPLITS:
            for block, warps in ATTENTION_BLOCKS:
                if split < block:
                    continue
                candidate = AttentionConfig(split, block, warps)
                call = partial(_attend, candidate, qkv, k_cache, v_cache, tables, slots, positions)
                timed.append((graph_time(call, layers), candidate))
        best_time, best = min(timed, key=lambda t: t[0])
        kv_bytes = 2 * rows * (context + 1) * heads * dim * k_cache.element_size()
        row = {"rows": rows, "context": context, "best_us": best_time * 1e6, "best": best.__dict__,
               "kv_bytes": kv_bytes, "all": [(t * 1e6, c.__dict__) for t, c in timed]}  # fmt: skip
        rows_out.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "all"}), flush=True)
        table.append([rows, best.__dict__])
        del k_cache, v_cache
        torch.cuda.empty_cache()
    table[-1][0] = 1 << 30
    return table, rows_out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt2-xl")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--context", type=int, default=192, help="positions cached per sequence for attention")
    parser.add_argument("--table", type=Path, default=TABLE, help="the choices file to update")
    parser.add_argument("--json", type=Path, help="every timing, for the report")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    jobs = [(args.preset, args.dtype, i) for i in range(len(shapes(args.preset)))]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        print("compiled", sum(pool.map(_compile_shape, jobs)), "candidates", flush=True)
    linear_table, linear_rows = tune_linear(args.preset, dtype)
    attention_table, attention_rows = tune_attention(args.preset, dtype, args.context)
    device = torch.cuda.get_device_name()
    tables = harness.read_json(args.table) if args.table.is_file() else {}
    tables[device] = {"preset": args.preset, "dtype": args.dtype, "linear": linear_table, "attention": attention_table}
    harness.write_json(args.table, tables)
    if args.json:
        harness.write_json(args.json, {"device": device, "linear": linear_rows, "attention": attention_rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
