"""An idle engine gives back the memory its busiest step kept: the loop calls its idle hook once per
quiet spell after work, and the hook returns the heap's free pages to the kernel."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from engine_testkit import make_engine, tiny_model

from triton_backend.engine_loop import EngineLoop
from triton_backend.outputs import RequestOutput
from triton_backend.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)


class Recorder:
    def __init__(self) -> None:
        self.finished = threading.Event()
        self.idle_calls: list[str] = []
        self.idle = threading.Event()

    def sink(self, output: RequestOutput) -> None:
        if output.finished:
            self.finished.set()

    def on_idle(self) -> None:
        self.idle_calls.append(threading.current_thread().name)
        self.idle.set()


def test_the_idle_hook_runs_once_after_work_on_the_engine_thread_and_not_before_any():
    recorder = Recorder()
    engine = make_engine(tiny_model(), max_num_seqs=2)
    loop = EngineLoop(engine, recorder.sink, on_idle=recorder.on_idle, idle_seconds=0.05)
    loop.start()
    try:
        assert not recorder.idle.wait(0.3), "idle before any work"
        loop.add("a", [1, 2, 3], PARAMS, arrival=0.0)
        assert recorder.finished.wait(30)
        assert recorder.idle.wait(30)
        recorder.idle.clear()
        assert not recorder.idle.wait(0.3), "idle again without new work"
        assert recorder.idle_calls == ["nlg-engine"]
        recorder.finished.clear()
        loop.add("b", [4, 5], PARAMS, arrival=0.0)
        assert recorder.finished.wait(30)
        assert recorder.idle.wait(30)
        assert recorder.idle_calls == ["nlg-engine", "nlg-engine"]
    finally:
        loop.stop(timeout=30)


def test_a_failing_idle_hook_leaves_the_engine_serving():
    recorder = Recorder()

    def broken() -> None:
        recorder.on_idle()
        raise RuntimeError("hook failed")

    loop = EngineLoop(make_engine(tiny_model(), max_num_seqs=2), recorder.sink, on_idle=broken, idle_seconds=0.05)
    loop.start()
    try:
        loop.add("a", [1, 2, 3], PARAMS, arrival=0.0)
        assert recorder.idle.wait(30)
        recorder.finished.clear()
        loop.add("b", [4, 5], PARAMS, arrival=0.0)
        assert recorder.finished.wait(30)
    finally:
        loop.stop(timeout=30)


PROBE = """
import json, sys, threading
import torch
from triton_backend.host_memory import keep_freed_memory, release_freed_memory
def anon_mib():
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    return int(status["RssAnon"].split()[0]) / 1024
keep_freed_memory()
result = {}
def run():
    # A burst's temporaries: 4 MiB blocks, below the mmap threshold, so they live in the heap.
    blocks = [torch.ones(1 << 20) for _ in range(64)]
    del blocks
    result["kept"] = anon_mib()
    result["released"] = release_freed_memory() if sys.argv[1] == "release" else None
    result["after"] = anon_mib()
worker = threading.Thread(target=run)
worker.start()
worker.join()
print(json.dumps(result))
"""


def _probe(mode: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_release_gives_the_kept_heap_back_and_without_it_the_heap_stays():
    kept, released = _probe("keep"), _probe("release")
    assert kept["kept"] - kept["after"] < 16  # kept: the burst's 256 MiB stay resident
    assert released["released"] is True
    assert released["kept"] - released["after"] > 200
