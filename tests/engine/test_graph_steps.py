"""The GPU step path: its Triton kernels against float64 references, and whole engine runs through it
against the eager path and transformers' generate.

On the CPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, set before triton is
imported, so in a child process), and the step path runs its forward pass without CUDA graphs; the
graph tests need a GPU and carry the `gpu` marker.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from engine_testkit import TickingClock, ids_of, make_engine, run, tiny_model

from triton_backend.engine import Engine
from triton_backend.engine_factory import engine_with
from triton_backend.kv_cache import PagedKVCache
from triton_backend.presets import build_model
from triton_backend.runner import GPT2Runner, attention_scales, cache_shape
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import SchedulerConfig

pytest.importorskip("triton")
CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    return float((got - want).norm() / want.norm())


def linear_errors(device: str, dtype: torch.dtype) -> list[float]:
    """The streaming projection, both inner products (FMA and tensor cores), at row counts that do not
    fill a block, with and without its fused prologue (residual add, LayerNorm) and GELU epilogue, and
    with its reduction split (one slice left empty), each split config run twice over one workspace
    (its counters must be back at zero)."""
    from triton_backend.gpu_kernels import LinearConfig, SplitWorkspace, linear

    generator = torch.Generator().manual_seed(2)
    k, n = 100, 70  # neither a multiple of any block
    workspace = SplitWorkspace.allocate(torch.device(device), 3 * 17 * n, n)
    errors = []
    cases = [(1, LinearConfig(False, 8, 32, 4)), (3, LinearConfig(False, 16, 64, 4)),
             (8, LinearConfig(True, 16, 32, 4)), (17, LinearConfig(True, 32, 32, 4)),
             (1, LinearConfig(False, 8, 32, 4, split=3)), (2, LinearConfig(False, 16, 16, 4, split=2)),
             (8, LinearConfig(True, 16, 32, 4, split=2)), (17, LinearConfig(True, 32, 16, 4, split=3))]  # fmt: skip
    for rows, config in cases:
        x, delta = (torch.randn(rows, k, generator=generator) for _ in range(2))
        w, b = torch.randn(n, k, generator=generator), torch.randn(n, generator=generator)
        norm = torch.nn.LayerNorm(k).requires_grad_(False)
        norm.weight.normal_(generator=generator)
        norm.bias.normal_(generator=generator)
        on = {name: t.to(device, dtype) for name, t in (("x", x), ("delta", delta), ("w", w), ("b", b))}
        norm = norm.to(device, dtype)
        for _ in range(2 if config.split > 1 else 1):
            got = linear(on["x"], on["w"], on["b"], config, workspace=workspace)
            errors.append(_rel(got, x.double() @ w.double().T + b.double()))
            summed = torch.full_like(on["x"], float("nan"))
            out = linear(
                on["x"], on["w"], on["b"], config, delta=on["delta"], h_out=summed, norm=norm, gelu=True,
                workspace=workspace,
            )  # fmt: skip
            want_sum = x.double() + delta.double()
            gain, shift = norm.weight.double().cpu(), norm.bias.double().cpu()
            normed = torch.nn.functional.layer_norm(want_sum, (k,), gain, shift)
            want = torch.nn.functional.gelu(normed @ w.double().T + b.double(), approximate="tanh")
            errors += [_rel(summed, want_sum), _rel(out, want)]
    assert int(workspace.counters.abs().sum()) == 0
    return errors


def attention_errors(device: str, dtype: torch.dtype) -> list[float]:
    """Attention over ragged sequences scattered across shuffled pages: decode rows storing their own
    new key and value (slots poisoned with NaN first), with and without context splits; and rows that
    `store_kv` stored first, as a step with prefill rows runs them."""
    from triton_backend.gpu_kernels import AttentionConfig, paged_attention, store_kv

    generator = torch.Generator().manual_seed(1)
    pages, page_size, heads, dim = 64, 16, 4, 64
    k = torch.randn(pages, page_size, heads, dim, generator=generator)
    v = torch.randn(pages, page_size, heads, dim, generator=generator)
    lens = [1, 15, 16, 17, 65, 130]
    tables = torch.randperm(pages, generator=generator)[: len(lens) * 9].view(len(lens), 9).to(torch.int32)
    qkv = torch.randn(len(lens), 3 * heads * dim, generator=generator)
    last = torch.tensor(lens) - 1
    new_page, new_offset = tables[torch.arange(len(lens)), last // page_size].long(), last % page_size
    k[new_page, new_offset] = qkv[:, heads * dim : 2 * heads * dim].view(-1, heads, dim)
    v[new_page, new_offset] = qkv[:, 2 * heads * dim :].view(-1, heads, dim)
    want = []
    for b, length in enumerate(lens):
        positions = torch.arange(length)
        page, offset = tables[b, positions // page_size].long(), positions % page_size
        keys, values = k[page, offset].double(), v[page, offset].double()  # [length, heads, dim]
        q = qkv[b, : heads * dim].view(heads, dim).double()
        weights = (torch.einsum("hd,lhd->hl", q, keys) * 0.125).softmax(-1)
        want.append(torch.einsum("hl,lhd->hd", weights, values).reshape(-1))
    slots = torch.arange(len(lens), dtype=torch.int32, device=device)
    on = {name: t.to(device) for name, t in (("tables", tables), ("last", last))}
    errors = []
    for store, config in ((True, AttentionConfig(1 << 20, 16, 1)), (True, AttentionConfig(32, 16, 1)),
                          (True, AttentionConfig(16, 16, 2)), (False, AttentionConfig(64, 32, 1))):  # fmt: skip
        k_cache, v_cache = k.to(device, dtype), v.to(device, dtype)
        k_cache[new_page, new_offset] = float("nan")  # whoever stores must do so before anyone reads
        v_cache[new_page, new_offset] = float("nan")
        rows = qkv.to(device, dtype)
        if not store:
            store_kv(rows, k_cache, v_cache, on["tables"], slots, on["last"])
        out = paged_attention(rows, k_cache, v_cache, on["tables"], slots, on["last"], 0.125, config, store)
        errors.append(_rel(out, torch.stack(want)))
        errors.append(float((k_cache.cpu().double() - k.to(dtype).double()).abs().max()))
    return errors


def layer_norm_errors(device: str, dtype: torch.dtype) -> list[float]:
    from triton_backend.gpu_kernels import add_layer_norm

    generator = torch.Generator().manual_seed(3)
    norm = torch.nn.LayerNorm(200).requires_grad_(False)
    norm.weight.normal_(generator=generator)
    norm = norm.to(device, dtype)
    hidden, delta = torch.randn(3, 200, generator=generator), torch.randn(3, 200, generator=generator)
    fused_hidden = hidden.to(device, dtype, copy=True)  # added to in place
    normed = add_layer_norm(fused_hidden, delta.to(device, dtype), norm)
    summed = hidden.double() + delta.double()
    want = torch.nn.functional.layer_norm(summed, (200,), norm.weight.double().cpu(), norm.bias.double().cpu())
    return [_rel(fused_hidden, summed), _rel(normed, want)]


def kernel_error(device: str, dtype: torch.dtype) -> float:
    """Largest error of every kernel against its float64 reference."""
    return max(linear_errors(device, dtype) + attention_errors(device, dtype) + layer_norm_errors(device, dtype))


def _interpreted(code: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    prelude = "import torch, sys; sys.path.insert(0, 'tests/engine'); from test_graph_steps import *; "
    done = subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(CUDA, reason="a GPU runs the kernels themselves (test_kernels_match_references_on_the_gpu)")
def test_kernels_match_references_under_the_interpreter():
    assert float(_interpreted("print(kernel_error('cpu', torch.float32))")) < 1e-5


ARRIVALS = {
    0: [("a", [15496, 995, 11, 314, 716], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))],
    2: [("b", [464, 3290, 318], SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))],
    3: [("c", list(range(1000, 1040)), SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))],
    9: [("d", [40], SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True))],
    10: [("e", list(range(2000, 2021)), SamplingParams(max_tokens=6, n=2, temperature=0.0, ignore_eos=True))],
}


def step_path_tokens() -> dict[str, list[list[int]]]:
    """Greedy tokens of ARRIVALS through the step path's forward pass (no graphs), on the CPU: decode
    steps of 1-3 rows through the FMA projections, steps with prefill rows through tensor-core ones
    (up to 32 rows) and cuBLAS's (more), the two narrow projections with split reductions, attention
    with and without context splits."""
    from triton_backend.gpu_configs import KernelChoices
    from triton_backend.gpu_kernels import AttentionConfig, LinearConfig
    from triton_backend.graph_steps import GraphSteps

    fma, dot, head = LinearConfig(False, 16, 32, 4), LinearConfig(True, 16, 32, 4), LinearConfig(False, 2048, 16, 4)
    table = ((2, fma), (16, dot), (1 << 30, None))
    fma_split, dot_split = LinearConfig(False, 16, 32, 4, split=2), LinearConfig(True, 16, 32, 4, split=3)
    split = ((2, fma_split), (16, dot_split), (1 << 30, None))
    choices = KernelChoices(
        linear={
            "192x64": table,
            "64x64": split,
            "256x64": table,
            "64x256": split,
            "50257x64": ((1, head), (1 << 30, None)),
        },
        attention=((1, AttentionConfig(32, 16, 1)), (1 << 30, AttentionConfig(1 << 20, 16, 1))),
    )
    cache = PagedKVCache(cache_shape(model := tiny_model()), 64, torch.device("cpu"))
    graphs = GraphSteps(model, cache, attention_scales(model), 4, 16, capture=False, choices=choices)
    runner = GPT2Runner(model, cache, graphs=graphs, pack_cpu=False)  # our kernels stream transformers' own weights
    engine = engine_with(runner, SchedulerConfig(prefill_chunk_tokens=16, max_num_seqs=4), TickingClock())
    results = run(engine, ARRIVALS)
    return {name: [ids_of(result, i) for i in range(len(result.final.texts))] for name, result in results.items()}


@pytest.mark.skipif(CUDA, reason="the GPU tests below run the step path with its graphs")
def test_step_path_generates_what_the_eager_path_does_under_the_interpreter():
    got = eval(_interpreted("print(step_path_tokens())"))
    eager = run(make_engine(tiny_model(), pages=64, chunk=16, max_num_seqs=4), ARRIVALS)
    for name, result in eager.items():
        assert got[name] == [ids_of(result, i) for i in range(len(result.final.texts))], name


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "bound"), [(torch.float32, 1e-5), (torch.float16, 5e-3)], ids=["fp32", "fp16"])
def test_kernels_match_references_on_the_gpu(dtype, bound):
    assert kernel_error("cuda", dtype) < bound


def gpu_engine(model, graphs: bool, max_num_seqs: int = 4) -> Engine:
    engine = make_engine(
        model, pages=256, chunk=16, max_num_seqs=max_num_seqs, device=torch.device("cuda"), cuda_graphs=graphs
    )
    assert (engine.runner.graphs is not None) == graphs
    return engine


@gpu
@pytest.mark.gpu
def test_graph_steps_equal_eager_steps_and_generate_for_a_mixed_batch():
    model, _ = build_model("gpt2", None, torch.device("cuda"), torch.float32)
    graphed = run(gpu_engine(model, graphs=True, max_num_seqs=3), ARRIVALS)
    eager = run(gpu_engine(model, graphs=False, max_num_seqs=3), ARRIVALS)
    for request_id, result in graphed.items():
        got = ids_of(result)
        assert got == ids_of(eager[request_id]), request_id
        prompt = next(p for step in ARRIVALS.values() for name, p, _ in step if name == request_id)
        out = model.generate(
            torch.tensor([prompt], device="cuda"), max_new_tokens=len(got), min_new_tokens=len(got),
            do_sample=False, pad_token_id=50256,
        )  # fmt: skip
        assert got == out[0, len(prompt) :].tolist(), request_id
