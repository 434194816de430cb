r"""Soak: hold 64 streams on the served default for half an hour and watch the memory of every process.

    nohup nice -n 10 .venv/bin/python -m benchmarks.soak --json benchmarks/results/soak.json \
        --png benchmarks/results/soak.png --report benchmarks/soak.md > /tmp/soak.log 2>&1 &
    .venv/bin/python -m benchmarks.soak --render benchmarks/results/soak.json   # the report again

A tritonserver on `model_repository/` as `nlg-triton` runs it (the config's preset unless `--preset`
names one; CPU here) gets a closed loop of `--streams` gRPC streams: each finished request is
replaced at once by the next, so that many are always in flight. Requests vary (prompt and output
lengths, a stop string on some) so the allocator sees the shapes of real traffic. Every
`--interval` seconds the resident memory (VmRSS) of the server and of each Python-backend stub
under it is read from /proc, with the tokens served so far and the model's KV cache usage. After
`--duration` seconds the loop stops topping up; the streams in flight finish and the server sits
idle for `--idle` seconds, still sampled, to show whether memory comes back.

The verdict is computed from the samples: a process has plateaued when its RSS grew by less than
`PLATEAU_FRACTION` of itself (at least `PLATEAU_FLOOR_MB`) over the second half of the load.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import harness

#: A process has plateaued when its RSS grew over the second half of the load by less than this
#: fraction of itself or `PLATEAU_FLOOR_MB`, whichever is more (the floor keeps a 50 MB server's
#: few MB of noise from reading as growth; the fraction, a 6 GB stub's 60 MB).
PLATEAU_FRACTION = 0.01
PLATEAU_FLOOR_MB = 8.0
#: Samples averaged (median) at each end of the second half, so one noisy reading does not decide.
EDGE_SAMPLES = 3
#: Fewest load samples in the second half for a verdict at all.
MIN_HALF_SAMPLES = 6
DURATION_LIMITS = (60.0, 4 * 3600.0)
STUB = "triton_python_backend_stub"
SERVER = "tritonserver"


# --- reading /proc -------------------------------------------------------------------------------


def _status(pid: int, proc: Path) -> dict[str, str]:
    try:
        text = (proc / str(pid) / "status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    fields = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in fields}


def rss_kb(pid: int, proc: Path = Path("/proc")) -> int | None:
    """VmRSS of `pid` in kB; None when the process is gone (or a kernel thread, which has none)."""
    value = _status(pid, proc).get("VmRSS")
    return int(value.split()[0]) if value else None


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process below `root`, at any depth, in pid order."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            parent = _status(int(entry.name), proc).get("PPid")
            if parent is not None:
                children.setdefault(int(parent), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return sorted(found)


def stub_pids(server: int, proc: Path = Path("/proc")) -> list[int]:
    """The Python-backend stubs started by the server (one per model instance)."""
    stubs = []
    for pid in descendants(server, proc):
        try:
            argv0 = (proc / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if Path(argv0.decode(errors="replace")).name == STUB:
            stubs.append(pid)
    return stubs


# VmRSS's parts: the heap and other private memory; mapped files (libraries, weights read from disk);
# shared memory (the Python backend's pool that carries requests and responses to the server).
RSS_PARTS = {"anon": "RssAnon", "file": "RssFile", "shmem": "RssShmem"}


def heap_kb(pid: int, proc: Path = Path("/proc")) -> dict[str, int] | None:
    """The `[heap]` mapping's size and resident part in kB: the memory glibc's main arena has claimed
    from the kernel, and how much of it has been touched. With MALLOC_ARENA_MAX=1 every allocation
    below the mmap threshold lives there. None when the process is gone or has no heap."""
    try:
        text = (proc / str(pid) / "smaps").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    found: dict[str, int] = {}
    in_heap = False
    for line in text.splitlines():
        if "-" in line.split(" ", 1)[0] and not line.split(" ", 1)[0].endswith(":"):
            in_heap = line.rstrip().endswith("[heap]")
        elif in_heap and line.startswith(("Size:", "Rss:")):
            found["size" if line.startswith("Size:") else "rss"] = int(line.split()[1])
    return found if len(found) == 2 else None


def named_processes(server: int, proc: Path = Path("/proc")) -> list[tuple[str, int]]:
    """The server, and each of its stubs as `stub <pid>`."""
    return [(SERVER, server), *((f"stub {pid}", pid) for pid in stub_pids(server, proc))]


T = TypeVar("T")


def by_process(server: int, read: Callable[[int, Path], T | None], proc: Path = Path("/proc")) -> dict[str, T]:
    """`read(pid, proc)` of each process (`named_processes`); where it gives None (a process gone, or
    without what is read) the process is left out."""
    values = ((name, read(pid, proc)) for name, pid in named_processes(server, proc))
    return {name: value for name, value in values if value is not None}


def memory_sample(server: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """RSS in kB by process."""
    return by_process(server, rss_kb, proc)


def _rss_split(pid: int, proc: Path) -> dict[str, int] | None:
    status = _status(pid, proc)
    if not all(field in status for field in RSS_PARTS.values()):
        return None
    return {part: int(status[field].split()[0]) for part, field in RSS_PARTS.items()}


def rss_parts(server: int, proc: Path = Path("/proc")) -> dict[str, dict[str, int]]:
    """Each process's RSS split as RSS_PARTS says, in kB (where the kernel reports the split)."""
    return by_process(server, _rss_split, proc)


def heap_sample(server: int, proc: Path = Path("/proc")) -> dict[str, dict[str, int]]:
    """`heap_kb` of each process that has a heap."""
    return by_process(server, heap_kb, proc)


# --- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    process: str
    start_mb: float  # first load sample
    half_mb: float  # start of the second half of the load
    end_mb: float  # end of the load
    peak_mb: float
    idle_mb: float | None  # last idle sample, if any
    growth_mb: float  # over the second half
    bound_mb: float  # growth below this is a plateau
    slope_mb_per_hour: float  # least-squares, over the second half
    plateau: bool | None  # None: too few samples to tell

    @property
    def label(self) -> str:
        if self.plateau is None:
            return "too short to tell"
        return "plateau" if self.plateau else "still growing"


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x; 0 for fewer than two distinct x."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in points) / sxx


def rss_mb(process: str) -> Callable[[dict[str, Any]], float | None]:
    def read(sample: dict[str, Any]) -> float | None:
        kb = sample["rss_kb"].get(process)
        return None if kb is None else kb / 1024

    return read


def heap_mb(process: str, part: str = "size") -> Callable[[dict[str, Any]], float | None]:
    """The claimed (`size`) or touched (`rss`) part of a process's heap; None in results without it."""

    def read(sample: dict[str, Any]) -> float | None:
        heap = sample.get("heap_kb", {}).get(process)
        return None if heap is None else heap[part] / 1024

    return read


def verdict(
    samples: list[dict[str, Any]],
    process: str,
    fraction: float = PLATEAU_FRACTION,
    floor_mb: float = PLATEAU_FLOOR_MB,
    read: Callable[[dict[str, Any]], float | None] | None = None,
) -> Verdict:
    """`samples`: the results' samples (t in s, phase, rss_kb by process); `read` takes the value
    judged from a sample (default: the process's RSS). The load's second half runs from half its
    duration to its last sample; growth is the median of its last `EDGE_SAMPLES` readings less the
    median of its first."""
    read = read or rss_mb(process)
    values = [(s, read(s)) for s in samples]
    load = [(s["t"], mb) for s, mb in values if s["phase"] == "load" and mb is not None]
    idle = [mb for s, mb in values if s["phase"] == "idle" and mb is not None]
    if not load:
        raise ValueError(f"no load samples of {process!r}")
    start, end = load[0][0], load[-1][0]
    second = [(t, mb) for t, mb in load if t >= start + (end - start) / 2]
    half_mb = _median([mb for _, mb in second[:EDGE_SAMPLES]])
    end_mb = _median([mb for _, mb in second[-EDGE_SAMPLES:]])
    growth = end_mb - half_mb
    bound = max(fraction * half_mb, floor_mb)
    return Verdict(
        process=process,
        start_mb=load[0][1],
        half_mb=half_mb,
        end_mb=end_mb,
        peak_mb=max(mb for _, mb in load),
        idle_mb=idle[-1] if idle else None,
        growth_mb=growth,
        bound_mb=bound,
        slope_mb_per_hour=slope(second) * 3600,
        plateau=None if len(second) < MIN_HALF_SAMPLES else growth < bound,
    )


def processes(samples: list[dict[str, Any]]) -> list[str]:
    """Every process seen, the server first, then stubs in order of appearance."""
    names: list[str] = []
    for sample in samples:
        names += [name for name in sample["rss_kb"] if name not in names]
    return sorted(names, key=lambda name: name != SERVER)


def token_rates(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(mid-point time, tokens per second) between consecutive samples."""
    return [
        ((a["t"] + b["t"]) / 2, (b["tokens"] - a["tokens"]) / (b["t"] - a["t"]))
        for a, b in zip(samples, samples[1:], strict=False)
        if b["t"] > a["t"]
    ]


# --- the load ------------------------------------------------------------------------------------


def request_shape(rng: random.Random, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    from triton_backend.cli.requests import prompt_of

    sampling: dict[str, Any] = {
        "max_tokens": rng.randint(*args.output),
        "ignore_eos": True,
        "temperature": 1.0,
        "top_p": 0.9,
    }
    if rng.random() < 0.25:
        sampling["stop"] = ["\n\n"]  # exercises the detokenizer's hold-back
    return prompt_of(rng.randint(*args.prompt), rng), sampling


class ClosedLoop:
    """`streams` requests in flight over one gRPC stream; `top_up` replaces the finished ones."""

    def __init__(self, url: str, streams: int, args: argparse.Namespace) -> None:
        import tritonclient.grpc as grpcclient

        self._client = grpcclient.InferenceServerClient(url)
        self._events: queue.Queue[tuple[bool, int, str | None]] = queue.Queue()
        self._client.start_stream(callback=self._on_response)
        self._rng = random.Random(args.seed)
        self._args = args
        self.streams = streams
        self.in_flight = 0
        self.sent = 0
        self.finished = 0
        self.tokens = 0
        self.errors = 0
        self.first_error: str | None = None

    def _on_response(self, result: Any, error: Any) -> None:
        if error is not None:
            self._events.put((True, 0, str(error)))
            return
        counts = result.as_numpy("num_output_tokens")
        final = result.get_response().parameters.get("triton_final_response")
        self._events.put((final is not None and final.bool_param, 0 if counts is None else int(counts.sum()), None))

    def _send(self) -> None:
        from triton_backend.cli.requests import generate_inputs

        prompt, sampling = request_shape(self._rng, self._args)
        inputs = generate_inputs(prompt, sampling, return_num_output_tokens=True)
        self._client.async_stream_infer(
            "gpt2", inputs, request_id=f"soak-{self.sent}", enable_empty_final_response=True
        )
        self.sent += 1
        self.in_flight += 1

    def top_up(self) -> None:
        while self.in_flight < self.streams:
            self._send()

    def receive(self, until: float) -> None:
        """Take responses until the monotonic time `until`."""
        while (left := until - time.monotonic()) > 0:
            try:
                final, tokens, error = self._events.get(timeout=left)
            except queue.Empty:
                return
            self.tokens += tokens
            if error is not None:  # a stream error names no request: count it as that request's end
                self.errors += 1
                self.first_error = self.first_error or error
            if final or error is not None:
                self.in_flight -= 1
                self.finished += 1

    def close(self) -> None:
        self._client.stop_stream(cancel_requests=True)
        self._client.close()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from triton_backend.launch import TritonServer
    from triton_backend.presets import preset_config

    env = {"NLG_PRESET": args.preset} if args.preset else {}
    samples: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]  # what else the machine was doing, for the report
    with TritonServer(env=env, ready_timeout=900, log_path=args.server_log) as server:
        assert server.process is not None
        loop = ClosedLoop(server.grpc_url, args.streams, args)
        start = time.monotonic()
        load_end, phase = start + args.duration, "load"
        idle_end: float | None = None
        try:
            while True:
                now = time.monotonic()
                if phase == "load" and now >= load_end:
                    phase = "drain"
                if phase == "drain" and loop.in_flight == 0:
                    phase, idle_end = "idle", now + args.idle
                if phase == "idle" and idle_end is not None and now >= idle_end:
                    break
                if server.process.poll() is not None:
                    raise RuntimeError(f"tritonserver exited with {server.process.returncode}")
                if phase == "load":
                    loop.top_up()
                samples.append(
                    {
                        "t": round(now - start, 2),
                        "phase": phase,
                        "rss_kb": memory_sample(server.process.pid),
                        "rss_parts_kb": rss_parts(server.process.pid),
                        "heap_kb": heap_sample(server.process.pid),
                        "tokens": loop.tokens,
                        "requests": loop.finished,
                        "kv_usage": kv_usage(server.metrics_url),
                    }
                )
                last = samples[-1]
                print(f"{last['t']:7.0f}s {phase:5} {last['tokens']:8d} tokens  "
                      + "  ".join(f"{k} {v / 1024:.0f} MB" for k, v in last["rss_kb"].items()), flush=True)  # fmt: skip
                tick = start + len(samples) * args.interval
                while time.monotonic() < tick:
                    loop.receive(min(tick, time.monotonic() + 0.5))
                    if phase == "load":
                        loop.top_up()
                if phase == "drain" and time.monotonic() > load_end + args.drain_timeout:
                    raise TimeoutError(
                        f"{loop.in_flight} requests unfinished {args.drain_timeout:.0f} s after the load"
                    )
        finally:
            loop.close()
    config = preset_config(args.preset or config_parameter("preset"))
    kv_page = 2 * config.n_layer * 16 * config.n_embd * 4  # float32 on CPU, 16-token pages
    return {
        "machine": harness.machine(),
        "date": str(date.today()),
        "code": harness.revision(),
        "setup": {
            "preset": args.preset or config_parameter("preset"),
            "streams": args.streams,
            "duration_s": args.duration,
            "idle_s": args.idle,
            "interval_s": args.interval,
            "prompt_tokens": list(args.prompt),
            "output_tokens": list(args.output),
            "nice": os.nice(0),
            "loadavg_before": round(load_before, 2),
            "malloc_arena_max": server_env("MALLOC_ARENA_MAX"),
        },
        "kv_bytes_per_page": kv_page,
        # The default budget: room for max_num_seqs full-context sequences.
        "kv_pages": int(config_parameter("max_num_seqs")) * -(-config.n_positions // 16),
        "requests_sent": loop.sent,
        "requests_finished": loop.finished,
        "errors": loop.errors,
        "first_error": loop.first_error,
        "samples": samples,
    }


def config_parameter(key: str) -> str:
    """A parameter of the served model's config.pbtxt, as the server reads it without overrides."""
    text = (harness.REPO / "model_repository" / "gpt2" / "config.pbtxt").read_text()
    marker = f'key: "{key}" value: {{ string_value: "'
    return text.split(marker, 1)[1].split('"', 1)[0]


def server_env(name: str) -> str | None:
    from triton_backend.launch import server_environment

    return server_environment().get(name)


def kv_usage(metrics_url: str) -> float | None:
    import urllib.request

    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("nlg_kv_cache_usage_ratio")
    ]
    return sum(values) if values else None


# --- the report ----------------------------------------------------------------------------------


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} minutes"


def machine_load(setup: dict[str, Any]) -> str:
    if "loadavg_before" not in setup:
        return f"shared with other work, the soak ran at nice {setup['nice']}"
    return (
        f"the soak ran at nice {setup['nice']}; the machine's 1-minute load average just before it was "
        f"{setup['loadavg_before']:.2f}"
    )


def render(results: dict[str, Any], figure: str = "results/soak.png") -> str:
    setup, m, samples = results["setup"], results["machine"], results["samples"]
    load = [s for s in samples if s["phase"] == "load"]
    served = load[-1]["tokens"] - load[0]["tokens"]
    span = load[-1]["t"] - load[0]["t"]
    drained = next((s["t"] for s in samples if s["phase"] == "idle"), samples[-1]["t"]) - load[-1]["t"]
    verdicts = [verdict(samples, name) for name in processes(samples)]
    kv = [s["kv_usage"] for s in samples if s["kv_usage"] is not None]
    kv_mb = results["kv_bytes_per_page"] * results["kv_pages"] / (1 << 20)
    lines = [
        "# Soak: memory under a steady 64-stream load",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB memory, Python {m['python']}, no GPU; "
        f"{machine_load(setup)}. Measured {results['date']} on "
        f"{results['code']} with `benchmarks/soak.py` (this report is rendered from `benchmarks/results/soak.json`).",
        "",
        f"Load: tritonserver on `model_repository/` (preset `{setup['preset']}`, CPU, "
        f"MALLOC_ARENA_MAX={setup['malloc_arena_max']}), {setup['streams']} gRPC streams in a closed loop for "
        f"{minutes(setup['duration_s'])}; then the streams in flight finished ({minutes(drained)}) and the server "
        f"sat idle for {minutes(setup['idle_s'])}. Prompts of {setup['prompt_tokens'][0]}-{setup['prompt_tokens'][1]} "
        f"tokens, {setup['output_tokens'][0]}-{setup['output_tokens'][1]} output tokens (ignore_eos), temperature 1, "
        f"top_p 0.9, a stop string on a quarter of them. RSS (VmRSS) sampled every {setup['interval_s']:.0f} s.",
        "",
        f"Served: {served} tokens in {span / 60:.1f} minutes of load ({served / span:.1f} tokens/s), "
        f"{samples[-1]['tokens']} with the drain; {results['requests_finished']} of {results['requests_sent']} "
        f"requests finished, {results['errors']} errors"
        + (f" (first: `{results['first_error']}`)" if results["first_error"] else "")
        + ".",
        "",
        f"Verdict: a process has plateaued when its RSS grew over the second half of the load (median of "
        f"{EDGE_SAMPLES} samples at each end of it) by less than {PLATEAU_FRACTION:.0%} of itself or "
        f"{PLATEAU_FLOOR_MB:.0f} MB, whichever is more.",
        "",
        "| process | start MB | half-way MB | end of load MB | peak MB | after idle MB | "
        "growth, 2nd half | bound | slope, 2nd half | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        idle = "-" if v.idle_mb is None else f"{v.idle_mb:.0f}"
        lines.append(
            f"| {v.process} | {v.start_mb:.0f} | {v.half_mb:.0f} | {v.end_mb:.0f} | {v.peak_mb:.0f} | {idle} | "
            f"{v.growth_mb:+.1f} MB ({v.growth_mb / v.half_mb:+.1%}) | {v.bound_mb:.0f} MB | "
            f"{v.slope_mb_per_hour:+.0f} MB/h | "
            f"**{v.label}** |"
        )
    split = growth_by_part(samples)
    if split:
        lines += [
            "",
            "Where the growth over the second half of the load is (VmRSS's parts, same medians): `anon` is the "
            "heap and other private memory, `file` mapped files, `shmem` the Python backend's shared-memory "
            "pool that carries requests and responses.",
            "",
            "| process | " + " | ".join(f"{part} MB" for part in RSS_PARTS) + " |",
            "|---|" + "---|" * len(RSS_PARTS),
        ]
        for name, growth in split.items():
            lines.append(f"| {name} | " + " | ".join(f"{growth[part]:+.1f}" for part in RSS_PARTS) + " |")
    heaps = [verdict(samples, name, read=heap_mb(name)) for name in processes(samples) if has_heap(samples, name)]
    if heaps:
        lines += [
            "",
            "The heap glibc has claimed from the kernel (the `[heap]` mapping's size; with MALLOC_ARENA_MAX=1 "
            "every allocation below the 32 MiB mmap threshold lives there), judged as RSS is. RSS can grow "
            "without the heap growing: a page the allocator claimed at a peak becomes resident the first time "
            "a later step writes it. While the claimed heap is flat, RSS is bounded by it.",
            "",
            "| process | claimed at half-way MB | claimed at end of load MB | growth, 2nd half | "
            "touched at end of load MB | claimed after idle MB | touched after idle MB | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for v in heaps:
            touched = verdict(samples, v.process, read=heap_mb(v.process, "rss"))
            idle = "-" if v.idle_mb is None else f"{v.idle_mb:.0f}"
            idle_touched = "-" if touched.idle_mb is None else f"{touched.idle_mb:.0f}"
            lines.append(
                f"| {v.process} | {v.half_mb:.0f} | {v.end_mb:.0f} | {v.growth_mb:+.1f} MB | {touched.end_mb:.0f} | "
                f"{idle} | {idle_touched} | **{v.label}** |"
            )
    lines += [
        "",
        f"The stub's first sample already holds the KV cache: {results['kv_pages']} pages, room for max_num_seqs "
        f"full-context sequences, {kv_mb:.0f} MB, allocated and zero-filled when the model loads (so resident "
        "from the start, whatever the load)."
        + (f" At most {max(kv):.1%} of its pages were in use at once." if kv else ""),
        "",
        f"![RSS of each process and tokens/s over the run]({figure})",
    ]
    return "\n".join(lines) + "\n"


def has_heap(samples: list[dict[str, Any]], process: str) -> bool:
    return any(heap_mb(process)(s) is not None for s in samples if s["phase"] == "load")


def growth_by_part(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each process's growth in MB over the second half of the load, per part of its RSS, taken as the
    verdict takes the whole (medians of EDGE_SAMPLES at each end); empty for results without the split."""
    load = [s for s in samples if s["phase"] == "load"]
    if not load or not all(s.get("rss_parts_kb") for s in load):
        return {}
    start, end = load[0]["t"], load[-1]["t"]
    out = {}
    for name in processes(samples):
        second = [
            s["rss_parts_kb"][name] for s in load if s["t"] >= start + (end - start) / 2 and name in s["rss_parts_kb"]
        ]
        if len(second) < 2 * EDGE_SAMPLES:
            continue
        out[name] = {
            part: (
                _median([p[part] for p in second[-EDGE_SAMPLES:]]) - _median([p[part] for p in second[:EDGE_SAMPLES]])
            )
            / 1024
            for part in RSS_PARTS
        }
    return out


def phase_spans(samples: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Minutes from a phase's first sample to the next phase's first (or the last sample), after the load."""
    spans: dict[str, tuple[float, float]] = {}
    for phase, following in (("drain", "idle"), ("idle", None)):
        starts = [s["t"] for s in samples if s["phase"] == phase]
        if starts:
            ends = [s["t"] for s in samples if s["phase"] == following] or [samples[-1]["t"]]
            spans[phase] = (starts[0] / 60, ends[0] / 60)
    return spans


def plot(results: dict[str, Any], path: Path) -> None:
    """One panel per process, each on its own scale (a 50 MB server beside a 6 GB stub), and tokens/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = results["samples"]
    names = processes(samples)
    fig, axes = plt.subplots(
        len(names) + 1, 1, figsize=(10, 2.6 * len(names) + 2.2), sharex=True, height_ratios=[2] * len(names) + [1.3]
    )
    spans = phase_spans(samples)
    load_end = max(s["t"] for s in samples if s["phase"] == "load") / 60
    for axis, name in zip(axes, names, strict=False):
        points = [(s["t"] / 60, s["rss_kb"][name] / 1024) for s in samples if name in s["rss_kb"]]
        axis.plot(*zip(*points, strict=True), color="tab:blue", linewidth=1.6, label="RSS")
        if has_heap(samples, name):
            # What RSS would be with every page of the claimed heap touched: flat while the heap is.
            ceiling = [
                (s["t"] / 60, (s["rss_kb"][name] + s["heap_kb"][name]["size"] - s["heap_kb"][name]["rss"]) / 1024)
                for s in samples
                if name in s["rss_kb"] and name in s.get("heap_kb", {})
            ]
            axis.plot(*zip(*ceiling, strict=True), color="tab:orange", linewidth=1.2,
                      label="RSS with the whole claimed heap touched")  # fmt: skip
        v = verdict(samples, name)
        axis.axhline(
            v.half_mb + v.bound_mb, color="tab:red", linestyle=":", linewidth=1.2, label="half-way RSS + plateau bound"
        )
        axis.set_ylabel("RSS (MB)")
        axis.set_title(f"{name}: {v.label}", loc="left", fontsize=11)
        axis.legend(loc="lower right", fontsize=9)
    rates = token_rates(samples)
    tokens = axes[-1]
    tokens.plot([t / 60 for t, _ in rates], [r for _, r in rates], color="tab:green", linewidth=1.2)
    tokens.set_ylabel("tokens/s")
    tokens.set_xlabel("minutes since the load began")
    tokens.set_ylim(bottom=0)
    for axis in axes:
        axis.axvline(load_end / 2, color="0.5", linestyle="--", linewidth=0.8)
        for phase, (a, b) in spans.items():
            axis.axvspan(a, b, color="0.93" if phase == "drain" else "0.85", zorder=0)
        axis.grid(alpha=0.3)
    top = axes[0]
    for phase, (a, b) in spans.items():
        top.text((a + b) / 2, 1.02, phase, transform=top.get_xaxis_transform(), ha="center", fontsize=9)
    top.text(load_end / 2, 1.02, "second half of the load", transform=top.get_xaxis_transform(), fontsize=9)
    fig.suptitle(f"Soak: {results['setup']['streams']} streams, preset {results['setup']['preset']}", fontsize=13)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- command line --------------------------------------------------------------------------------


def bounded(low: float, high: float, what: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: must be a number of seconds, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what}: must be in [{low:.0f}, {high:.0f}] seconds, got {text}")
        return value

    return parse


def token_range(text: str) -> tuple[int, int]:
    parts = text.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or not 1 <= int(parts[0]) <= int(parts[1]) <= 512:
        raise argparse.ArgumentTypeError(f"must be LOW-HIGH with 1 <= LOW <= HIGH <= 512, got {text!r}")
    return int(parts[0]), int(parts[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=bounded(*DURATION_LIMITS, "--duration"), default=1800.0,
                        help="seconds of load (60 to 14400; default 1800)")  # fmt: skip
    parser.add_argument("--idle", type=bounded(0, 3600, "--idle"), default=180.0, help="idle seconds after the load")
    parser.add_argument("--interval", type=bounded(1, 60, "--interval"), default=10.0, help="seconds between samples")
    parser.add_argument("--drain-timeout", type=bounded(10, 3600, "--drain-timeout"), default=600.0)
    parser.add_argument("--streams", type=int, choices=range(1, 257), metavar="1..256", default=64)
    parser.add_argument("--prompt", type=token_range, default=(16, 128), help="prompt tokens, LOW-HIGH")
    parser.add_argument("--output", type=token_range, default=(32, 256), help="output tokens, LOW-HIGH")
    parser.add_argument("--preset", help="NLG_PRESET for the server (default: the model config's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-log", type=Path, help="keep tritonserver's log here")
    parser.add_argument("--png", type=Path, help="plot the results here")
    harness.output_arguments(parser)
    args = parser.parse_args(argv)
    results = harness.results(args, measure)
    if args.png:
        plot(results, args.png)
    harness.publish(render(results), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
