"""The final response of a stream a stop cut says so, with Triton's CANCELLED code; a stream its
client cancelled and one that failed keep theirs. Exactly one final response each."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fake_pb_utils import FakePbUtils

from triton_backend.engine_loop import SHUTDOWN_MESSAGE
from triton_backend.engine_stats import EngineStats
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.presets import ModelInfo
from triton_backend.triton_metrics import TritonMetrics
from triton_backend.triton_requests import ResponseOptions
from triton_backend.triton_responses import Open, ResponseThread


class Client:
    def __init__(self) -> None:
        self.finals: list[Any] = []
        self.done = threading.Event()

    def send(self, response: Any, flags: int = 0) -> None:
        if flags:
            self.finals.append(response)
            self.done.set()

    def is_cancelled(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("reason", "error", "code", "message"),
    [
        (FinishReason.CANCELLED, SHUTDOWN_MESSAGE, "cancelled", SHUTDOWN_MESSAGE),
        (FinishReason.CANCELLED, None, "cancelled", "request cancelled"),
        (FinishReason.ERROR, "engine failed", "internal", "engine failed"),
    ],
    ids=["cut-by-a-stop", "cancelled-by-its-client", "failed"],
)
def test_the_final_response_says_why_the_stream_ended(reason, error, code, message):
    pb = FakePbUtils()
    stats = EngineStats(running_requests=0, waiting_requests=0, kv_pages_used=0, kv_pages_total=1, preemptions=0)
    info = ModelInfo("tiny", "", True, 0, "float32", "cpu")
    thread = ResponseThread(pb, TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", info), lambda: stats, lambda _: None)
    client = Client()
    thread.put(Open("r0", client, ResponseOptions(True, True, False, False, True, "hi"), 1))
    thread.put(
        RequestOutput(
            request_id="r0", time=1.0, texts=("",), token_ids=((),), total_tokens=(3,), finish_reasons=(reason,),
            num_input_tokens=2, finished=True, arrival=0.0, error=error,
        )  # fmt: skip
    )
    thread.start()
    try:
        assert client.done.wait(10)
    finally:
        thread.stop()
    [final] = client.finals
    assert (final["error"].code, final["error"].message) == (code, message)
