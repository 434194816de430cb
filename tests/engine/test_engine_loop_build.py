"""The Triton model's engine is built on the thread that steps it, and a build that fails says why."""

from __future__ import annotations

import threading

import pytest
from engine_testkit import make_engine, tiny_model

from triton_backend.engine import Engine
from triton_backend.engine_loop import EngineLoop
from triton_backend.outputs import RequestOutput
from triton_backend.sampling_params import SamplingParams


def test_the_engine_is_built_and_stepped_on_one_thread() -> None:
    built_on: list[int] = []
    stepped_on: list[int] = []
    done = threading.Event()

    def build() -> tuple[str, Engine]:
        built_on.append(threading.get_ident())
        return "what else the build made", make_engine(tiny_model(), max_num_seqs=2)

    def sink(output: RequestOutput) -> None:
        stepped_on.append(threading.get_ident())
        if output.finished:
            done.set()

    loop, built = EngineLoop.built_on_its_thread(build, lambda b: b[1], sink)
    try:
        assert built[0] == "what else the build made"
        loop.add("a", [1, 2, 3], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True), arrival=0.0)
        assert done.wait(60)
    finally:
        loop.stop(timeout=30)
    assert built_on != [threading.get_ident()]
    assert set(stepped_on) == set(built_on)


def test_a_failed_build_raises_in_the_caller() -> None:
    def build() -> Engine:
        raise ValueError("kv_cache_bytes: too small")

    with pytest.raises(ValueError, match="kv_cache_bytes: too small"):
        EngineLoop.built_on_its_thread(build, lambda engine: engine, lambda _: None)
