"""The GPU decode path: the paged-attention kernel against plain attention, and graph-replayed decode
steps against the eager path and transformers' generate.

On the CPU the kernel runs under Triton's interpreter (TRITON_INTERPRET=1, set before triton is
imported, so in a child process); the CUDA graph tests need a GPU and carry the `gpu` marker.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from engine_testkit import ids_of, make_engine, run

from triton_backend.engine import Engine
from triton_backend.presets import build_model
from triton_backend.sampling_params import SamplingParams

pytest.importorskip("triton")
CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def kernel_error(device: str, dtype: torch.dtype) -> float:
    """Largest relative error of the GPU kernels against float64 references: attention over ragged
    sequences scattered across shuffled pages (the newest position's key and value passed in and
    stored by the kernel), and the fused residual add + LayerNorm."""
    from triton_backend.gpu_kernels import add_layer_norm, paged_decode_attention

    generator = torch.Generator().manual_seed(1)
    pages, page_size, heads, dim = 64, 16, 4, 64
    k = torch.randn(pages, page_size, heads, dim, generator=generator)
    v = torch.randn(pages, page_size, heads, dim, generator=generator)
    lens = [1, 15, 16, 17, 65, 130]
    tables = torch.randperm(pages, generator=generator)[: len(lens) * 9].view(len(lens), 9).to(torch.int32)
    q = torch.randn(len(lens), heads, dim, generator=generator)
    last = torch.tensor(lens) - 1
    new_page, new_offset = tables[torch.arange(len(lens)), last // page_size].long(), last % page_size
    k_new, v_new = k[new_page, new_offset].clone(), v[new_page, new_offset].clone()
    k_cache, v_cache = k.to(device, dtype), v.to(device, dtype)
    k_cache[new_page, new_offset] = float("nan")  # the kernel must store the new position before reading it
    v_cache[new_page, new_offset] = float("nan")
    out = paged_decode_attention(
        q.to(device, dtype), k_new.to(device, dtype), v_new.to(device, dtype), k_cache, v_cache,
        tables.to(device), last.to(device), 0.125,
    ).double().cpu()  # fmt: skip
    errors = [float((k_cache.cpu().double() - k.to(dtype).double()).abs().max())]
    for b, length in enumerate(lens):
        positions = torch.arange(length)
        page, offset = tables[b, positions // page_size].long(), positions % page_size
        keys, values = k[page, offset].double(), v[page, offset].double()  # [length, heads, dim]
        weights = (torch.einsum("hd,lhd->hl", q[b].double(), keys) * 0.125).softmax(-1)
        want = torch.einsum("hl,lhd->hd", weights, values)
        errors.append(float((out[b] - want).norm() / want.norm()))
    norm = torch.nn.LayerNorm(200).requires_grad_(False)
    norm.weight.normal_(generator=generator)
    norm = norm.to(device, dtype)
    hidden, delta = torch.randn(3, 200, generator=generator), torch.randn(3, 200, generator=generator)
    fused_hidden = hidden.to(device, dtype, copy=True)  # added to in place
    normed = add_layer_norm(fused_hidden, delta.to(device, dtype), norm).double().cpu()
    summed = hidden.double() + delta.double()
    want = torch.nn.functional.layer_norm(summed, (200,), norm.weight.double().cpu(), norm.bias.double().cpu())
    errors.append(float((fused_hidden.double().cpu() - summed).norm() / summed.norm()))
    errors.append(float((normed - want).norm() / want.norm()))
    return max(errors)


@pytest.mark.skipif(CUDA, reason="a GPU runs the kernels themselves (test_kernels_match_references_on_the_gpu)")
def test_kernels_match_references_under_the_interpreter():
    code = (
        "import torch, sys; sys.path.insert(0, 'tests/engine'); from test_graph_decode import kernel_error; "
        
        "print(kernel_error('cpu', torch.float32))"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-5


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "bound"), [(torch.float32, 1e-5), (torch.float16, 5e-3)], ids=["fp32", "fp16"])
def test_kernels_match_references_on_the_gpu(dtype, bound):
    assert kernel_error("cuda", dtype) < bound


def gpu_engine(model, graphs: bool, max_num_seqs: int = 4) -> Engine:
    engine = make_engine(
        model, pages=256, chunk=16, max_num_seqs=max_num_seqs,
        device=torch.device("cuda"), graph_batch=max_num_seqs if graphs else 0,
    )  # fmt: skip
    assert (engine.runner.graphs is not None) == graphs
    return engine


@gpu
@pytest.mark.gpu
def test_graph_decode_equals_eager_decode_and_generate_for_a_mixed_batch():
    model, _ = build_model("gpt2", None, torch.device("cuda"), torch.float32)
    greedy = dict(temperature=0.0, ignore_eos=True)
    prompts = {"a": [15496, 995, 11, 314, 716], "b": [464, 3290, 318], "c": list(range(1000, 1040)), "d": [40]}
    arrivals = {
        0: [("a", prompts["a"], SamplingParams(max_tokens=24, **greedy))],
        2: [("b", prompts["b"], SamplingParams(max_tokens=5, **greedy))],
        3: [("c", prompts["c"], SamplingParams(max_tokens=30, **greedy))],
        9: [("d", prompts["d"], SamplingParams(max_tokens=7, **greedy))],
    }
    graphed = run(gpu_engine(model, graphs=True, max_num_seqs=3), arrivals)
    eager = run(gpu_engine(model, graphs=False, max_num_seqs=3), arrivals)
    for request_id, prompt in prompts.items():
        got = ids_of(graphed[request_id])
        assert got == ids_of(eager[request_id]), request_id
        out = model.generate(
            torch.tensor([prompt], device="cuda"), max_new_tokens=len(got), min_new_tokens=len(got),
            do_sample=False, pad_token_id=50256,
        )  # fmt: skip
        assert got == out[0, len(prompt) :].tolist(), request_id
