"""Measure an engine profile on the real engine (``triton_backend``), on this machine.

Three measurements, each the minimum of a few repetitions (other processes on the machine can only
add time, so the minimum is the engine's own cost). Repetitions are whole sweeps over the grid, not
back-to-back calls of one cell, so a burst of load from elsewhere spoils different cells in different
sweeps and the minimum survives it:

* decode: the model runner's batched decode, ``GPT2Runner.decode``, for every (batch, context) of the
  grid, plus the engine's own per-step cost beyond the forward pass (scheduling, sampling,
  detokenizing), measured through ``Engine.step`` with real requests at a short context for each
  batch size and added to that row;
* prefill: ``Engine.step`` until a request of each prompt length has its first token (chunked as the
  engine chunks, so P(n) includes the per-chunk step cost);
* start-up: optionally, the lead's ``triton_backend.launch.TritonServer`` from process start to ready
  (model build included; a cluster adds scheduling and image pull on top, not measured here).

Decode timings use the cache's pages without filling them first: attention reads the same number of
cached positions whatever their values, so the cost is the same and the grid takes minutes, not hours.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from nlgsim.profile import EngineProfile

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64)
DEFAULT_CONTEXTS = (32, 128, 256, 512, 768, 1000)
DEFAULT_PROMPTS = (16, 64, 128, 256, 384, 512, 768, 1000)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _min_over_sweeps(
    cells: dict[tuple[int, int], Callable[[], object]], reps: int, log: Callable[[str], None]
) -> dict[tuple[int, int], float]:
    """Each cell's minimum over ``reps`` sweeps of the whole grid (after a warm-up sweep)."""
    for fn in cells.values():
        fn()
    best = dict.fromkeys(cells, float("inf"))
    for sweep in range(reps):
        t0 = time.perf_counter()
        for cell, fn in cells.items():
            t = time.perf_counter()
            fn()
            best[cell] = min(best[cell], time.perf_counter() - t)
        log(f"  sweep {sweep + 1}/{reps}: {time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.2f}")
    return best


def _min_time(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up: first calls of a shape allocate and pick kernels
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return min(samples)


_BUILD = """
import torch
from triton_backend.engine_factory import build_engine
from triton_backend.settings import load_settings
served = {{"NLG_PRESET": {preset!r}, "NLG_DTYPE": {dtype!r}, "NLG_MAX_NUM_SEQS": "{seqs}"}}
build_engine(load_settings({{}}, served), torch.device({device!r}))
"""

def measure_startup(preset: str, dtype: str, device: str = "cpu", max_num_seqs: int = 64) -> tuple[float, str]:
    """Seconds from start to ready, and how it was measured.

    First choice: tritonserver with the project's model, from start to its ready endpoint answering.
    If the server cannot start here, a fresh Python process that imports torch and builds the model
    and KV cache as the model's ``initialize()`` does (the bulk of it; the server's own start is not in it).
    """
    from triton_backend.launch import TritonServer

    t = time.perf_counter()
    try:
        with TritonServer(env={"NLG_PRESET": preset, "NLG_DTYPE": dtype}):
            return time.perf_counter() - t, "tritonserver start to ready"
    except (RuntimeError, TimeoutError) as e:
        reason = str(e).splitlines()[0]
    code = _BUILD.format(device=device, preset=preset, dtype=dtype, seqs=max_num_seqs)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t, f"python process building the engine (tritonserver did not start: {reason})"


def measure(
    preset: str = "gpt2",
    dtype: str = "float32",
    device_name: str = "cpu",
    max_num_seqs: int = 64,
    prefill_chunk_tokens: int = 256,
    batches: Sequence[int] = DEFAULT_BATCHES,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    prompts: Sequence[int] = DEFAULT_PROMPTS,
    reps: int = 3,
    startup_s: float | None = None,
    log: Callable[[str], None] = print,
) -> EngineProfile:
    """Build the engine as the Triton model does and time it. ``startup_s=None`` measures start-up."""
    import torch

    from triton_backend.engine_factory import build_engine
    from triton_backend.host_memory import keep_freed_memory
    from triton_backend.sampling_params import SamplingParams
    from triton_backend.settings import load_settings

    keep_freed_memory()  # as the Triton model does: the profile times the engine as served
    device = torch.device(device_name)
    served = {"preset": preset, "dtype": dtype, "max_num_seqs": max_num_seqs,
              "prefill_chunk_tokens": prefill_chunk_tokens}  # fmt: skip
    built = build_engine(load_settings({}, {f"NLG_{k.upper()}": str(v) for k, v in served.items()}), device)
    engine, info, runner = built.engine, built.info, built.runner
    shape = engine.cache.shape

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    batches = [b for b in batches if b <= max_num_seqs]

    def decode(b: int, ctx: int) -> Callable[[], object]:
        # b sequences of ctx cached tokens, each on its own pages (what they hold does not change the cost).
        pages = shape.pages_for(ctx)
        tables = [list(range(i * pages, (i + 1) * pages)) for i in range(b)]

        def run() -> None:
            runner.decode(tables, [1] * b, [ctx - 1] * b)
            sync()

        return run

    log(f"decode: runner, {len(batches)} batch sizes x {len(contexts)} contexts, {reps} sweeps")
    cells = {(b, c): decode(b, c) for b in batches for c in contexts}
    best = _min_over_sweeps(cells, reps, log)
    table = [[best[(b, c)] for c in contexts] for b in batches]

    # The engine's cost per step beyond the forward pass, for each batch size, at a short context.
    overhead = []
    short = 16
    for b in batches:
        params = SamplingParams(max_tokens=10_000, ignore_eos=True, temperature=1.0)
        for i in range(b):
            engine.add(f"o{b}-{i}", [1] * short, params, time.monotonic())
        while (stats := engine.stats()).prefilling_requests or stats.waiting_requests:
            engine.step()
        steps = []
        for _ in range(reps + 1):
            t = time.perf_counter()
            engine.step()
            sync()
            steps.append(time.perf_counter() - t)
        ctx = short + reps + 1
        forward = _min_time(decode(b, ctx), reps)
        step = min(steps[1:])
        overhead.append(max(0.0, step - forward))
        for i in range(b):
            engine.abort(f"o{b}-{i}")
        log(f"  batch {b}: engine step {step * 1000:.1f} ms, forward {forward * 1000:.1f} ms")
    decode_s = tuple(tuple(v + overhead[i] for v in row) for i, row in enumerate(table))

    log(f"prefill: engine, prompts {list(prompts)}")
    params = SamplingParams(max_tokens=1, ignore_eos=True, temperature=1.0)
    runs = iter(range(10**9))

    def first_token(n: int) -> Callable[[], object]:
        def run() -> None:
            engine.add(f"p{n}-{next(runs)}", [1] * n, params, time.monotonic())
            while engine.has_work:
                engine.step()
            sync()

        return run

    best_prefill = _min_over_sweeps({(n, 0): first_token(n) for n in prompts}, reps, log)
    prefill = [best_prefill[(n, 0)] for n in prompts]
    log("  " + ", ".join(f"{n}: {v * 1000:.0f} ms" for n, v in zip(prompts, prefill, strict=True)))

    startup_how = "given"
    if startup_s is None:
        log("start-up: tritonserver from start to ready")
        startup_s, startup_how = measure_startup(preset, dtype, device_name, max_num_seqs)
        log(f"  {startup_s:.1f} s ({startup_how})")
    hardware = f"{device_name}: {cpu_name()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"
    if device.type == "cuda":
        hardware = f"cuda: {torch.cuda.get_device_name(device)}"
    extra: dict[str, Any] = {
        "engine_overhead_s": overhead,
        "parameters": info.parameters,
        "torch": torch.__version__,
        "reps": reps,
        "load_average": list(os.getloadavg()),
        "startup_measured_as": startup_how,
        # The eager decode step gathers every sequence's cache up to the longest one (padding); the
        # graph step reads each sequence's own positions. The simulator prices a step accordingly.
        "decode_cost_context": "mean" if runner.graphs is not None else "max",
    }
    return EngineProfile(
        hardware=hardware,
        preset=preset,
        dtype=info.dtype,
        source="measured",
        max_batch=max_num_seqs,
        max_context=shape.max_len,
        prefill_chunk_tokens=prefill_chunk_tokens,
        page_size=shape.page_size,
        kv_pages=engine.cache.num_pages,
        startup_s=round(startup_s, 3),
        decode_batch=tuple(batches),
        decode_context=tuple(contexts),
        decode_s=tuple(tuple(round(v, 6) for v in row) for row in decode_s),
        prefill_tokens=tuple(prompts),
        prefill_s=tuple(round(v, 6) for v in prefill),
        notes=(
            f"Measured with `python -m nlgsim profile` on the real engine ({info.describe()}). "
            "decode_s = runner decode + engine per-step overhead; prefill_s = engine steps to first token."
        ),
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra=extra,
    )
