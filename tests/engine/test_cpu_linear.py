"""The CPU's oneDNN-packed projections: same numbers as transformers' modules, and the engine serves
through them (the batching tests compare its greedy ids with an unpacked model's `generate`)."""

from __future__ import annotations

import copy

import pytest
import torch
from engine_testkit import CPU, greedy_reference, ids_of, make_engine, run, tiny_model

from triton_backend import cpu_linear
from triton_backend.kv_cache import PagedKVCache
from triton_backend.runner import GPT2Runner, cache_shape
from triton_backend.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(not cpu_linear.available(), reason="this torch build has no oneDNN")


@pytest.mark.parametrize("rows", [1, 5, 16, 70])
def test_a_packed_projection_equals_transformers_conv1d(rows):
    model = tiny_model()
    conv = model.transformer.h[0].mlp.c_fc
    packed = cpu_linear.PackedLinear(conv.weight.t(), conv.bias, batch_hint=16)
    x = torch.randn(2, rows, conv.weight.shape[0], generator=torch.Generator().manual_seed(rows))
    with torch.inference_mode():
        assert torch.allclose(packed(x), conv(x), rtol=1e-5, atol=1e-5)


def test_the_runner_packs_every_projection_and_the_head_on_the_cpu():
    model = tiny_model()
    runner = GPT2Runner(model, PagedKVCache(cache_shape(model), 64, CPU))
    assert runner.packed_linears == 4 * model.config.n_layer + 1
    assert isinstance(model.lm_head, cpu_linear.PackedLinear)
    assert isinstance(model.transformer.h[0].mlp.act, torch.nn.Identity)  # GELU runs inside c_fc
    # The embedding stays: the head was untied from it, not moved.
    assert model.transformer.wte.weight.shape == (model.config.vocab_size, model.config.n_embd)


def test_the_mlp_with_gelu_fused_equals_transformers_mlp():
    model = tiny_model()
    mlp = copy.deepcopy(model.transformer.h[1].mlp)
    cpu_linear.pack_cpu_linears(model, batch_hint=16)
    x = torch.randn(4, 7, model.config.n_embd, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.allclose(model.transformer.h[1].mlp(x), mlp(x), rtol=1e-4, atol=1e-5)


def test_half_precision_models_are_left_alone():
    model = copy.deepcopy(tiny_model()).to(torch.bfloat16)
    assert cpu_linear.pack_cpu_linears(model, batch_hint=16) == 0
    assert not isinstance(model.lm_head, cpu_linear.PackedLinear)


def test_packed_engine_decodes_a_batch_as_generate_does():
    model = tiny_model()
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    prompts = {f"r{i}": [50 + 7 * i, 900 + i, 31] for i in range(5)}
    results = run(make_engine(model), {0: [(rid, p, params) for rid, p in prompts.items()]})
    for rid, prompt in prompts.items():
        assert ids_of(results[rid]) == greedy_reference(model, prompt, 20), rid


def test_padded_row_counts_are_exact_for_small_batches_and_never_an_eighth_over():
    counts = range(1, 64 + 256 + 1)  # the default max_num_seqs + prefill_chunk_tokens
    padded = [cpu_linear.padded_rows(n) for n in counts]
    assert padded[:16] == list(range(1, 17))
    assert all(n <= p < n * 9 / 8 for n, p in zip(counts, padded, strict=True))
    assert padded == sorted(padded)
    assert len(set(padded)) == 16 + 8 * 4 + 2  # 1-16, 8 in each doubling to 256, 288 and 320


MEMORY_PROBE = """
import ctypes, sys, torch
from triton_backend.cpu_linear import PackedLinear
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
linear = PackedLinear(torch.randn(2304, 768), torch.randn(2304), 64)
def forward(x):
    if sys.argv[1] == "padded":
        return linear(x)
    return torch.ops.mkldnn._linear_pointwise(x, linear.packed, linear.bias, "none", [], "")
with torch.inference_mode():
    forward(torch.randn(1, 768))
    before = libc.mallinfo2().uordblks
    for rows in range(1, 321):
        forward(torch.randn(rows, 768))
    print((libc.mallinfo2().uordblks - before) / 2**20)
"""


def _memory_after_every_row_count(mode: str) -> float:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, mode], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"), reason="needs glibc's mallinfo2")
def test_padding_keeps_the_primitives_onednn_holds_to_a_few():
    # One primitive per row count: 320 counts reach oneDNN unpadded, 50 padded.
    raw, padded = _memory_after_every_row_count("raw"), _memory_after_every_row_count("padded")
    assert raw > 60
    assert padded < raw / 4
