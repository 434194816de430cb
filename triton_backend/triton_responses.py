"""The one thread that talks to Triton's response senders.

Triton 2.51's Python backend aborts the server when response senders are used from several threads
at once, so execute() and the engine only put work in this thread's queue. It sends every response,
the errors of refused requests too, checks for cancelled requests, and feeds the metrics, so none of
that runs on the engine's token path. Every request gets exactly one final response.

A client that went away (its process killed, its stream closed) is noticed by Triton's cancel flag or
by a send that fails; either way its request is aborted and counted as cancelled.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from triton_backend.engine_stats import EngineStats
from triton_backend.metrics import Observations, RequestTracker
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.thread_names import name_this_thread
from triton_backend.triton_metrics import TritonMetrics
from triton_backend.triton_requests import ResponseOptions

log = logging.getLogger(__name__)

CANCEL_CHECK_INTERVAL = 0.1


@dataclass(frozen=True)
class Open:
    request_id: str
    sender: Any
    options: ResponseOptions
    n: int


@dataclass(frozen=True)
class Reject:
    sender: Any
    message: str


@dataclass
class _Stream:
    sender: Any
    options: ResponseOptions
    texts: list[str] = field(default_factory=list)
    # Tokens of skipped responses (no text yet), reported with the next response that is sent.
    unsent_tokens: list[int] = field(default_factory=list)
    gone: bool = False  # a send failed: the client is not there to read the rest


_STOP = object()


class ResponseThread:
    def __init__(
        self,
        pb_utils: Any,
        metrics: TritonMetrics,
        engine_stats: Callable[[], EngineStats],
        abort: Callable[[str], None],
    ) -> None:
        self._pb = pb_utils
        self._metrics = metrics
        self._engine_stats = engine_stats
        self._abort = abort
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._tracker = RequestTracker()
        self._cancel_requested: set[str] = set()
        self._observations = Observations()  # seen since the metrics were last recorded (_publish_when_due)
        self._next_check = 0.0
        self._thread = threading.Thread(target=self._run, name="nlg-responses", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, item: Open | Reject | RequestOutput) -> None:
        self._queue.put(item)

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        name_this_thread(self._thread.name)
        self._next_check = time.monotonic() + CANCEL_CHECK_INTERVAL
        while True:
            try:
                item = self._queue.get(timeout=CANCEL_CHECK_INTERVAL)
            except queue.Empty:
                item = None
            if item is _STOP:
                self._metrics.record(self._observations)
                return
            # A stream's outputs that queued up while the last ones were sent go out as one response:
            # each send costs the backend far more than a token, so a thread that falls behind catches
            # up instead of holding every stream to its own pace.
            pending: dict[str, RequestOutput] = {}
            while item is not None:
                try:
                    self._take(item, pending)
                except Exception:
                    log.exception("handling a response failed")
                if time.monotonic() >= self._next_check:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
                if item is _STOP:
                    self._queue.put(_STOP)
                    item = None
            for output in pending.values():
                try:
                    self._send_output(output)
                except Exception:
                    log.exception("sending a response failed")
                self._publish_when_due()
            self._publish_when_due()

    def _publish_when_due(self) -> None:
        """Every CANCEL_CHECK_INTERVAL, even in the middle of a backlog that never empties: the metrics
        and the cancel checks are what the autoscaler and the clients wait on under overload. Only
        then: each counter's increment is a round trip to the server (pb_utils sends it over the
        stub's message queue), so an interval's tokens and requests go out summed, one increment per
        counter, not one per response; a scrape every few seconds cannot tell the difference."""
        if time.monotonic() < self._next_check:
            return
        self._metrics.record(self._observations)
        self._observations = Observations()
        self._check_cancelled()
        self._metrics.record_engine(self._engine_stats())
        self._next_check = time.monotonic() + CANCEL_CHECK_INTERVAL

    def _take(self, item: object, pending: dict[str, RequestOutput]) -> None:
        if isinstance(item, Open):
            self._streams[item.request_id] = _Stream(item.sender, item.options, [""] * item.n, [0] * item.n)
        elif isinstance(item, Reject):
            self._metrics.record_rejected()
            self._send_error(item.sender, item.message)
        elif isinstance(item, RequestOutput):
            self._tracker.observe(item, self._observations)
            earlier = pending.get(item.request_id)
            pending[item.request_id] = item if earlier is None else merged(earlier, item)

    def _send_output(self, output: RequestOutput) -> None:
        stream = self._streams.get(output.request_id)
        if stream is None:
            return
        final = self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if output.finished:
            del self._streams[output.request_id]
            self._cancel_requested.discard(output.request_id)
        if stream.gone:
            return
        if output.finished:
            if FinishReason.CANCELLED in output.finish_reasons:
                # A stop's drain says why it cut the stream (engine_loop.SHUTDOWN_MESSAGE).
                error = self._pb.TritonError(output.error or "request cancelled", self._pb.TritonError.CANCELLED)
                self._send(output.request_id, stream, self._pb.InferenceResponse(error=error), final)
                return
            if output.error is not None:
                self._send(output.request_id, stream, self._error(output.error, self._pb.TritonError.INTERNAL), final)
                return
        options = stream.options
        if options.stream:
            counts = [old + new for old, new in zip(stream.unsent_tokens, output.new_tokens, strict=True)]
            if not output.finished and not any(output.texts):
                stream.unsent_tokens = counts
                return
            stream.unsent_tokens = [0] * len(counts)
            response = self._response(output, list(output.texts), counts, options)
        else:
            stream.texts = [old + new for old, new in zip(stream.texts, output.texts, strict=True)]
            if not output.finished:
                return
            prefix = "" if options.exclude_input_in_output else options.prompt
            response = self._response(
                output, [prefix + t for t in stream.texts], list(output.total_tokens), options
            )
        self._send(output.request_id, stream, response, final if output.finished else 0)

    def _send(self, request_id: str, stream: _Stream, response: Any, flags: int) -> None:
        try:
            stream.sender.send(response, flags=flags)
        except Exception as err:
            # The client is gone (Triton closed its response sender): stop generating for nobody. The
            # abort's final output counts the request as cancelled; a final that failed keeps its reason.
            stream.gone = True
            log.warning("request %s: sending a response failed (%s); cancelling it", request_id, err)
            if not flags and request_id not in self._cancel_requested:
                self._cancel_requested.add(request_id)
                self._abort(request_id)

    def _response(
        self, output: RequestOutput, texts: list[str], counts: list[int], options: ResponseOptions
    ) -> Any:
        tensor = self._pb.Tensor
        tensors = [tensor("text_output", np.array([t.encode() for t in texts], dtype=np.object_))]
        if options.return_finish_reason:
            reasons = [r.value.encode() if r is not None else b"" for r in output.finish_reasons]
            tensors.append(tensor("finish_reason", np.array(reasons, dtype=np.object_)))
        if options.return_num_input_tokens:
            tensors.append(tensor("num_input_tokens", np.array([output.num_input_tokens], dtype=np.int32)))
        if options.return_num_output_tokens:
            tensors.append(tensor("num_output_tokens", np.array(counts, dtype=np.int32)))
        return self._pb.InferenceResponse(output_tensors=tensors)

    def _error(self, message: str, code: Any) -> Any:
        return self._pb.InferenceResponse(error=self._pb.TritonError(message, code))

    def _send_error(self, sender: Any, message: str) -> None:
        """A refused request's one response."""
        response = self._error(message, self._pb.TritonError.INVALID_ARG)
        sender.send(response, flags=self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _check_cancelled(self) -> None:
        for request_id, stream in self._streams.items():
            if request_id not in self._cancel_requested and stream.sender.is_cancelled():
                self._cancel_requested.add(request_id)
                self._abort(request_id)


def merged(earlier: RequestOutput, later: RequestOutput) -> RequestOutput:
    """Two consecutive outputs of one request as one: the text and tokens of both, the state of the later."""
    return replace(
        later,
        texts=tuple(a + b for a, b in zip(earlier.texts, later.texts, strict=True)),
        token_ids=tuple(a + b for a, b in zip(earlier.token_ids, later.token_ids, strict=True)),
    )
