"""Builds the engine a model instance serves, from its settings: the one place that does.

The Triton model, the benchmarks and the profiler all call `build_engine`, so what they measure is what
is served (cache budget, max_n clamp, CUDA graphs for decode batches and prefill chunks).
The cache is sized once the weights are loaded, from the memory left (memory_budget).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GPT2LMHeadModel

from triton_backend import cpu_linear
from triton_backend.cpu_linear import PackedLinear
from triton_backend.engine import Engine
from triton_backend.kv_cache import PagedKVCache, pages_for_budget
from triton_backend.length_predictor import LengthPredictor
from triton_backend.memory_budget import (
    CacheBudget,
    CacheDoesNotFit,
    Memory,
    cache_budget,
    fixed_budget,
    read_memory,
    size_text,
    working_bytes,
)
from triton_backend.model_runner import ModelRunner, StepGraphs
from triton_backend.presets import ModelInfo, build_model, parse_dtype
from triton_backend.runner import GPT2Runner, attention_scales, cache_shape
from triton_backend.scheduler import Scheduler, SchedulerConfig
from triton_backend.settings import ModelSettings
from triton_backend.tokenizer import token_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuiltEngine:
    engine: Engine
    info: ModelInfo
    # Choices a request may ask for: max_n, but no more than max_num_seqs, nor than the full-context
    # sequences the cache holds (a request's choices must fit alone).
    max_n: int
    budget: CacheBudget

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
    memory: Callable[[torch.device], Memory] = read_memory,
) -> BuiltEngine:
    """Raises CacheDoesNotFit (one line, naming the settings to change) where the cache cannot hold
    one full-context sequence. `memory` reads the device's memory once the weights are loaded."""
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # graphs are captured on the current device
    dtype = parse_dtype(settings.dtype, device)
    model, info = build_model(settings.preset, settings.weights_path or None, device, dtype, settings.seed)
    # Packed before the memory is read: on the CPU the packed copies are the weights from then on.
    cpu_linear.pack_cpu_linears(model, cpu_linear.BATCH_HINT)
    budget = size_cache(settings, model, memory(device))
    shape = cache_shape(model)
    pages = pages_for_budget(shape, budget.bytes, min_sequences=1)
    sequences = pages // shape.pages_per_sequence
    try:
        cache = PagedKVCache(shape, pages, device)
    except RuntimeError as err:  # torch.OutOfMemoryError on a GPU; the CPU allocator's own on the host
        if not isinstance(err, torch.OutOfMemoryError) and "can't allocate memory" not in str(err):
            raise
        raise CacheDoesNotFit(
            f"KV cache: {pages} pages ({size_text(pages * shape.bytes_per_page)}, from {budget.how}) could not be "
            f"allocated on {device}; lower kv_cache_bytes, memory_utilization or max_num_seqs"
        ) from None
    max_n = min(settings.max_n, settings.max_num_seqs, sequences)
    log.info(
        "KV cache: %d pages of %d tokens (%s), room for %d full-context sequences (max_num_seqs %d); sized by %s%s",
        pages, shape.page_size, size_text(pages * shape.bytes_per_page), sequences, settings.max_num_seqs, budget.how,
        f"; max_n lowered to {max_n}" if max_n < min(settings.max_n, settings.max_num_seqs) else "",
    )  # fmt: skip
    engine = engine_on(
        model, cache, settings.max_num_seqs, settings.prefill_chunk_tokens, clock,
        cuda_graphs=settings.cuda_graphs, seed=settings.seed, prefill_in_graphs=prefill_in_graphs,
    )  # fmt: skip
    return BuiltEngine(engine, info, max_n, budget)


def size_cache(settings: ModelSettings, model: GPT2LMHeadModel, memory: Memory) -> CacheBudget:
    """The cache's budget: `kv_cache_bytes` if set, else what `memory` leaves beside the weights."""
    shape = cache_shape(model)
    sequence = shape.bytes_per_page * shape.pages_per_sequence
    if settings.kv_cache_bytes:
        return fixed_budget(settings.kv_cache_bytes, sequence)
    tensors = (
        *model.parameters(),
        *model.buffers(),
        *(m.packed for m in model.modules() if isinstance(m, PackedLinear)),
    )
    weights = sum(t.numel() * t.element_size() for t in tensors)
    working = working_bytes(shape, model.config.vocab_size, settings.max_num_seqs, settings.prefill_chunk_tokens)
    return cache_budget(
        memory,
        weights=weights,
        working=working,
        fraction=settings.memory_utilization,
        sequence_bytes=sequence,
        max_num_seqs=settings.max_num_seqs,
    )


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
    config = SchedulerConfig(prefill_chunk_tokens=prefill_chunk_tokens, max_num_seqs=max_num_seqs)
    return engine_with(runner, config, clock, seed=seed, predictor=predictor)


def engine_with(
    runner: ModelRunner,
    config: SchedulerConfig,
    clock: Callable[[], float],
    *,
    seed: int = 0,
    predictor: LengthPredictor | None = None,
) -> Engine:
    """The scheduler over the runner's cache pages, and the engine around both: what `engine_on` serves,
    and what a test or benchmark with a runner of its own (graphs it built, an instant one) steps."""
    scheduler = Scheduler(config, runner.cache.page_pool(), predictor or LengthPredictor())
    return Engine(runner, scheduler, token_bytes(), clock=clock, seed=seed)


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
