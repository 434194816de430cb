"""The response thread under a backlog: metrics and engine gauges go out while responses still queue,
and a stream's queued outputs go out as one response.

Triton's Python API is stood in for by a few recording classes (the thread only calls its response
senders and metric families), so a backlog can be built deterministically: a client that takes 10 ms
a response, with 30 outputs queued before the thread starts.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fake_pb_utils import FakePbUtils

from triton_backend.engine_stats import EngineStats
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.presets import ModelInfo
from triton_backend.triton_metrics import TritonMetrics
from triton_backend.triton_requests import ResponseOptions
from triton_backend.triton_responses import CANCEL_CHECK_INTERVAL, Open, ResponseThread

BACKLOG = 30
SEND_SECONDS = 0.01


class SlowClient:
    """A response sender whose client reads a response every 10 ms."""

    def __init__(self, finals: int = 1) -> None:
        self.sent = 0
        self.responses: list[Any] = []
        self._finals = finals
        self.final = threading.Event()

    def send(self, response: Any, flags: int = 0) -> None:
        time.sleep(SEND_SECONDS)
        self.sent += 1
        self.responses.append(response)
        if flags:
            self._finals -= 1
            if self._finals == 0:
                self.final.set()

    def is_cancelled(self) -> bool:
        return False


class PbUtils(FakePbUtils):
    """Records each metric update with how many responses the client had read by then."""

    def __init__(self, client: SlowClient) -> None:
        super().__init__()
        self.client = client
        self.updates: list[tuple[str, float, int]] = []

    def record(self, kind: str, name: str, labels: dict[str, str], value: float) -> None:
        self.updates.append((name, value, self.client.sent))


def token(i: int, arrival: float, request_id: str = "r0", last: bool | None = None) -> RequestOutput:
    last = i == BACKLOG - 1 if last is None else last
    return RequestOutput(
        request_id=request_id, time=arrival + 0.001 * (i + 1), texts=(f"<{i}>",), token_ids=((i,),),
        total_tokens=(i + 1,), finish_reasons=(FinishReason.LENGTH if last else None,), num_input_tokens=3,
        finished=last, arrival=arrival,
    )  # fmt: skip


def response_thread(client: SlowClient) -> tuple[ResponseThread, PbUtils]:
    pb = PbUtils(client)
    info = ModelInfo("tiny", "", True, 0, "float32", "cpu")
    stats = EngineStats(running_requests=5, waiting_requests=2, kv_pages_used=1, kv_pages_total=10, preemptions=0)
    return ResponseThread(pb, TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", info), lambda: stats, lambda _: None), pb


OPTIONS = ResponseOptions(True, True, False, False, True, "hi")


def test_gauges_and_token_metrics_go_out_while_a_backlog_is_being_sent():
    client = SlowClient(finals=BACKLOG)
    thread, pb = response_thread(client)
    arrival = time.monotonic()
    for i in range(BACKLOG):  # one token each of 30 streams: nothing to merge, 30 sends
        thread.put(Open(f"r{i}", client, OPTIONS, 1))
        thread.put(token(i, arrival, request_id=f"r{i}", last=True))
    # 0 s: 30 responses queued, the client reads one every 10 ms (0.3 s in all).
    thread.start()
    try:
        assert client.final.wait(10)
    finally:
        thread.stop()
    assert client.sent == BACKLOG
    running = [sent for name, value, sent in pb.updates if name == "nlg_requests_running" and value == 5]
    ttfts = [sent for name, _, sent in pb.updates if name == "nlg_time_to_first_token_seconds"]
    # ~0.1 s: the gauges and the first tokens seen so far are published with about 10 responses read,
    # not held until the queue is empty.
    behind = BACKLOG - CANCEL_CHECK_INTERVAL / SEND_SECONDS
    assert running and running[0] < behind, pb.updates
    assert ttfts and ttfts[0] < behind, pb.updates
    # Every stream's first token is recorded once all the same.
    assert len(ttfts) == BACKLOG


def test_a_streams_queued_outputs_go_out_as_one_response_and_every_token_gap_is_recorded():
    client = SlowClient()
    thread, pb = response_thread(client)
    arrival = time.monotonic()
    thread.put(Open("r0", client, OPTIONS, 1))
    for i in range(BACKLOG):
        thread.put(token(i, arrival))
    thread.start()
    try:
        assert client.final.wait(10)
    finally:
        thread.stop()
    assert client.sent == 1
    tensors = dict(client.responses[0]["outputs"])
    assert tensors["text_output"].tolist() == ["".join(f"<{i}>" for i in range(BACKLOG)).encode()]
    assert tensors["num_output_tokens"].tolist() == [BACKLOG]
    gaps = [value for name, value, _ in pb.updates if name == "nlg_inter_token_latency_seconds"]
    assert len(gaps) == BACKLOG - 1
