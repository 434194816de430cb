"""Builds the engine a model instance serves, from its settings: the one place that does.

The Triton model, the benchmarks and the profiler all call `build_engine`, so what they measure is what
is served (cache budget, max_n clamp, CUDA graphs for decode batches and prefill chunks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GPT2LMHeadModel

from triton_backend.engine import Engine
from triton_backend.kv_cache import PagedKVCache, pages_for_budget
from triton_backend.length_predictor import LengthPredictor
from triton_backend.model_runner import StepGraphs
from triton_backend.presets import ModelInfo, build_model, parse_dtype
from triton_backend.runner import GPT2Runner, attention_scales, cache_shape
from triton_backend.scheduler import SchedulerConfig
from triton_backend.settings import ModelSettings
from triton_backend.tokenizer import token_bytes


@dataclass(frozen=True)
class BuiltEngine:
    engine: Engine
    info: ModelInfo
    max_n: int  # choices a request may ask for: at most max_num_seqs, whatever max_n says

    @property
    def runner(self) -> GPT2Runner:
        runner = self.engine.runner
        assert isinstance(runner, GPT2Runner)  # engine_on always builds one
        return runner


def build_engine(
    settings: ModelSettings,
    device: torch.device,
    clock: Callable[[], float] = time.monotonic,
    *,
    prefill_in_graphs: bool = True,
) -> BuiltEngine:
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # graphs are captured on the current device
    dtype = parse_dtype(settings.dtype, device)
    model, info = build_model(settings.preset, settings.weights_path or None, device, dtype, settings.seed)
    shape = cache_shape(model)
    max_n = min(settings.max_n, settings.max_num_seqs)
    full_context = shape.bytes_per_page * shape.pages_per_sequence
    budget = settings.kv_cache_bytes or full_context * settings.max_num_seqs
    cache = PagedKVCache(shape, pages_for_budget(shape, budget, min_sequences=max_n), device)
    engine = engine_on(
        model, cache, settings.max_num_seqs, settings.prefill_chunk_tokens, clock,
        cuda_graphs=settings.cuda_graphs, seed=settings.seed, prefill_in_graphs=prefill_in_graphs,
    )  # fmt: skip
    return BuiltEngine(engine, info, max_n)


def engine_on(
    model: GPT2LMHeadModel,
    cache: PagedKVCache,
    max_num_seqs: int,
    prefill_chunk_tokens: int,
    clock: Callable[[], float],
    *,
    cuda_graphs: bool = False,
    seed: int = 0,
    pack_cpu: bool = True,
    predictor: LengthPredictor | None = None,
    prefill_in_graphs: bool = True,
) -> Engine:
    """The runner, scheduler and engine around a model and a cache already made; `build_engine` sizes
    those from the settings, tests and benchmarks bring their own (a small cache, a model they keep a
    reference copy of). Graphs, when on, cover every decode batch, and every prefill chunk served
    unless `prefill_in_graphs` is off (the GPU report's step before mixed graphs)."""
    prefill = prefill_chunk_tokens if prefill_in_graphs else 0
    graphs = graph_steps(model, cache, max_num_seqs, prefill) if cuda_graphs else None
    runner = GPT2Runner(model, cache, graphs=graphs, pack_cpu=pack_cpu)
    scheduler = SchedulerConfig(prefill_chunk_tokens=prefill_chunk_tokens, max_num_seqs=max_num_seqs)
    return Engine(runner, token_bytes(), scheduler, clock=clock, seed=seed, predictor=predictor)


def graph_steps(model: GPT2LMHeadModel, cache: PagedKVCache, max_batch: int, prefill_tokens: int) -> StepGraphs | None:
    """CUDA graphs of decode batches up to `max_batch` (and steps with up to `prefill_tokens` prefill
    tokens beside them), captured now; None on the CPU or without the GPU kernels."""
    if cache.k.device.type != "cuda":
        return None
    # Imported here: CPU-only processes need neither the kernels nor their compilation.
    from triton_backend import gpu_kernels
    from triton_backend.graph_steps import GraphSteps

    if not gpu_kernels.available():
        return None
    return GraphSteps(model, cache, attention_scales(model), max_batch, prefill_tokens)
