"""Runs the engine on its own thread, so Triton's execute() only hands work over and returns.

Commands come in through a queue; every output goes to `sink` on the engine thread, in order. The
sink must not block (the Triton model's sink puts into the response sender's queue).

:meth:`EngineLoop.stats` counts a request as waiting from the moment execute() hands it over, not
from the engine's next snapshot: a step can take longer than a scrape interval, and a scale-in that
read an accepted request as absent would retire the instance under it.

`EngineLoop.built_on_its_thread` builds the engine on the thread that will step it, as the Triton
model does, so that the process holds one team of torch's OpenMP workers and they behave as its
wait policy says. With libgomp every thread that runs a parallel operation keeps a team of its own,
and once a process holds more workers than cores all of them sleep between operations whatever the
policy: a model built on the stub's main thread and stepped on another fell into that by accident.
The Triton model (model_repository/gpt2/1/model.py) sets OMP_WAIT_POLICY=PASSIVE unless the server's
environment sets it: in-place scaling runs several instances, each a stub process, on a pod's cores,
and workers that spin waiting for their next operation (the in-process engine's, on its main thread)
starve the other instances' and every other process's; with ACTIVE a dedicated single-instance host
gets the in-process behaviour.

Once the engine has had nothing to do for `idle_seconds` after some work, the loop calls `on_idle`
once (the Triton model gives the heap's free pages back there): a pause shorter than that costs
nothing, and an instance left idle does not hold its busiest moment's memory.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from triton_backend.engine import Engine
from triton_backend.engine_stats import EngineStats
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.sampling_params import SamplingParams
from triton_backend.thread_names import name_this_thread

log = logging.getLogger(__name__)

Built = TypeVar("Built")
THREAD_NAME = "nlg-engine"

#: Quiet seconds after which `on_idle` runs.
IDLE_SECONDS = 30.0
#: The final response of a stream that a stop's (or an unload's) drain cut: the client can tell it
#: from a cancel of its own and retry elsewhere.
SHUTDOWN_MESSAGE = "request cancelled: the server is shutting down and its drain ended before this stream finished"


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Stop:
    drain_seconds: float


@dataclass(frozen=True)
class _Drain:
    seconds: float


class EngineLoop:
    def __init__(
        self,
        engine: Engine,
        sink: Callable[[RequestOutput], None],
        clock: Callable[[], float] = time.monotonic,
        on_idle: Callable[[], object] | None = None,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._engine = engine
        self._sink = sink
        self._clock = clock
        self._on_idle = on_idle
        self._idle_seconds = idle_seconds
        self._worked = False  # a step ran since on_idle last did
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stats = engine.stats()
        # Adds handed over but not yet in a snapshot: the execute thread counts up, the engine
        # thread counts down once a snapshot includes them.
        self._handed_over = 0
        self._handed_over_lock = threading.Lock()
        self._thread = threading.Thread(target=self._named_run, name=THREAD_NAME, daemon=True)

    @classmethod
    def built_on_its_thread(
        cls,
        build: Callable[[], Built],
        engine_of: Callable[[Built], Engine],
        sink: Callable[[RequestOutput], None],
        on_idle: Callable[[], object] | None = None,
    ) -> tuple[EngineLoop, Built]:
        """Runs `build` on a new thread and, once it returns, the loop over `engine_of` its result on the
        same thread; returns the running loop and what `build` returned. What `build` raises is raised
        here, and the thread ends."""
        handover: queue.SimpleQueue[tuple[EngineLoop, Built] | BaseException] = queue.SimpleQueue()

        def run() -> None:
            name_this_thread(THREAD_NAME)  # first: the OpenMP workers the build starts take the name
            try:
                built = build()
                loop = cls(engine_of(built), sink, on_idle=on_idle)
            except BaseException as err:
                handover.put(err)
                return
            loop._thread = threading.current_thread()
            handover.put((loop, built))
            loop._run()

        threading.Thread(target=run, name=THREAD_NAME, daemon=True).start()
        result = handover.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def start(self) -> None:
        self._thread.start()

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams, arrival: float) -> None:
        with self._handed_over_lock:
            self._handed_over += 1
        self._inbox.put(_Add(request_id, prompt_ids, params, arrival))

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    def stats(self) -> EngineStats:
        """The engine's last snapshot, with requests handed over since then counted as waiting."""
        with self._handed_over_lock:
            stats, handed_over = self._stats, self._handed_over
        return replace(stats, waiting_requests=stats.waiting_requests + handed_over)

    def drain(self, seconds: float) -> None:
        """Cancels whatever is still in flight ``seconds`` from now (each gets its final output), and
        from then on whatever arrives; the thread goes on running until stop()."""
        self._inbox.put(_Drain(seconds))

    def stop(self, drain_seconds: float = 0.0, timeout: float = 30.0) -> None:
        """Lets the streams in flight finish for up to ``drain_seconds``, cancels what is left (each
        gets its final output) and ends the thread; waits at most ``timeout`` beyond the drain. A drain
        begun earlier keeps its own end if that comes first."""
        self._inbox.put(_Stop(drain_seconds))
        self._thread.join(drain_seconds + timeout)

    def _named_run(self) -> None:
        name_this_thread(THREAD_NAME)
        self._run()

    def _run(self) -> None:
        stopping = False
        cancel_at: float | None = None  # the drain's end: what is in flight then is cancelled
        while True:
            block = not stopping and not self._engine.has_work
            applied = 0
            while True:
                timeout = self._idle_seconds if block and self._worked and self._on_idle is not None else None
                try:
                    command = self._inbox.get(block=block, timeout=timeout)
                except queue.Empty:
                    if not block:
                        break
                    self._idle()
                    continue
                block = False
                if isinstance(command, _Stop):
                    stopping = True
                    end = self._clock() + command.drain_seconds
                    cancel_at = end if cancel_at is None else min(cancel_at, end)
                elif isinstance(command, _Drain):
                    cancel_at = self._clock() + command.seconds
                else:
                    applied += isinstance(command, _Add)
                    self._apply(command)
            if cancel_at is not None and self._clock() >= cancel_at:
                for request_id in self._engine.in_flight():
                    self._abort(request_id, SHUTDOWN_MESSAGE)
            if stopping and not self._engine.has_work:
                break
            if self._engine.has_work:
                self._step()
            self._publish(applied)
        self._publish(applied)

    def _idle(self) -> None:
        self._worked = False
        if self._on_idle is not None:
            try:
                self._on_idle()
            except Exception:
                log.exception("the engine's idle hook failed")

    def _publish(self, applied: int) -> None:
        stats = self._engine.stats()
        with self._handed_over_lock:
            self._stats = stats
            self._handed_over -= applied

    def _apply(self, command: object) -> None:
        if isinstance(command, _Add):
            try:
                self._engine.add(command.request_id, command.prompt_ids, command.params, command.arrival)
            except ValueError as err:
                self._sink(_error_output(command, str(err)))
        elif isinstance(command, _Abort):
            self._abort(command.request_id)

    def _abort(self, request_id: str, reason: str | None = None) -> None:
        output = self._engine.abort(request_id)
        if output is not None:
            self._sink(output if reason is None else replace(output, error=reason))

    def _step(self) -> None:
        self._worked = True
        try:
            outputs = self._engine.step()
        except Exception:
            # A failed step must not strand its requests: each ends with an error, the loop goes on.
            log.exception("engine step failed; ending the requests in flight with an error")
            for request_id in self._engine.in_flight():
                output = self._engine.abort(request_id)
                if output is not None:
                    self._sink(_as_error(output, "internal error in the generation engine"))
            return
        for output in outputs:
            self._sink(output)


def _error_output(command: _Add, message: str) -> RequestOutput:
    return RequestOutput(
        request_id=command.request_id,
        time=command.arrival,
        texts=("",),
        token_ids=((),),
        total_tokens=(0,),
        finish_reasons=(FinishReason.ERROR,),
        num_input_tokens=len(command.prompt_ids),
        finished=True,
        arrival=command.arrival,
        error=message,
    )


def _as_error(output: RequestOutput, message: str) -> RequestOutput:
    reasons = tuple(FinishReason.ERROR for _ in output.finish_reasons)
    return replace(output, finish_reasons=reasons, finished=True, error=message)
