"""The engine thread's endings: a stop that drains, a stop that cancels, a drain that then refuses
new work, and a failed step. Each request gets exactly one final output in every case."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from engine_testkit import make_engine, tiny_model

from triton_backend.engine_loop import SHUTDOWN_MESSAGE, EngineLoop
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.sampling_params import SamplingParams

SHORT = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
LONG = SamplingParams(max_tokens=900, temperature=0.0, ignore_eos=True)


class Sink:
    """Every output by request, and an event per request for its first output and for its final one."""

    def __init__(self) -> None:
        self.outputs: dict[str, list[RequestOutput]] = defaultdict(list)
        self.started: dict[str, threading.Event] = defaultdict(threading.Event)
        self.ended: dict[str, threading.Event] = defaultdict(threading.Event)
        self._lock = threading.Lock()

    def __call__(self, output: RequestOutput) -> None:
        with self._lock:
            self.outputs[output.request_id].append(output)
            self.started[output.request_id].set()
            if output.finished:
                self.ended[output.request_id].set()

    def finals(self, request_id: str) -> list[RequestOutput]:
        return [o for o in self.outputs[request_id] if o.finished]


class FailingRunner:
    """The model runner, but its next ``failures`` steps raise, as a CUDA or oneDNN error would."""

    def __init__(self, runner: object, failures: int) -> None:
        self._runner = runner
        self.failures = failures

    def step(self, *args: object) -> object:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("device error")
        return self._runner.step(*args)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._runner, name)


@pytest.fixture
def started():
    sink = Sink()
    engine = make_engine(tiny_model(), max_num_seqs=4)
    loop = EngineLoop(engine, sink)
    loop.start()
    yield loop, sink, engine
    loop.stop(timeout=30)


def test_a_stop_with_a_drain_lets_the_streams_in_flight_finish(started):
    loop, sink, _ = started
    for rid in ("a", "b"):
        loop.add(rid, [1, 2, 3], SHORT, arrival=0.0)
    loop.stop(drain_seconds=60, timeout=30)
    for rid in ("a", "b"):
        [final] = sink.finals(rid)
        assert final.finish_reasons == (FinishReason.LENGTH,)
        assert sum(o.new_tokens[0] for o in sink.outputs[rid]) == SHORT.max_tokens
    assert loop.stats().running_requests == loop.stats().waiting_requests == 0


def test_a_stop_without_a_drain_cancels_each_stream_once(started):
    loop, sink, _ = started
    for rid in ("a", "b"):
        loop.add(rid, [1, 2, 3], LONG, arrival=0.0)
    assert sink.started["a"].wait(60) and sink.started["b"].wait(60)
    loop.stop(drain_seconds=0, timeout=30)
    for rid in ("a", "b"):
        [final] = sink.finals(rid)
        assert final.finish_reasons == (FinishReason.CANCELLED,)
        assert final.error == SHUTDOWN_MESSAGE  # the client learns why: the server is going away
        assert sum(o.new_tokens[0] for o in sink.outputs[rid]) < LONG.max_tokens


def test_a_stream_its_client_cancels_ends_without_the_shutdown_message(started):
    loop, sink, _ = started
    loop.add("a", [1, 2, 3], LONG, arrival=0.0)
    assert sink.started["a"].wait(60)
    loop.abort("a")
    assert sink.ended["a"].wait(60)
    [final] = sink.finals("a")
    assert final.finish_reasons == (FinishReason.CANCELLED,) and final.error is None


def test_after_a_drain_ends_what_arrives_is_cancelled_at_once(started):
    loop, sink, _ = started
    loop.add("early", [1, 2, 3], LONG, arrival=0.0)
    assert sink.started["early"].wait(60)
    loop.drain(0.0)
    assert sink.ended["early"].wait(60)
    loop.add("late", [4, 5], SHORT, arrival=0.0)
    assert sink.ended["late"].wait(60)
    assert [o.finish_reasons for o in sink.finals("early")] == [(FinishReason.CANCELLED,)]
    [late] = sink.finals("late")
    assert late.finish_reasons == (FinishReason.CANCELLED,)
    assert sum(o.new_tokens[0] for o in sink.outputs["late"]) < SHORT.max_tokens


def test_a_failed_step_ends_each_request_in_flight_with_an_error_and_the_engine_serves_on(started):
    loop, sink, engine = started
    engine.runner = FailingRunner(engine.runner, failures=1)
    loop.add("a", [1, 2, 3], SHORT, arrival=0.0)
    assert sink.ended["a"].wait(60)
    [failed] = sink.finals("a")
    assert failed.error == "internal error in the generation engine"  # no device detail reaches the client
    assert failed.finish_reasons == (FinishReason.ERROR,)
    loop.add("b", [1, 2, 3], SHORT, arrival=0.0)
    assert sink.ended["b"].wait(60)
    [served] = sink.finals("b")
    assert served.error is None
    assert served.finish_reasons == (FinishReason.LENGTH,)
    assert sum(o.new_tokens[0] for o in sink.outputs["b"]) == SHORT.max_tokens
