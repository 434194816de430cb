r"""The host's own work in `Engine.step` (scheduling, the runner's inputs, sampling, detokenizing,
the outputs), without the model: a stand-in runner hands back precomputed logits at once.

    .venv/bin/python -m benchmarks.engine_host_overhead --json benchmarks/results/engine_host_overhead.json \
        --baseline benchmarks/results/engine_host_overhead_before.json --report benchmarks/engine_host_overhead.md
    .venv/bin/python -m benchmarks.engine_host_overhead --render benchmarks/results/engine_host_overhead.json \
        --baseline benchmarks/results/engine_host_overhead_before.json   # the report again

The baseline is this script run on the code before, from a worktree of that commit:

    git worktree add /tmp/before <commit>
    cp benchmarks/__init__.py benchmarks/harness.py benchmarks/engine_host_overhead.py /tmp/before/benchmarks/
    (cd /tmp/before && $OLDPWD/.venv/bin/python -m benchmarks.engine_host_overhead \
        --json $OLDPWD/benchmarks/results/engine_host_overhead_before.json)

`--streams` requests of `--prompt` prompt and `--output` output tokens (ignore_eos) arrive at once, as
in `engine_throughput`; a step is timed in steady state, when every stream decodes and none prefills.
The stand-in's own time (copying logits into its output buffer, as a CUDA graph's replay fills its
own) is taken out of each step. Its logits have a few likely tokens per row, as a trained model's do.

Served, the logits are on the GPU and the sampler's tensor operations over them are device work the
host only launches. Here they would run on this machine's cores and, over 50,257 columns, outweigh
the host's work many times over; so the figures come from logits `--narrow` columns wide, where that
arithmetic is negligible (top-p then sorts its rows rather than taking a 1,024-token head first), and
the same run over the full vocabulary is given beside them for reference.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from benchmarks.engine_throughput import GREEDY, SAMPLED, machine, prompts
from triton_backend.engine_factory import engine_with
from triton_backend.host_memory import keep_freed_memory
from triton_backend.kv_cache import CacheShape, PagedKVCache
from triton_backend.kv_pages import PAGE_SIZE
from triton_backend.model_runner import DecodeInput, PrefillInput
from triton_backend.model_shapes import CONTEXT_LENGTH, VOCAB_SIZE
from triton_backend.sampler import NUCLEUS_HEAD
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import SchedulerConfig

CPU = torch.device("cpu")
MODES = {"greedy": GREEDY, "sampled (temperature 1, top_p 0.9)": SAMPLED}


def peaked_logits(rows: int, width: int, seed: int, likely: int = 8) -> torch.Tensor:
    """Noise with `likely` tokens per row far above it (most of the mass at any width up to the vocabulary's)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, width, generator=generator)
    picks = torch.randint(0, width, (rows, likely), generator=generator)
    return logits.scatter_add_(1, picks, torch.full((rows, likely), 12.0))


class InstantRunner:
    """`GPT2Runner.step`'s interface over a one-float-per-position cache; each step's logits are one
    of a few precomputed sets, copied into one output buffer (the sampler writes over them)."""

    def __init__(self, rows: int, width: int, pages: int, variants: int = 8) -> None:
        shape = CacheShape(n_layer=1, n_head=1, head_dim=1, max_len=CONTEXT_LENGTH, dtype=torch.float32)
        self.cache = PagedKVCache(shape, pages, CPU)
        self._sets = [peaked_logits(rows, width, seed) for seed in range(variants)]
        self._out = torch.empty(rows, width)
        self._steps = 0
        self.seconds = 0.0  # spent in step
        self.last = (0, 0)  # decode rows and chunks of the last step

    def step(
        self, decode: list[DecodeInput], chunks: list[PrefillInput]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        start = time.perf_counter()
        d, c = len(decode), len(chunks)
        self._out[: d + c].copy_(self._sets[self._steps % len(self._sets)][: d + c])
        self._steps += 1
        self.last = (d, c)
        self.seconds += time.perf_counter() - start
        return (self._out[:d] if d else None), (self._out[d : d + c] if c else None)


@dataclass
class Run:
    steady: list[float]  # host seconds of each step in which every stream decoded
    profile: pstats.Stats | None = None  # over the steady steps, when asked for


def run(params: SamplingParams, args: argparse.Namespace, width: int, rounds: int, profile: bool = False) -> Run:
    """`rounds` times, `args.streams` requests at once run to completion on one engine."""
    streams = args.streams
    runner = InstantRunner(2 * streams, width, streams * -(-(args.prompt + args.output) // PAGE_SIZE))
    engine = engine_with(runner, SchedulerConfig(max_num_seqs=streams), time.perf_counter)
    engine.add("warm-up", prompts(1, 8)[0], SamplingParams(max_tokens=4), arrival=0.0)
    while engine.has_work:
        engine.step()
    params = replace(params, max_tokens=args.output, ignore_eos=True)
    result = Run([])
    for r in range(rounds):
        arrival = time.perf_counter()
        for i, ids in enumerate(prompts(streams, args.prompt)):
            engine.add(f"{r}-{i}", ids, params, arrival)
        while engine.has_work:
            profiler = cProfile.Profile() if profile else None
            inside = runner.seconds
            start = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            engine.step()
            if profiler is not None:
                profiler.disable()
            host = time.perf_counter() - start - (runner.seconds - inside)
            if runner.last != (streams, 0):
                continue
            result.steady.append(host)
            if profiler is not None:
                stats = pstats.Stats(profiler)
                result.profile = stats if result.profile is None else result.profile.add(stats)
    return result


def where(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    file = Path(path)
    shown = str(file.relative_to(harness.REPO)) if file.is_relative_to(harness.REPO) else file.name
    return f"{shown}:{line} {name}"


def top_functions(stats: pstats.Stats, steps: int, count: int) -> list[dict[str, Any]]:
    table = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:count]
    return [
        {
            "function": where(func),
            "calls": calls / steps,
            "own_us": own / steps * 1e6,
            "cumulative_us": cum / steps * 1e6,
        }
        for func, (_, calls, own, cum, _) in rows
    ]


def summary(steady: list[float]) -> dict[str, Any]:
    ordered = sorted(s * 1e3 for s in steady)
    return {
        "steps": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "mean": statistics.mean(ordered),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    keep_freed_memory()  # as the served model sets it
    # The host's own tensor calls are on a few hundred numbers: one thread keeps the pool's wake-ups,
    # which the host of a GPU does not pay for them, out of the figures.
    torch.set_num_threads(1)
    modes: dict[str, dict[str, Any]] = {}
    for mode, params in MODES.items():
        profiled = run(params, args, args.narrow, 1, profile=True)
        assert profiled.profile is not None
        modes[mode] = {
            "narrow": summary(run(params, args, args.narrow, args.rounds).steady),
            "full": summary(run(params, args, VOCAB_SIZE, args.full_rounds).steady),
            "profile": top_functions(profiled.profile, len(profiled.steady), args.top),
            "profiled_steps": len(profiled.steady),
        }
        print(f"{mode}: {modes[mode]['narrow']['p50']:.3f} ms per steady step", flush=True)
    return {
        "machine": f"{machine()}, {os.cpu_count()} cores",
        "date": str(date.today()),
        "code": harness.revision(),
        "setup": {
            key: getattr(args, key) for key in ("streams", "prompt", "output", "narrow", "rounds", "full_rounds")
        },
        "modes": modes,
    }


def render(results: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    setup = results["setup"]
    streams, narrow = setup["streams"], setup["narrow"]
    lines = [
        "# Engine host overhead per step",
        "",
        f"Machine: {results['machine']}. Measured {results['date']} on {results['code']} with "
        f"`benchmarks/engine_host_overhead.py`: {streams} streams of {setup['prompt']} prompt and {setup['output']} "
        "output tokens (ignore_eos), all arriving at once, against a stand-in runner that returns precomputed "
        "logits at once (its own time taken out of each step). Steady state: the steps in which "
        f"all {streams} streams decode and none prefills.",
        "",
        f"Host ms per steady step: with [rows, {narrow}] logits, the host's own work ({setup['rounds']} rounds); and "
        f"with [rows, {VOCAB_SIZE}] ({setup['full_rounds']} round), where this CPU also does the sampler's tensor "
        "arithmetic that a GPU does on the device.",
    ]
    if baseline is not None:
        lines += ["", f"Before: the same measurement on {baseline['code']}, {baseline['date']}, {baseline['machine']}."]
    head = f"| mode | steady steps | host ms p50 / p90 / mean, {narrow} columns |"
    rule = "|---|---|---|"
    if baseline is not None:
        head += " before: p50 / p90 / mean |"
        rule += "---|"
    lines += ["", head + f" host ms p50 / mean, {VOCAB_SIZE} columns |", rule + "---|"]
    for mode, r in results["modes"].items():
        row = f"| {mode} | {r['narrow']['steps']} | {spread(r['narrow'])} |"
        if baseline is not None:
            row += f" {spread(baseline['modes'][mode]['narrow'])} |"
        lines.append(row + f" {r['full']['p50']:.3f} / {r['full']['mean']:.3f} |")
    lines += [
        "",
        "A tensor operation costs the host a few microseconds to dispatch on the CPU and somewhat more to launch "
        "on a GPU, so beside a GPU the sampler's share is a little higher than here; everything else the step "
        "does (scheduling, the runner's inputs, bookkeeping, detokenizing, the outputs) is plain Python either way. "
        f"With {narrow} columns top-p sorts each row instead of first taking its {NUCLEUS_HEAD} most likely tokens: "
        "a few operations fewer than served.",
    ]
    for mode, r in results["modes"].items():
        lines += [
            "",
            f"## Profile, {mode}: top {len(r['profile'])} functions by own time, per steady step",
            "",
            f"cProfile over {r['profiled_steps']} steady steps of one more round with {narrow}-column logits. "
            "The profiler slows every Python call down, so these times add up to more than the table's.",
            "",
            "| function | calls per step | own µs per step | cumulative µs per step |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{row['function']}` | {row['calls']:.1f} | {row['own_us']:.1f} | {row['cumulative_us']:.1f} |"
            for row in r["profile"]
        ]
    return "\n".join(lines) + "\n"


def spread(figures: dict[str, Any]) -> str:
    return f"{figures['p50']:.3f} / {figures['p90']:.3f} / {figures['mean']:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--narrow", type=int, default=64, help="columns of the logits the figures come from")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--full-rounds", type=int, default=1, help="rounds with logits over the whole vocabulary")
    parser.add_argument("--top", type=int, default=20, help="functions in each profile table")
    parser.add_argument("--baseline", type=Path, help="a results file of the code before, shown beside")
    harness.output_arguments(parser)
    args = parser.parse_args()
    results = harness.results(args, measure)
    harness.publish(render(results, harness.read_json(args.baseline) if args.baseline else None), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
