"""The engine thread's published load: a request counts from the moment execute() hands it over."""

from __future__ import annotations

import threading

import pytest
from engine_testkit import make_engine, tiny_model

from triton_backend.engine_loop import EngineLoop
from triton_backend.outputs import RequestOutput
from triton_backend.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


class HeldSink:
    """Keeps the engine thread inside its first step's outputs until released, as a slow step would."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.first_step = threading.Event()
        self.finished: list[RequestOutput] = []
        self.all_finished = threading.Event()
        self.expected = 0

    def __call__(self, output: RequestOutput) -> None:
        self.first_step.set()
        self.release.wait(30)
        if output.finished:
            self.finished.append(output)
            if len(self.finished) == self.expected:
                self.all_finished.set()


@pytest.fixture
def held():
    sink = HeldSink()
    loop = EngineLoop(make_engine(tiny_model(), max_num_seqs=4), sink)
    loop.start()
    yield loop, sink
    sink.release.set()
    loop.stop(timeout=30)


def load(loop: EngineLoop) -> int:
    stats = loop.stats()
    return stats.running_requests + stats.waiting_requests


def test_requests_count_while_the_engine_is_busy_and_stop_counting_when_they_end(held):
    loop, sink = held
    sink.expected = 3
    loop.add("a", [1, 2, 3], PARAMS, arrival=0.0)
    assert load(loop) == 1  # before the engine thread has seen it
    assert sink.first_step.wait(30)
    # The engine is inside a step that took "a" in; two more arrive before its next snapshot.
    loop.add("b", [4, 5], PARAMS, arrival=0.0)
    loop.add("c", [6], PARAMS, arrival=0.0)
    assert load(loop) == 3
    sink.release.set()
    assert sink.all_finished.wait(60)
    loop.stop(timeout=30)
    assert loop.stats().running_requests == 0
    assert loop.stats().waiting_requests == 0


def test_a_refused_request_stops_counting_once_refused(held):
    loop, sink = held
    sink.expected = 2
    sink.release.set()
    loop.add("a", [1, 2], PARAMS, arrival=0.0)
    loop.add("a", [3, 4], PARAMS, arrival=0.0)  # the same id while "a" runs: refused with an error
    assert sink.all_finished.wait(60)
    assert [o.error for o in sink.finished] == ["request id 'a' is already in flight", None]
    loop.stop(timeout=30)
    assert load(loop) == 0
