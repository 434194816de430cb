"""The engine on one CUDA GPU, gpt2-xl in fp16, against the HBM-bandwidth roofline; all in one run.

    python benchmarks/engine_gpu.py --report benchmarks/engine_gpu.md --json $OUT/engine_gpu.json

1. Bandwidth: a large device-to-device copy (bytes read + written over time), the roofline's rate.
2. Model step alone, context 192: the decode path we serve (CUDA graph + paged-attention kernel)
   against the eager path over a gathered cache, at batch 1..64.
3. Through the engine (scheduling, sampling, detokenizing; what a stream sees): 1/4/16/64 streams of
   128 prompt and 128 output tokens (ignore_eos), all arriving at once.
4. Baselines in the same process: one-request-at-a-time transformers `generate`, and transformers'
   own continuous batching (`generate_batch`) at 64 streams.

Roofline: a decode step must read every weight once and each sequence's cached keys and values
(2 x layers x width x bytes per position); its floor is those bytes over the measured bandwidth.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_throughput import drive, prompts, quantiles  # noqa: E402

from triton_backend.engine import Engine  # noqa: E402
from triton_backend.kv_cache import PagedKVCache  # noqa: E402
from triton_backend.presets import build_model  # noqa: E402
from triton_backend.runner import GPT2Runner, cache_shape  # noqa: E402
from triton_backend.scheduler import SchedulerConfig  # noqa: E402
from triton_backend.tokenizer import token_bytes  # noqa: E402

GPU = torch.device("cuda")


def bandwidth() -> float:
    """Bytes per second of a 4 GiB device-to-device copy, counting bytes read and written."""
    src = torch.empty(1 << 31, dtype=torch.float16, device=GPU).normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    torch.cuda.empty_cache()
    return moved / statistics.median(times)


class Roofline:
    def __init__(self, model: Any, rate: float) -> None:
        config = model.config
        element = next(model.parameters()).element_size()
        # Tied embeddings are one tensor: count each parameter once.
        unique = {p.data_ptr(): p.numel() for p in model.parameters()}
        self.weight_bytes = sum(unique.values()) * element
        self.kv_bytes_per_position = 2 * config.n_layer * config.n_embd * element
        self.rate = rate

    def step_seconds(self, contexts: list[int]) -> float:
        return (self.weight_bytes + sum(contexts) * self.kv_bytes_per_position) / self.rate


def make_engine(model: Any, streams: int, graphs: bool, chunk: int = 256) -> Engine:
    shape = cache_shape(model)
    pages = shape.pages_per_sequence * max(streams, 1) + 8
    cache = PagedKVCache(shape, pages, GPU)
    runner = GPT2Runner(model, cache, graph_batch=max(streams, 1) if graphs else 0)
    config = SchedulerConfig(prefill_chunk_tokens=chunk, max_num_seqs=max(streams, 1))
    return Engine(runner, token_bytes(), config, time.perf_counter)


def time_steps(step: Callable[[], Any], repeat: int = 50) -> float:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def model_steps(model: Any, roof: Roofline, batches: list[int], context: int) -> list[dict[str, Any]]:
    rows = []
    for batch in batches:
        result: dict[str, Any] = {"batch": batch, "context": context}
        for graphs in (True, False):
            engine = make_engine(model, batch, graphs)
            runner, cache = engine.runner, engine.cache
            tables = [[cache.allocate() for _ in range(cache.shape.pages_for(context + 1))] for _ in range(batch)]
            ids = [(7 * i) % 50000 for i in range(batch)]
            positions = [context] * batch
            seconds = time_steps(lambda r=runner, t=tables, i=ids, p=positions: r.decode(t, i, p))
            result["graph_ms" if graphs else "eager_ms"] = seconds * 1000
            del engine, runner, cache
            torch.cuda.empty_cache()
        floor = roof.step_seconds([context + 1] * batch)
        result["roofline_ms"] = floor * 1000
        result["graph_roofline_fraction"] = floor / (result["graph_ms"] / 1000)
        result["graph_tokens_per_s"] = batch / (result["graph_ms"] / 1000)
        rows.append(result)
        print(json.dumps(result), flush=True)
    return rows


def engine_run(
    model: Any, roof: Roofline, streams: int, prompt: int, output: int, graphs: bool, chunk: int
) -> dict[str, Any]:
    engine = make_engine(model, streams, graphs, chunk)
    seen, elapsed = drive(engine, streams, prompt, output, sync=torch.cuda.synchronize)
    del engine
    torch.cuda.empty_cache()
    tokens = seen.generation_tokens
    # Floor for the whole run: every step reads the weights and each stream's context so far.
    floor = sum(roof.step_seconds([prompt + t] * streams) for t in range(output))
    return {
        "path": ("graphs" if graphs else "eager") + f", chunk {chunk}",
        "streams": streams,
        "tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
        "roofline_tokens_per_s": tokens / floor,
        "roofline_fraction": floor / elapsed,
        "ttft": quantiles(seen.time_to_first_token),
        "tpot": quantiles(seen.time_per_output_token),
        "itl": quantiles(seen.inter_token_latency),
    }


def hf_sequential(model: Any, requests: int, prompt: int, output: int) -> dict[str, Any]:
    with torch.inference_mode():
        model.generate(torch.tensor(prompts(1, 8), device=GPU), max_new_tokens=4, do_sample=False, pad_token_id=50256)
        torch.cuda.synchronize()
        start, tokens = time.perf_counter(), 0
        for ids in prompts(requests, prompt):
            out = model.generate(
                torch.tensor([ids], device=GPU), max_new_tokens=output, min_new_tokens=output,
                do_sample=False, pad_token_id=50256,
            )  # fmt: skip
            tokens += out.shape[1] - len(ids)
        elapsed = time.perf_counter() - start
    return {"path": "hf-generate", "streams": 1, "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed,
            "itl": {"p50": elapsed / tokens, "p99": float("nan")}}  # fmt: skip


def hf_continuous(model: Any, streams: int, prompt: int, output: int) -> dict[str, Any]:
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=output, do_sample=False, eos_token_id=None, pad_token_id=50256)
    warm = GenerationConfig(max_new_tokens=2, do_sample=False, eos_token_id=None, pad_token_id=50256)
    model.generate_batch(prompts(1, 8), generation_config=warm)
    torch.cuda.synchronize()
    start = time.perf_counter()
    results = model.generate_batch(prompts(streams, prompt), generation_config=config)
    elapsed = time.perf_counter() - start
    tokens = sum(len(r.generated_tokens) for r in results.values())
    return {"path": "hf-generate_batch", "streams": streams, "tokens": tokens, "seconds": elapsed,
            "tokens_per_s": tokens / elapsed}  # fmt: skip


def ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.2f}"


def report(meta: dict[str, Any], steps: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    lines = [
        f"# Engine on GPU: {meta['preset']} preset (random weights, seed 0), {meta['dtype']}",
        "",
        f"Machine: {meta['machine']}. Measured {meta['date']} with `benchmarks/engine_gpu.py`. "
        f"Measured bandwidth (device-to-device copy, read + write): {meta['bandwidth_gbs']:.0f} GB/s. "
        f"Weights {meta['weight_bytes'] / 1e9:.2f} GB; KV {meta['kv_bytes_per_position'] / 1e3:.0f} kB per position.",
        "",
        "## Model decode step alone (context 192)",
        "",
        "| batch | CUDA graph + Triton kernels ms | eager, gathered cache ms | roofline ms | graph / roofline "
        "| graph tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s['batch']} | {s['graph_ms']:.3f} | {s['eager_ms']:.3f} | {s['roofline_ms']:.3f} | "
            f"{s['graph_roofline_fraction']:.0%} | {s['graph_tokens_per_s']:.0f} |"
        )
    lines += [
        "",
        f"## Through the engine: {meta['prompt']} prompt + {meta['output']} output tokens per stream, all at once",
        "",
        "| path | streams | tokens/s | of roofline | TTFT p50 / p99 ms | per-token p50 / p99 ms | ITL p50 / p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['path']} | {r['streams']} | failed: {r['error']} | | | | |")
            continue
        ttft, tpot, itl = (r.get(k, {"p50": float("nan"), "p99": float("nan")}) for k in ("ttft", "tpot", "itl"))
        fraction = f"{r['roofline_fraction']:.0%}" if "roofline_fraction" in r else "-"
        lines.append(
            f"| {r['path']} | {r['streams']} | {r['tokens_per_s']:.0f} | {fraction} | "
            f"{ms(ttft['p50'])} / {ms(ttft['p99'])} | {ms(tpot['p50'])} / {ms(tpot['p99'])} | "
            f"{ms(itl['p50'])} / {ms(itl['p99'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt2-xl")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32, 64])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--prefill-chunk", type=int, default=1024, help="prefill tokens per engine step")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    rate = bandwidth()
    model, _ = build_model(args.preset, None, GPU, dtype)
    roof = Roofline(model, rate)
    meta = {
        "preset": args.preset, "dtype": args.dtype, "prompt": args.prompt, "output": args.output,
        "machine": f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                   f"Python {platform.python_version()}",
        "date": str(date.today()), "bandwidth_gbs": rate / 1e9,
        "weight_bytes": roof.weight_bytes, "kv_bytes_per_position": roof.kv_bytes_per_position,
    }  # fmt: skip
    print(json.dumps(meta), flush=True)
    steps = model_steps(model, roof, args.batches, context=args.prompt + args.output // 2)
    runs: list[dict[str, Any]] = []
    for streams in args.streams:
        runs.append(engine_run(model, roof, streams, args.prompt, args.output, True, args.prefill_chunk))
        print(json.dumps(runs[-1]), flush=True)
    most = max(args.streams)
    runs.append(engine_run(model, roof, most, args.prompt, args.output, True, 256))
    print(json.dumps(runs[-1]), flush=True)
    runs.append(engine_run(model, roof, most, args.prompt, args.output, False, args.prefill_chunk))
    print(json.dumps(runs[-1]), flush=True)
    runs.append(hf_sequential(model, 2, args.prompt, args.output))
    print(json.dumps(runs[-1]), flush=True)
    try:
        runs.append(hf_continuous(model, max(args.streams), args.prompt, args.output))
    except Exception as error:  # report what transformers' path did, whatever broke
        runs.append({"path": "hf-generate_batch", "streams": max(args.streams), "error": repr(error)[:200]})
    print(json.dumps(runs[-1]), flush=True)
    text = report(meta, steps, runs)
    print(text)
    if args.report:
        args.report.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "steps": steps, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
