r"""Engine throughput and latency on this machine: our continuous-batching engine against
one-request-at-a-time transformers `generate`, transformers' own continuous batching, and the same
load through a real tritonserver (gRPC streaming), all measured in one run.

    .venv/bin/python -m benchmarks.engine_throughput --preset gpt2 --streams 1 4 16 64 \
        --json benchmarks/results/engine_cpu.json --report benchmarks/engine_cpu.md
    .venv/bin/python -m benchmarks.engine_throughput --render benchmarks/results/engine_cpu.json   # the report again

Run it on a quiet machine: the load average of each run is in the report, and OpenMP workers that
spin while other processes want the cores slow every path down by several times.

Each configuration runs in its own process, so its peak memory (max RSS) is its own. Every stream
has a `--prompt`-token prompt and generates exactly `--output` tokens (ignore_eos); all streams
arrive at once, so time to first token includes waiting for the other prompts' prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from typing import Any, cast

import torch
import transformers
from transformers import GenerationConfig, GPT2LMHeadModel

from benchmarks import harness, process_cpu
from triton_backend.engine import Engine
from triton_backend.engine_factory import engine_on
from triton_backend.host_memory import keep_freed_memory
from triton_backend.kv_cache import PagedKVCache, pages_for_budget
from triton_backend.metrics import Observations, RequestTracker
from triton_backend.presets import build_model
from triton_backend.runner import cache_shape
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import SchedulerConfig

CPU = torch.device("cpu")


def prompts(count: int, length: int) -> list[list[int]]:
    return [[(1000 + 37 * i + j) % 50000 for j in range(length)] for i in range(count)]


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan")}
    ordered = sorted(values)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


GREEDY = SamplingParams(temperature=0.0)
# What a client gets without asking for greedy: vLLM's default temperature, with a nucleus.
SAMPLED = SamplingParams(temperature=1.0, top_p=0.9)


def drive(
    engine: Engine,
    streams: int,
    prompt: int,
    output: int,
    sync: Callable[[], None] = lambda: None,
    sampling: SamplingParams = GREEDY,
    step_seconds: list[float] | None = None,
) -> tuple[Observations, float]:
    """Warm the engine up, then run `streams` requests arriving at once to completion; returns what
    the serving metrics would observe and the seconds it took. `sync` waits for the device; each
    step's wall time goes to `step_seconds` when given."""
    engine.add("warm-up", prompts(1, 8)[0], SamplingParams(max_tokens=4), arrival=0.0)
    while engine.has_work:  # first calls pay for lazy initialisation; keep them out of the figures
        engine.step()
    params = replace(sampling, max_tokens=output, ignore_eos=True)
    tracker, seen = RequestTracker(), Observations()
    sync()
    start = time.perf_counter()
    for i, ids in enumerate(prompts(streams, prompt)):
        engine.add(str(i), ids, params, arrival=start)
    last = start
    while engine.has_work:
        for out in engine.step():
            tracker.observe(out, seen)
        if step_seconds is not None:
            now = time.perf_counter()
            step_seconds.append(now - last)
            last = now
    return seen, time.perf_counter() - start


def run_own(
    preset: str, streams: int, prompt: int, output: int, pack_cpu: bool = True, sampling: SamplingParams = GREEDY
) -> dict[str, Any]:
    model, _ = build_model(preset, None, CPU, torch.float32)
    shape = cache_shape(model)
    budget = shape.bytes_per_page * shape.pages_for(prompt + output) * streams
    cache = PagedKVCache(shape, max(pages_for_budget(shape, budget, 0), shape.pages_per_sequence), CPU)
    engine = engine_on(
        model, cache, max(streams, 1), SchedulerConfig().prefill_chunk_tokens, time.perf_counter, pack_cpu=pack_cpu
    )
    before: list[process_cpu.Snapshot] = []  # taken by `sync`, once the warm-up is done

    def started() -> None:
        before.append(process_cpu.snapshot(os.getpid()))

    seen, elapsed = drive(engine, streams, prompt, output, sync=started, sampling=sampling)
    cpu = process_cpu.snapshot(os.getpid()).total - before[0].total
    result = summary(
        seen.generation_tokens,
        elapsed,
        seen.time_to_first_token,
        seen.time_per_output_token,
        seen.inter_token_latency,
    )
    return {**result, "cpu_seconds": {"engine process": cpu}}


def hf_generate(model: GPT2LMHeadModel, ids: list[list[int]], tokens: int) -> torch.Tensor:
    """transformers' own greedy `generate` of exactly `tokens` new tokens; the prompts and them."""
    # generate's annotations differ across the transformers releases the project runs on (4.x in the
    # Triton image, 5.x here); this call needs only "keyword arguments in, tensor out".
    generate = cast(Callable[..., object], model.generate)
    with torch.inference_mode():
        out = generate(
            torch.tensor(ids), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=50256
        )
    assert isinstance(out, torch.Tensor)  # a tensor of ids, not an output object: no return_dict_in_generate
    return out


def hf_greedy(tokens: int) -> GenerationConfig:
    # GenerationConfig.__init__ takes unannotated **kwargs.
    return GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=tokens, do_sample=False, eos_token_id=None, pad_token_id=50256
    )


def run_hf_sequential(preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    model, _ = build_model(preset, None, CPU, torch.float32)
    tokens, tpot = 0, []
    hf_generate(model, prompts(1, 8), 4)
    start = time.perf_counter()
    for ids in prompts(streams, prompt):
        began = time.perf_counter()
        out = hf_generate(model, [ids], output)
        took = time.perf_counter() - began
        generated = out.shape[1] - len(ids)
        tokens += generated
        tpot.append(took / generated)
    return summary(tokens, time.perf_counter() - start, [], tpot, [])


def run_hf_continuous(preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    from transformers import ContinuousBatchingConfig

    model, _ = build_model(preset, None, CPU, torch.float32)
    config = hf_greedy(output)
    # Left alone it sizes its cache from free memory (14 GiB even for the tiny preset): give it what
    # our engine gets, pages for every stream's prompt and output.
    blocks = streams * -(-(prompt + output) // 32) + 8
    cb = ContinuousBatchingConfig(num_blocks=blocks, block_size=32, max_batch_tokens=256)
    warm = hf_greedy(2)
    model.generate_batch(prompts(1, 8), generation_config=warm, continuous_batching_config=cb)
    start = time.perf_counter()
    results = model.generate_batch(prompts(streams, prompt), generation_config=config, continuous_batching_config=cb)
    elapsed = time.perf_counter() - start
    tokens = sum(len(r.generated_tokens) for r in results.values())
    return summary(tokens, elapsed, [], [elapsed / output] * streams, [])


def run_triton(preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    """The same streams through a real tritonserver, all multiplexed on one gRPC stream (as a load
    generator drives Triton: one channel, one receiving thread), so that on a machine where client and
    server share the cores the client takes as little of them as it can."""
    from nlgsim.replay import replay
    from nlgsim.workload import Request
    from triton_backend.launch import TritonServer

    env = {"NLG_PRESET": preset, "NLG_MAX_NUM_SEQS": str(max(streams, 8))}
    with TritonServer(env=env) as server:  # started on the server's cores (see main), which it keeps
        assert server.process is not None
        [stub] = process_cpu.children(server.process.pid)
        pids = {"tritonserver": server.process.pid, "stub": stub, "client": os.getpid()}
        if (cores := split_cores()) is not None:
            os.sched_setaffinity(0, cores[1])
        replay(server.grpc_url, [Request(0, 0.0, 8, (2,))])  # warm-up
        before = {part: process_cpu.snapshot(pid) for part, pid in pids.items()}
        start = time.perf_counter()
        streamed = [Request(i, 0.0, prompt, (output,)) for i in range(streams)]
        measured = replay(server.grpc_url, streamed, temperature=0.0)
        elapsed = time.perf_counter() - start
        after = {part: process_cpu.snapshot(pid) for part, pid in pids.items()}
    tokens = sum(sum(m.tokens) for m in measured)
    result = summary(tokens, elapsed, [m.ttft for m in measured], [m.per_token for m in measured], [])
    return {**result, "cpu_seconds": served_split(before, after)}


def served_split(before: dict[str, process_cpu.Snapshot], after: dict[str, process_cpu.Snapshot]) -> dict[str, float]:
    """A served run's CPU seconds by part: the server, the stub's threads by role, the load generator."""
    stub = process_cpu.split(before["stub"], after["stub"])
    engine, responses = stub.pop("nlg-engine", 0.0), stub.pop("nlg-responses", 0.0)
    return {
        "engine process": engine,
        "response sender": responses,
        "stub's other threads": sum(stub.values()),
        "tritonserver": after["tritonserver"].total - before["tritonserver"].total,
        "client": after["client"].total - before["client"].total,
    }


def split_cores() -> tuple[set[int], set[int]] | None:
    """Where the machine has four cores or more, the load generator's core and the others (the server's,
    and the in-process engine's in its pair), as the GPU runs split them; None on fewer, where the
    engine needs every core and the load generator's cost is only stated apart."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 4:
        return None
    return set(cores[:-1]), {cores[-1]}


def summary(tokens: int, elapsed: float, ttft: list[float], tpot: list[float], itl: list[float]) -> dict[str, Any]:
    return {
        "tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
        "ttft": quantiles(ttft),
        "tpot": quantiles(tpot),
        "itl": quantiles(itl),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_own_addmm(preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    """Our engine with transformers' own projections (MKL's addmm): the path oneDNN packing replaced."""
    return run_own(preset, streams, prompt, output, pack_cpu=False)


def run_own_sampled(preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    """Our engine with every stream sampling (temperature 1, top_p 0.9) instead of greedy."""
    return run_own(preset, streams, prompt, output, sampling=SAMPLED)


WORKERS = {
    "own": run_own,
    "own-addmm": run_own_addmm,
    "own-sampled": run_own_sampled,
    "hf-sequential": run_hf_sequential,
    "hf-continuous": run_hf_continuous,
    "triton": run_triton,
}


def run_worker(worker: str, preset: str, streams: int, prompt: int, output: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.engine_throughput", "--worker", worker, "--preset", preset,
               "--streams", str(streams), "--prompt", str(prompt), "--output", str(output)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=harness.REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{worker} x{streams} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{worker:14s} streams={streams:3d} {result['tokens_per_s']:8.1f} tok/s", flush=True)
    return result


def machine() -> str:
    """The CPU and what torch runs on it."""
    return (
        f"{harness.cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.1f}"


#: The rows that are transformers' own: the report names the transformers version beside them.
BASELINES = ("hf-sequential", "hf-continuous")
#: The parts of a served run's CPU time, in the order the report lists them, with what each holds.
PARTS = {
    "engine process": "the engine thread and the OpenMP workers it starts: forward pass, sampling, "
    "detokenizing (in process: the whole process)",
    "response sender": "the stub's response thread: merging outputs, response tensors, sends, metrics",
    "stub's other threads": "the stub's IPC with the server, its watchdogs, threads that ended",
    "tritonserver": "gRPC, Triton's core, the Python backend's side of the IPC",
    "client": "the load generator (tritonclient gRPC streaming, its callbacks)",
}


def render(results: dict[str, Any]) -> str:
    setup, rows, versions = results["setup"], results["rows"], results["versions"]
    lines = [
        f"# Engine throughput, {setup['preset']} preset (random weights, seed 0), CPU fp32",
        "",
        f"Machine: {results['machine']}. Measured {results['date']} at `{results['code']}` with "
        f"`python -m benchmarks.engine_throughput` (1-minute load average {results['load_before']:.2f} when it "
        f"started); {setup['prompt']} prompt and {setup['output']} output tokens per stream (ignore_eos), "
        f"all streams arriving at once. The baselines are transformers {versions['transformers']}'s; a change "
        "of its version changes what the ratios to them mean.",
        "",
        "| path | streams | tokens/s | TTFT p50 / p99 ms | per-token p50 / p99 ms | ITL p50 / p99 ms | peak RSS MiB "
        "| load average at start / end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for worker, streams, r in rows:
        name = f"{worker} (transformers {versions['transformers']})" if worker in BASELINES else worker
        lines.append(
            f"| {name} | {streams} | {r['tokens_per_s']:.1f} | {ms(r['ttft']['p50'])} / {ms(r['ttft']['p99'])} | "
            f"{ms(r['tpot']['p50'])} / {ms(r['tpot']['p99'])} | {ms(r['itl']['p50'])} / {ms(r['itl']['p99'])} | "
            f"{r['peak_rss_mib']:.0f} | {r['load'][0]:.2f} / {r['load'][1]:.2f} |"
        )
    lines += ["", *ratios(setup["compare_at"], rows, results["pairs"], versions["transformers"])]
    lines += cpu_split(setup["compare_at"], results["pairs"], results["omp_wait_policy"])
    return "\n".join(lines) + "\n"


def ratios(at: int, rows: list[list[Any]], pairs: list[dict[str, Any]], hf: str) -> list[str]:
    """The comparisons the engine's goals are stated in, as ratios of rows of this one run."""
    rate = {(worker, streams): r["tokens_per_s"] for worker, streams, r in rows}
    own = rate.get(("own", at))
    lines = ["Ratios (tokens/s, this run):", ""]
    if own is None:
        return []
    for label, other, goal in (
        (f"ours at {at} streams / transformers {hf} `generate` one request at a time",
         rate.get(("hf-sequential", 1)), "goal >= 8x"),
        (f"ours at {at} streams / ours with MKL addmm projections", rate.get(("own-addmm", at)), "the path kept"),
        (f"ours at {at} streams, greedy / the same sampling (temperature 1, top_p 0.9)",
         rate.get(("own-sampled", at)), "what sampling costs"),
        (f"ours at {at} streams / transformers {hf} continuous batching", rate.get(("hf-continuous", at)),
         "goal >= 2.5x"),
    ):  # fmt: skip
        if other:
            lines.append(f"- {label}: **{own / other:.2f}x**" + (f" ({goal})" if goal else ""))
    if pairs:
        each = [p["triton"]["tokens_per_s"] / p["in_process"]["tokens_per_s"] for p in pairs]
        loads = ", ".join(f"{p['in_process']['load'][0]:.2f}" for p in pairs)
        lines.append(
            f"- through tritonserver (gRPC streaming) / in-process at {at} streams: **{statistics.median(each):.0%}**"
            f", the median of {len(each)} pairs, each in-process run right before its Triton run "
            f"({', '.join(f'{r:.0%}' for r in each)}; load average {loads} as each pair started; the table's "
            "triton row is the first pair's) (goal >= 90%)"
        )
    return lines


def wait_policy(policy: str) -> str:
    """How the OpenMP workers of each engine waited for work in a run with OMP_WAIT_POLICY=`policy`
    ("" for unset) in the benchmark's environment, which the server inherits."""
    if policy:
        return f"Every engine ran with OMP_WAIT_POLICY={policy}."
    return (
        "OMP_WAIT_POLICY was unset: in process OpenMP's workers spin for a while when they wait for work "
        "(libgomp's default), served they sleep (model.py sets PASSIVE unless the server's environment "
        "sets a policy)."
    )


def cpu_split(at: int, pairs: list[dict[str, Any]], policy: str) -> list[str]:
    """Where the CPU time of a served run goes, against the same load in process: CPU seconds per 1,000
    generated tokens of each part, the median over the pairs."""
    if not pairs:
        return []

    def per_thousand(run: dict[str, Any], part: str) -> float:
        return float(run["cpu_seconds"].get(part, 0.0) / run["tokens"] * 1000)

    def median(side: str, part: str) -> float:
        return statistics.median(per_thousand(p[side], part) for p in pairs)

    lines = [
        "",
        f"## Where the CPU time goes, {at} streams",
        "",
        "CPU seconds (user + system, from /proc/<pid>/stat and its threads' stat, no profiler) per 1,000 "
        f"generated tokens, the median over the {len(pairs)} pairs; the model names its threads in the kernel "
        "(`triton_backend/thread_names.py`), and threads OpenMP starts from the engine's carry its name. "
        f"{wait_policy(policy)} Time an OpenMP worker spends spinning counts here, so on a loaded machine the "
        "two engine rows differ by more than serving's own work.",
        "",
        "| part | what it holds | in process | through Triton |",
        "|---|---|---|---|",
    ]
    for part, holds in PARTS.items():
        inproc = f"{median('in_process', part):.2f}" if part == "engine process" else "-"
        lines.append(f"| {part} | {holds} | {inproc} | {median('triton', part):.2f} |")
    totals = [
        statistics.median(sum(per_thousand(p[side], part) for part in PARTS) for p in pairs)
        for side in ("in_process", "triton")
    ]
    serving = statistics.median(
        sum(per_thousand(p["triton"], part) for part in PARTS if part not in ("engine process", "client"))
        for p in pairs
    )
    lines += [
        f"| all | | {totals[0]:.2f} | {totals[1]:.2f} |",
        "",
        f"Serving's own work (the stub's response and other threads, tritonserver) is {serving:.2f} CPU-s per "
        f"1,000 tokens; the load generator's, stated apart, {median('triton', 'client'):.2f}.",
    ]
    return lines


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every path, each configuration in a child process of its own."""
    load_before = os.getloadavg()[0]  # what else the machine was doing, for the report
    rows: list[list[Any]] = [
        ["hf-sequential", 1, run_worker("hf-sequential", args.preset, args.baseline_requests, args.prompt, args.output)]
    ]
    rows += [["own", n, run_worker("own", args.preset, n, args.prompt, args.output)] for n in args.streams]
    for worker in ("own-addmm", "own-sampled", "hf-continuous"):
        rows.append(
            [worker, args.compare_at, run_worker(worker, args.preset, args.compare_at, args.prompt, args.output)]
        )
    # The serving path's share is a ratio of two noisy figures on shared cores: measure it as pairs,
    # each in-process run right before its Triton run, and report the median.
    pairs = []
    for i in range(args.pairs):
        inproc = run_worker("own", args.preset, args.compare_at, args.prompt, args.output)
        served = run_worker("triton", args.preset, args.compare_at, args.prompt, args.output)
        if i == 0:
            rows.append(["triton", args.compare_at, served])
        pairs.append({"in_process": inproc, "triton": served})
    return {
        "machine": machine(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},  # fmt: skip
        "date": str(date.today()),
        "code": harness.revision(),
        "load_before": load_before,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "setup": {key: getattr(args, key) for key in ("preset", "prompt", "output", "compare_at")},
        "rows": rows,
        "pairs": pairs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=WORKERS)
    parser.add_argument("--preset", default="gpt2")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--baseline-requests", type=int, default=2, help="requests for hf-sequential")
    parser.add_argument("--compare-at", type=int, default=16, help="streams for hf-continuous and triton")
    parser.add_argument("--pairs", type=int, default=3, help="in-process / Triton pairs for the serving ratio")
    harness.output_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        # Every worker, ours and transformers', runs with the host memory setting the served model uses.
        keep_freed_memory()
        if (cores := split_cores()) is not None:  # every engine, in process or served, on the same cores
            os.sched_setaffinity(0, cores[0])
            torch.set_num_threads(len(cores[0]))
        load = os.getloadavg()[0]
        result = WORKERS[args.worker](args.preset, args.streams[0], args.prompt, args.output)
        print(json.dumps({**result, "load": [load, os.getloadavg()[0]]}))
        return 0
    harness.publish(render(harness.results(args, measure)), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
