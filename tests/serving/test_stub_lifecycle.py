"""The stub's side of the lifecycle without a server: gauges never call the GIL-holding set(), a
client that went away is cancelled and counted so, and the parent watchdog ends an orphaned process
even while its other threads are blocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from fake_pb_utils import FakePbUtils

from triton_backend.engine_stats import EngineStats
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.presets import ModelInfo
from triton_backend.triton_metrics import TritonMetrics
from triton_backend.triton_requests import ResponseOptions
from triton_backend.triton_responses import Open, ResponseThread


class PbUtils(FakePbUtils):
    """Records every metric update."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, dict[str, str], float]] = []

    def record(self, kind: str, name: str, labels: dict[str, str], value: float) -> None:
        self.calls.append((kind, name, labels, value))

    def total(self, name: str, **labels: str) -> float:
        return sum(
            value
            for kind, metric, got, value in self.calls
            if kind != "set" and metric == name and labels.items() <= got.items()
        )


INFO = ModelInfo("tiny", "", True, 0, "float32", "cpu")


@pytest.mark.parametrize(
    "pages",
    [((1, 4), (0, 4)), ((1, 3), (2, 7), (1, 10), (0, 7)), ((1, 10), (2, 10), (3, 10), (7, 10), (3, 10), (0, 10))],
    ids=["dyadic", "thirds-sevenths", "tenths"],
)
def test_gauges_move_by_increments_and_read_exactly_what_was_recorded(pages):
    pb = PbUtils()
    metrics = TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", INFO)
    at_start = [c for c in pb.calls if c[0] == "set"]  # the info metric, set in initialize()
    for i, (used, total) in enumerate(pages):
        metrics.record_engine(EngineStats(i, 2 * i, used, total, 0))
        assert pb.total("nlg_kv_cache_usage_ratio") == pytest.approx(used / total, abs=2**-20)
        assert pb.total("nlg_requests_running") == i
        assert pb.total("nlg_requests_waiting") == 2 * i
    assert [c for c in pb.calls if c[0] == "set"] == at_start
    # Back to an empty cache: exactly 0, no drift from the increments.
    assert pb.total("nlg_kv_cache_usage_ratio") == 0.0


class GoneClient:
    """A client that takes the first response and is gone before the next."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []
        self.attempts = 0

    def send(self, response: Any, flags: int = 0) -> None:
        self.attempts += 1
        if self.sent:
            raise RuntimeError("Unable to send response. Response sender has been closed.")
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return False


def output(i: int, finish: FinishReason | None = None) -> RequestOutput:
    return RequestOutput(
        request_id="r0", time=time.monotonic(), texts=(f"<{i}>",), token_ids=((i,),), total_tokens=(i + 1,),
        finish_reasons=(finish,), num_input_tokens=3, finished=finish is not None, arrival=time.monotonic(),
    )  # fmt: skip


def test_a_client_gone_mid_stream_is_aborted_and_counted_as_cancelled():
    pb = PbUtils()
    client = GoneClient()
    aborted = threading.Event()
    thread: ResponseThread

    def abort(request_id: str) -> None:
        # What the engine does: the request ends with a cancelled final output.
        assert request_id == "r0"
        thread.put(output(2, FinishReason.CANCELLED))
        aborted.set()

    thread = ResponseThread(
        pb, TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", INFO), lambda: EngineStats(0, 0, 0, 1, 0), abort
    )
    thread.put(Open("r0", client, ResponseOptions(True, True, True, False, False, "hi"), 1))
    thread.put(output(0))
    thread.start()
    try:
        assert wait(lambda: len(client.sent) == 1)
        thread.put(output(1))
        assert aborted.wait(5)
        assert wait(lambda: pb.total("nlg_requests_finished_total", finish_reason="cancelled") == 1)
    finally:
        thread.stop()
    assert pb.total("nlg_requests_finished_total") == 1
    assert client.attempts == 2  # nothing more is sent to a client that is gone


def wait(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# A parent that starts a child and waits; the child starts the watchdog and then blocks for ever on a
# lock, as a thread blocked on a dead server would.
ORPHAN = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", '''
import threading
from triton_backend.server_watch import watch_parent
watch_parent(interval=0.1)
print("watching", flush=True)
lock = threading.Lock()
lock.acquire()
lock.acquire()
'''], stdout=sys.stdout)
print(child.pid, flush=True)
child.wait()
"""


def test_the_parent_watchdog_ends_a_process_whose_server_was_killed():
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline() == "watching\n"
        parent.kill()
        parent.wait()
        assert wait(lambda: not os.path.exists(f"/proc/{child}") or _zombie(child), timeout=3)
    finally:
        if os.path.exists(f"/proc/{child}") and not _zombie(child):
            os.kill(child, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
