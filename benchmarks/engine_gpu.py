r"""The engine on one CUDA GPU, gpt2-xl in fp16, against the HBM-bandwidth roofline; all in one run.

    python -m benchmarks.engine_gpu --parts steps runs triton compile --json $OUT/engine_gpu.json
    python -m benchmarks.engine_gpu --render benchmarks/results/engine_gpu.json \
        benchmarks/results/engine_gpu_triton.json --tuning benchmarks/results/tune_gpu_kernels.json \
        --report benchmarks/engine_gpu.md

1. Bandwidth: a large device-to-device copy (bytes read + written over time), the roofline's rate.
2. Model step alone, context 192, batch 1..64: the served step (CUDA graph; our streaming projections
   and split-context attention where `gpu_configs` chose them) against the path before them (graph,
   cuBLAS projections, one attention program per row and head), the eager path, and torch.compile
   (part `compile`, mode max-autotune) of the same forward pass.
3. Through the engine at the served defaults (scheduling, sampling, detokenizing; what a stream sees):
   1/4/16/64 streams of 128 prompt and 128 output tokens (ignore_eos), all arriving at once; at 64
   streams also with prefill chunks outside the graphs (the path before mixed steps), with 1,024-token
   chunks, and eagerly.
4. Through tritonserver (part `triton`): the same 64 streams over one gRPC stream against the same engine
   in-process, as back-to-back pairs, the server and the load generator on separate cores.

Roofline: a decode step must read every weight once and each sequence's cached keys and values
(2 x layers x width x bytes per position); its floor is those bytes over the measured bandwidth.
The report is rendered from results files alone (`--render`, several merged in order: parts measured
in separate runs), so its prose carries no number by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch

from benchmarks import harness
from benchmarks.cuda_timing import event_seconds
from benchmarks.engine_throughput import drive, quantiles
from triton_backend.engine_factory import build_engine
from triton_backend.model_runner import DecodeInput
from triton_backend.presets import preset_config
from triton_backend.settings import ModelSettings, load_settings

GPU = torch.device("cuda")
# The goals: batch-1 inter-token latency within 2 ms; 64 streams at about half the H100's HBM roofline;
# through tritonserver within 8% of the engine in-process.
GOAL_ITL_MS = 2.0
GOAL_TOKENS_PER_S = 14_000
GOAL_TRITON_RATIO = 0.92
PARTS = ("steps", "runs", "triton", "compile")


def bandwidth() -> float:
    """Bytes per second of a 4 GiB device-to-device copy, counting bytes read and written."""
    src = torch.empty(1 << 31, dtype=torch.float16, device=GPU).normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = [event_seconds(partial(dst.copy_, src)) for _ in range(10)]
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    torch.cuda.empty_cache()
    return moved / statistics.median(times)


class Roofline:
    def __init__(self, meta: dict[str, Any]) -> None:
        self.weight_bytes: float = meta["weight_bytes"]
        self.kv_bytes_per_position: float = meta["kv_bytes_per_position"]
        self.rate: float = meta["bandwidth_gbs"] * 1e9

    def step_seconds(self, contexts: list[int]) -> float:
        return (self.weight_bytes + sum(contexts) * self.kv_bytes_per_position) / self.rate

    def run_seconds(self, streams: int, prompt: int, output: int) -> float:
        """Floor for a whole run: every decode step reads the weights and each stream's context so far."""
        return sum(self.step_seconds([prompt + t] * streams) for t in range(output))


def served(preset: str, dtype: str, **overrides: str) -> ModelSettings:
    """The settings an instance gets from config.pbtxt's defaults, with these NLG_* overrides."""
    env = {"NLG_PRESET": preset, "NLG_DTYPE": dtype, **{f"NLG_{k.upper()}": v for k, v in overrides.items()}}
    return load_settings({}, env)


def time_steps(step: Callable[[], Any], repeat: int = 50) -> float:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    return statistics.median(event_seconds(step) for _ in range(repeat))


def model_steps(preset: str, dtype: str, batches: list[int], context: int, roof: Roofline) -> list[dict[str, Any]]:
    from triton_backend.gpu_configs import CUBLAS_ONLY
    from triton_backend.graph_steps import GraphSteps

    most = max(batches)
    built = build_engine(served(preset, dtype, max_num_seqs=str(most), cuda_graphs="false"), GPU)
    runner, cache = built.runner, built.engine.cache
    # Each sequence on pages of its own (what they hold does not change the cost).
    width = cache.shape.pages_for(context + 1)
    tables = [list(range(i * width, (i + 1) * width)) for i in range(most)]
    paths: dict[str, Any] = {
        "served": GraphSteps(runner.model, cache, runner.scales, most),
        "cublas": GraphSteps(runner.model, cache, runner.scales, most, choices=CUBLAS_ONLY),
    }
    rows: list[dict[str, Any]] = []
    for batch in batches:
        ids, positions, pages = [(7 * i) % 50000 for i in range(batch)], [context] * batch, tables[:batch]
        decode = [DecodeInput(*row) for row in zip(pages, ids, positions, strict=True)]
        result: dict[str, Any] = {"batch": batch, "context": context}
        for name, graphs in paths.items():
            result[f"{name}_ms"] = time_steps(partial(graphs.step, decode, [])) * 1000
        result["eager_ms"] = time_steps(partial(runner.decode, pages, ids, positions), repeat=10) * 1000
        result["roofline_ms"] = roof.step_seconds([context + 1] * batch) * 1000
        rows.append(result)
        print(json.dumps(result), flush=True)
    del paths, built, runner, cache
    torch.cuda.empty_cache()
    return rows


def compiled_steps(preset: str, dtype: str, batches: list[int], context: int) -> list[dict[str, Any]]:
    """torch.compile (max-autotune: autotuned matmuls, fusion, CUDA graphs) of the same decode forward
    pass, our paged attention kernel inside it; in this process (run it in a child with a timeout)."""
    import torch._dynamo
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    from triton_backend.gpu_configs import CUBLAS_ONLY
    from triton_backend.gpu_kernels import paged_attention

    built = build_engine(served(preset, dtype, max_num_seqs=str(max(batches)), cuda_graphs="false"), GPU)
    runner, cache = built.runner, built.engine.cache
    model, attention = runner.model, CUBLAS_ONLY.attention_for(1)
    blocks = cast("list[GPT2Block]", list(model.transformer.h))  # a ModuleList types its items as Module
    width = cache.shape.pages_per_sequence
    rows = []
    for batch in batches:
        tables = torch.full((batch, width), cache.scratch_page, dtype=torch.int32, device=GPU)
        tables[:, : cache.shape.pages_for(context + 1)] = torch.arange(
            batch * cache.shape.pages_for(context + 1), dtype=torch.int32, device=GPU
        ).view(batch, -1)
        ids = torch.arange(batch, device=GPU) * 7
        positions = torch.full((batch,), context, dtype=torch.int32, device=GPU)
        slots = torch.arange(batch, dtype=torch.int32, device=GPU)

        def forward(ids: torch.Tensor = ids, positions: torch.Tensor = positions, tables: torch.Tensor = tables,
                    slots: torch.Tensor = slots) -> torch.Tensor:  # fmt: skip
            t = model.transformer
            h = t.wte(ids) + t.wpe(positions)
            for layer, block in enumerate(blocks):
                qkv = block.attn.c_attn(block.ln_1(h))
                attn = paged_attention(
                    qkv, cache.k[layer], cache.v[layer], tables, slots, positions, runner.scales[layer], attention, True
                )
                h = h + block.attn.c_proj(attn)
                h = h + block.mlp(block.ln_2(h))
            out: torch.Tensor = model.lm_head(t.ln_f(h)).float()
            return out

        torch._dynamo.reset()
        began = time.perf_counter()
        compiled = torch.compile(forward, mode="max-autotune")
        with torch.inference_mode():
            for _ in range(3):
                compiled()
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - began
            step = time_steps(compiled)
        rows.append({"batch": batch, "compiled_ms": step * 1000, "compile_s": compile_s})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def engine_run(built: Any, roof: Roofline, path: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    steps: list[float] = []
    seen, elapsed = drive(built.engine, streams, prompt, output, sync=torch.cuda.synchronize, step_seconds=steps)
    tokens = seen.generation_tokens
    floor = roof.run_seconds(streams, prompt, output)
    return {
        "path": path, "streams": streams, "tokens": tokens, "seconds": elapsed, "steps": len(steps),
        "tokens_per_s": tokens / elapsed, "roofline_fraction": floor / elapsed,
        "step_ms": quantiles([s * 1000 for s in steps]),
        "ttft": quantiles(seen.time_to_first_token), "tpot": quantiles(seen.time_per_output_token),
        "itl": quantiles(seen.inter_token_latency),
    }  # fmt: skip


def engine_runs(preset: str, dtype: str, streams: list[int], prompt: int, output: int, roof: Roofline) -> list[Any]:
    settings = served(preset, dtype)
    most = max(streams)
    variants: list[tuple[str, ModelSettings, list[int]]] = [
        ("served", settings, streams),
        ("prefill outside graphs", settings, [most]),
        ("chunk 1024", replace(settings, prefill_chunk_tokens=1024), [most]),
        ("eager", replace(settings, cuda_graphs=False), [most]),
    ]
    runs = []
    for name, chosen, counts in variants:
        built = build_engine(chosen, GPU, clock=time.perf_counter, prefill_in_graphs=name != "prefill outside graphs")
        for count in counts:
            runs.append(engine_run(built, roof, name, count, prompt, output))
            print(json.dumps(runs[-1]), flush=True)
        del built
        torch.cuda.empty_cache()
    return runs


def triton_pairs(preset: str, dtype: str, streams: int, prompt: int, output: int, pairs: int) -> list[dict[str, Any]]:
    """In-process engine, then the same load through tritonserver, `pairs` times. The server (and this
    process while it measures in-process) run on the first half of the cores, the load generator on
    the second half."""
    from nlgsim.replay import replay
    from nlgsim.workload import Request
    from triton_backend.launch import TritonServer

    cores = sorted(os.sched_getaffinity(0))
    server_cores, client_cores = set(cores[: len(cores) // 2]), set(cores[len(cores) // 2 :])
    settings = served(preset, dtype)
    results = []
    for _ in range(pairs):
        os.sched_setaffinity(0, server_cores)
        built = build_engine(settings, GPU, clock=time.perf_counter)
        seen, elapsed = drive(built.engine, streams, prompt, output, sync=torch.cuda.synchronize)
        inproc = seen.generation_tokens / elapsed
        del built
        torch.cuda.empty_cache()
        env = {"NLG_PRESET": preset, "NLG_DTYPE": dtype}
        log = Path(os.environ.get("OUT", "/tmp")) / "tritonserver.log"
        with TritonServer(env=env, ready_timeout=600, log_path=log) as server:  # the server inherits the cores
            os.sched_setaffinity(0, client_cores)
            replay(server.grpc_url, [Request(0, 0.0, 8, (2,))], temperature=0.0)  # warm-up
            start = time.perf_counter()
            measured = replay(server.grpc_url, [Request(i, 0.0, prompt, (output,)) for i in range(streams)],
                              temperature=0.0)  # fmt: skip
            took = time.perf_counter() - start
        os.sched_setaffinity(0, set(cores))
        tokens = sum(sum(m.tokens) for m in measured)
        result = {
            "streams": streams, "in_process_tokens_per_s": inproc, "triton_tokens_per_s": tokens / took,
            "triton_ttft": quantiles([m.ttft for m in measured]),
            "triton_tpot": quantiles([m.per_token for m in measured]),
            "server_cores": len(server_cores), "client_cores": len(client_cores),
        }  # fmt: skip
        results.append(result)
        print(json.dumps(result), flush=True)
    return results


def in_child(flag: str, args: argparse.Namespace, timeout: float) -> Any:
    """Run one part in a child process (its own CUDA context and compile caches), bounded in time."""
    command = [sys.executable, "-m", "benchmarks.engine_gpu", flag, "--preset", args.preset, "--dtype", args.dtype,
               "--batches", *map(str, args.batches)]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, cwd=harness.REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    if done.returncode != 0:
        (Path(os.environ.get("OUT", "/tmp")) / f"{flag.strip('-')}.stderr").write_text(done.stderr)
        return {"error": last_exception(done.stderr)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def last_exception(stderr: str) -> str:
    """The last `SomeError: message` line of a traceback, or its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (raised or lines or ["failed"])[-1][:300]


def ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.2f}"


def render(results: dict[str, Any]) -> str:
    meta, steps, runs = results["meta"], results.get("steps", []), results.get("runs", [])
    roof = Roofline(meta)
    compiled = {r["batch"]: r for r in results.get("compiled", []) if "batch" in r}
    lines = [
        f"# Engine on GPU: {meta['preset']} preset (random weights, seed 0), {meta['dtype']}",
        "",
        f"Machine: {meta['machine']}. Measured {meta['date']} with `benchmarks/engine_gpu.py`. "
        f"Measured bandwidth (device-to-device copy, read + write): {meta['bandwidth_gbs']:.0f} GB/s. "
        f"Weights {meta['weight_bytes'] / 1e9:.2f} GB; KV {meta['kv_bytes_per_position'] / 1e3:.0f} kB per position. "
        f"Kernel choices: `triton_backend/gpu_configs.json`, from `benchmarks/tune_gpu_kernels.py` on this GPU model.",
        "",
        "## Model decode step alone (context 192)",
        "",
        "| batch | served step ms | of roofline | cuBLAS + unsplit attention ms | torch.compile max-autotune ms "
        "| eager ms | roofline ms | served tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in steps:
        c = compiled.get(s["batch"])
        compiled_ms = f"{c['compiled_ms']:.3f}" if c else "-"
        lines.append(
            f"| {s['batch']} | {s['served_ms']:.3f} | {s['roofline_ms'] / s['served_ms']:.0%} | {s['cublas_ms']:.3f} | "
            f"{compiled_ms} | {s['eager_ms']:.3f} | {s['roofline_ms']:.3f} | {s['batch'] / s['served_ms'] * 1000:.0f} |"
        )
    if "error" in results.get("compiled_status", {}):
        lines += [
            "",
            "torch.compile (mode max-autotune, our attention kernel inside the compiled step): not measured, "
            f"it failed: `{results['compiled_status']['error']}`.",
        ]
    lines += [
        "",
        f"## Through the engine: {meta['prompt']} prompt + {meta['output']} output tokens per stream, all at once",
        "",
        "Served defaults (config.pbtxt): "
        f"max_num_seqs {meta['settings']['max_num_seqs']}, "
        f"prefill_chunk_tokens {meta['settings']['prefill_chunk_tokens']}, "
        "CUDA graphs for decode and mixed steps.",
        "",
        "| path | streams | tokens/s | of roofline | steps | step p50 ms | TTFT p50 / p99 ms | per-token p50 / p99 ms "
        "| ITL p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ttft, tpot, itl = r["ttft"], r["tpot"], r["itl"]
        lines.append(
            f"| {r['path']} | {r['streams']} | {r['tokens_per_s']:.0f} | {r['roofline_fraction']:.0%} | {r['steps']} | "
            f"{r['step_ms']['p50']:.2f} | {ms(ttft['p50'])} / {ms(ttft['p99'])} | "
            f"{ms(tpot['p50'])} / {ms(tpot['p99'])} | "
            f"{ms(itl['p50'])} / {ms(itl['p99'])} |"
        )
    pairs = results.get("triton", [])
    if pairs:
        lines += [
            "",
            f"## Through tritonserver: {pairs[0]['streams']} streams over one gRPC stream, against in-process",
            "",
            f"Server on {pairs[0]['server_cores']} cores, load generator (`nlgsim.replay`) on the other "
            f"{pairs[0]['client_cores']} (`sched_setaffinity`); each pair runs in-process first, "
            "then through the server.",
            "",
            "| pair | in-process tokens/s | Triton tokens/s | Triton / in-process | Triton TTFT p50 ms "
            "| Triton per-token p50 ms |",
            "|---|---|---|---|---|---|",
        ]
        for i, p in enumerate(pairs, 1):
            ratio = p["triton_tokens_per_s"] / p["in_process_tokens_per_s"]
            lines.append(
                f"| {i} | {p['in_process_tokens_per_s']:.0f} | {p['triton_tokens_per_s']:.0f} | {ratio:.0%} | "
                f"{ms(p['triton_ttft']['p50'])} | {ms(p['triton_tpot']['p50'])} |"
            )
    elif "triton_status" in results:
        lines += ["", f"Through tritonserver: {results['triton_status']}"]
    if "tuning" in results:
        lines += ["", *tuning_tables(results["tuning"], roof)]
    if steps and runs:
        lines += ["", "## Against the goals (computed from the tables above)", "", *verdicts(results, roof)]
    if "tuning" in results and steps:
        lines += ["", *batch_one_budget(results, roof)]
    return "\n".join(lines) + "\n"


SHAPE_NAMES = {0: "attn.c_attn (+ add, ln_1)", 1: "attn.c_proj", 2: "mlp.c_fc (+ add, ln_2, GELU)", 3: "mlp.c_proj"}


def tuning_tables(tuning: dict[str, Any], roof: Roofline) -> list[str]:
    """Our streaming projection against cuBLAS on the same shapes, and the attention split, per rows."""
    shapes = list(dict.fromkeys((r["n"], r["k"]) for r in tuning["linear"]))
    all_timed = sum(len(r["all"]) for r in tuning["linear"])
    split_timed = sum(c.get("split", 1) > 1 for r in tuning["linear"] for _, c in r["all"])
    lines = [
        "## Kernels against cuBLAS (`benchmarks/tune_gpu_kernels.py`)",
        "",
        "Each figure: one call's median time in a CUDA graph of 12 calls over distinct weight copies "
        "(weights from HBM, not L2); cuBLAS includes the add + LayerNorm kernel where the step fuses it into ours. "
        "Fraction: the weights' bytes over the time, of the measured bandwidth. "
        f"Candidates with a split reduction (split-K) among those timed: {split_timed} of {all_timed}.",
        "",
        "| projection [out x in] | rows | cuBLAS us | of bandwidth | best of ours us | of bandwidth | ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in tuning["linear"]:
        index = shapes.index((r["n"], r["k"]))
        name = SHAPE_NAMES.get(index, "lm_head (ln_f apart)")
        best = r["best"]
        kind = f"{'tensor cores' if best['dot'] else 'FMA'} {best['block_n']}x{best['block_k']}"
        if best.get("split", 1) > 1:
            kind += f", K split {best['split']} ways"
        lines.append(
            f"| {name} [{r['n']} x {r['k']}] | {r['rows']} | {r['cublas_us']:.1f} | "
            f"{r['weight_bytes'] / (r['cublas_us'] * 1e-6) / roof.rate:.0%} | {r['best_us']:.1f} | "
            f"{r['weight_bytes'] / (r['best_us'] * 1e-6) / roof.rate:.0%} | {kind} |"
        )
    lines += [
        "",
        f"Attention at context {tuning['attention'][0]['context']}, one call per layer: the best context split "
        "against one program per row and head (the kernel before splits).",
        "",
        "| rows | best split | us | unsplit us | unsplit / split |",
        "|---|---|---|---|---|",
    ]
    for r in tuning["attention"]:
        unsplit = min(t for t, c in r["all"] if c["split"] >= 1 << 20)
        split = "none" if r["best"]["split"] >= 1 << 20 else str(r["best"]["split"])
        lines.append(f"| {r['rows']} | {split} | {r['best_us']:.1f} | {unsplit:.1f} | {unsplit / r['best_us']:.2f}x |")
    return lines


def batch_one_budget(results: dict[str, Any], roof: Roofline) -> list[str]:
    """Where a batch-1 step's time goes, from the kernel timings, and what would close the gap."""
    tuning, step = results["tuning"], next(s for s in results["steps"] if s["batch"] == 1)
    layers = preset_config(results["meta"]["preset"]).n_layer
    at_one = [r for r in tuning["linear"] if r["rows"] == 1]
    projections = [min(r["cublas_us"], r["best_us"]) for r in at_one[:4]]
    head = min(at_one[4]["cublas_us"], at_one[4]["best_us"])
    attention = tuning["attention"][0]["best_us"]
    layer_bytes = sum(r["weight_bytes"] for r in at_one[:4])
    spent = (sum(projections) + attention) * layers + head
    at_90 = layer_bytes / (0.9 * roof.rate) * 1e6
    one = next((r for r in results.get("runs", []) if r["path"] == "served" and r["streams"] == 1), None)
    engine = one["itl"]["p50"] * 1000 - step["served_ms"] if one else 0.0
    closed = ((at_90 + attention) * layers + head) / 1000 + engine
    ours_won = sum(r["best_us"] < r["cublas_us"] for r in at_one[:4])
    best_share = max(r["weight_bytes"] / (min(r["cublas_us"], r["best_us"]) * 1e-6) / roof.rate for r in at_one[:4])
    return [
        "Where a batch-1 step goes (kernel timings above, times the layers):",
        "",
        f"- the four projections of a layer: {sum(projections):.1f} us at "
        f"{layer_bytes / (sum(projections) * 1e-6) / roof.rate:.0%} of bandwidth, "
        f"{sum(projections) * layers / 1000:.2f} ms a step; attention {attention:.1f} us a layer, "
        f"{attention * layers / 1000:.2f} ms; the LM head {head:.0f} us. Together {spent / 1000:.2f} ms of the "
        f"step's {step['served_ms']:.2f} ms.",
        f"- Projections streaming at 90% of bandwidth would take {at_90:.1f} us a layer: a step of about "
        f"{closed - engine:.2f} ms and, with the engine's {engine:.2f} ms a token, an inter-token latency of about "
        f"{closed:.2f} ms. At one row, ours beat cuBLAS on {ours_won} of the 4 projections "
        f"(table above); the fastest of a layer's 4 ran at {best_share:.0%} of bandwidth.",
    ]


def verdicts(results: dict[str, Any], roof: Roofline) -> list[str]:
    steps, runs = results["steps"], results["runs"]
    out = []
    one = next((r for r in runs if r["path"] == "served" and r["streams"] == 1), None)
    step1 = next((s for s in steps if s["batch"] == 1), None)
    if one and step1:
        itl = one["itl"]["p50"] * 1000
        out.append(
            f"- Batch-1 inter-token latency through the engine: {itl:.2f} ms (goal <= {GOAL_ITL_MS:.0f} ms: "
            f"**{'met' if itl <= GOAL_ITL_MS else 'not met'}**). The step alone: {step1['served_ms']:.3f} ms, "
            f"{step1['roofline_ms'] / step1['served_ms']:.0%} of the roofline's {step1['roofline_ms']:.3f} ms and "
            f"{step1['cublas_ms'] / step1['served_ms']:.2f}x faster than cuBLAS with unsplit attention; "
            f"the engine adds {itl - step1['served_ms']:.2f} ms a token."
        )
    most = max((r for r in runs if r["path"] == "served"), key=lambda r: r["streams"], default=None)
    if most:
        rate = most["tokens_per_s"]
        line = (
            f"- {most['streams']} streams at the served defaults: {rate:.0f} tokens/s (goal >= {GOAL_TOKENS_PER_S:,}: "
            f"**{'met' if rate >= GOAL_TOKENS_PER_S else 'not met'}**), "
            f"{most['roofline_fraction']:.0%} of the run's roofline"
        )
        others = {r["path"]: r["tokens_per_s"] for r in runs if r["streams"] == most["streams"] and r is not most}
        if others:
            line += "; " + ", ".join(f"{rate / v:.2f}x {k}" for k, v in others.items())
        stepn = next((s for s in steps if s["batch"] == most["streams"]), None)
        enough = [r for r in runs if r["streams"] == most["streams"] and r["tokens_per_s"] >= GOAL_TOKENS_PER_S]
        for r in enough:
            line += (
                f"; with {r['path']} the goal is met ({r['tokens_per_s']:.0f} tokens/s, TTFT p50 "
                f"{ms(r['ttft']['p50'])} ms against {ms(most['ttft']['p50'])}, ITL p99 {ms(r['itl']['p99'])} ms "
                f"against {ms(most['itl']['p99'])})"
            )
        if stepn:
            line += (
                f". A {most['streams']}-row decode step alone takes {stepn['served_ms']:.3f} ms; the engine's median "
                f"step {most['step_ms']['p50']:.2f} ms"
            )
        out.append(line + ".")
    pairs = results.get("triton", [])
    if pairs:
        ratios = [p["triton_tokens_per_s"] / p["in_process_tokens_per_s"] for p in pairs]
        ratio = statistics.median(ratios)
        out.append(
            f"- Through tritonserver / in-process at {pairs[0]['streams']} streams: {ratio:.0%}, the median of "
            f"{len(pairs)} pairs (goal >= {GOAL_TRITON_RATIO:.0%}: "
            f"**{'met' if ratio >= GOAL_TRITON_RATIO else 'not met'}**)."
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt2-xl")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32, 64])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--context", type=int, default=192)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=["steps", "runs"])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--render", type=Path, nargs="+", help="only render the report from these results files")
    parser.add_argument("--tuning", type=Path, help="with --render: tune_gpu_kernels.py's timings, for the report")
    harness.output_arguments(parser, render=False)
    args = parser.parse_args()
    if args.compile_worker:
        print(json.dumps(compiled_steps(args.preset, args.dtype, args.batches, args.context)))
        return 0
    results = merged(args.render, args.tuning) if args.render else measure(args)
    if args.json:
        harness.write_json(args.json, results)
    harness.publish(render(results), args.report)
    return 0


def merged(paths: list[Path], tuning: Path | None) -> dict[str, Any]:
    """Results files measured in separate runs: later files add or replace parts; the first one's
    machine and date stand. With `tuning`, tune_gpu_kernels's timings beside them."""
    results: dict[str, Any] = {}
    for path in paths:
        results = {**results, **harness.read_json(path), "meta": results.get("meta")}
    results["meta"] = results["meta"] or harness.read_json(paths[0])["meta"]
    if tuning:
        results["tuning"] = harness.read_json(tuning)
    return results


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import GPT2LMHeadModel

    rate = bandwidth()
    with torch.device("meta"):
        model = GPT2LMHeadModel(preset_config(args.preset))
    config, element = model.config, torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    settings = served(args.preset, args.dtype)
    meta = {
        "preset": args.preset, "dtype": args.dtype, "prompt": args.prompt, "output": args.output,
        "machine": f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                   f"Python {platform.python_version()}, {len(os.sched_getaffinity(0))} CPU cores",
        "date": str(date.today()), "bandwidth_gbs": rate / 1e9,
        "weight_bytes": sum(p.numel() for p in model.parameters()) * element,  # tied embeddings count once
        "kv_bytes_per_position": 2 * config.n_layer * config.n_embd * element,
        "settings": {"max_num_seqs": settings.max_num_seqs, "prefill_chunk_tokens": settings.prefill_chunk_tokens},
    }  # fmt: skip
    del model
    print(json.dumps(meta), flush=True)
    roof = Roofline(meta)
    results: dict[str, Any] = {"meta": meta}
    if "steps" in args.parts:
        results["steps"] = model_steps(args.preset, args.dtype, args.batches, args.context, roof)
    if "runs" in args.parts:
        results["runs"] = engine_runs(args.preset, args.dtype, args.streams, args.prompt, args.output, roof)
    if "triton" in args.parts:
        try:
            results["triton"] = triton_pairs(args.preset, args.dtype, max(args.streams), args.prompt, args.output,
                                             args.pairs)  # fmt: skip
        except Exception as error:  # the report says what broke; the engine's figures stand
            results["triton_status"] = f"failed: {error!r}"[:300]
    if "compile" in args.parts:
        compiled = in_child("--compile-worker", args, timeout=360)
        if isinstance(compiled, list):
            results["compiled"] = compiled
        else:
            results["compiled_status"] = compiled
    return results


if __name__ == "__main__":
    raise SystemExit(main())
