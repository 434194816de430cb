"""How the model learns that its server is stopping: over the server's HTTP endpoint, with a timeout,
or from what the server's main thread waits in (HTTP may be off), never through a call that holds
the interpreter's lock while the server unloads it."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from triton_backend.launch import free_port
from triton_backend.server_watch import Readiness, http_model_ready, main_thread_stopping, watch_readiness


class Ready(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        Ready.paths.append(self.path)
        self.send_response(Ready.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_ready_endpoint_answers_ready_not_ready_or_is_gone():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ready = http_model_ready(f"http://127.0.0.1:{server.server_port}", "gpt2", "1")
        Ready.status = 200
        assert ready() == "ready"
        Ready.status = 400  # what tritonserver answers for a model it is unloading
        assert ready() == "not ready"
        assert Ready.paths[-1] == "/v2/models/gpt2/versions/1/ready"
    finally:
        server.shutdown()
        server.server_close()
    assert http_model_ready(f"http://127.0.0.1:{free_port()}", "gpt2", "1")() == "gone"


def test_an_endpoint_that_does_not_answer_in_time_is_unknown_not_gone():
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        ready = http_model_ready(f"http://127.0.0.1:{silent.getsockname()[1]}", "gpt2", "1", timeout=0.2)
        assert ready() == "unknown"


@pytest.mark.parametrize(
    ("answers", "drains"),
    [
        (["ready", "ready", "not ready"], True),  # the server says no
        (["unknown", "ready", "gone"], True),  # the endpoint answered, then went away: the server is stopping
        (["ready", "unknown", "unknown", "ready"], False),  # slow answers are no stop
        (["gone", "gone", "gone", "gone"], False),  # never answered: no HTTP endpoint there, finalize() drains
    ],
    ids=["not-ready", "gone", "slow", "never-answered"],
)
def test_the_drain_starts_when_the_server_says_so_or_goes_away_after_answering(answers, drains):
    asked: list[str] = []
    stopped = threading.Event()

    def is_ready() -> Readiness:
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(answer)
        return answer

    watch_readiness(is_ready, busy=lambda: True, on_stopping=stopped.set, interval=0.01)
    assert stopped.wait(2.0 if drains else 0.3) is drains
    if not drains:
        assert len(asked) > len(answers)  # still asking


def test_an_idle_instance_keeps_watching_and_drains_once_busy():
    stopped, busy = threading.Event(), threading.Event()
    answers = iter(["ready"] + ["gone"] * 1000)
    watch_readiness(lambda: next(answers), busy=busy.is_set, on_stopping=stopped.set, interval=0.01)
    assert not stopped.wait(0.1)  # stopping, but nothing to drain
    busy.set()
    assert stopped.wait(2.0)


def fake_main_thread(tmp_path: Path, pid: int = 7) -> Path:
    task = tmp_path / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    return task / "wchan"


@pytest.mark.parametrize(
    ("timeline", "states"),
    [
        ([(0.0, "futex_wait_queue"), (0.2, "futex_do_wait")], ["ready", "ready"]),
        (
            [(0.0, "futex_do_wait"), (0.1, "hrtimer_nanosleep"), (0.6, "do_nanosleep"), (1.1, "hrtimer_nanosleep")],
            ["ready", "unknown", "unknown", "not ready"],
        ),
        # A sleep broken off (the poll of a model repository, a busy moment) starts the count again.
        (
            [(0.0, "hrtimer_nanosleep"), (0.8, "ep_poll"), (1.0, "hrtimer_nanosleep"), (1.9, "hrtimer_nanosleep")],
            ["unknown", "unknown", "unknown", "unknown"],
        ),
        ([(0.0, "0"), (5.0, "0")], ["unknown", "unknown"]),  # a kernel that does not say
    ],
    ids=["serving", "stopping", "interrupted-sleep", "unreadable"],
)
def test_the_main_thread_says_stopping_once_it_sleeps_out_the_exit_timeout(tmp_path, timeline, states):
    wchan = fake_main_thread(tmp_path)
    now = [0.0]
    state = main_thread_stopping(7, proc=tmp_path, clock=lambda: now[0])
    seen = []
    for at, waiting_in in timeline:
        now[0] = at
        wchan.write_text(waiting_in + "\n")
        seen.append(state())
    assert seen == states
    assert main_thread_stopping(8, proc=tmp_path)() == "unknown"  # no such process


# A process whose main thread waits on a lock (a futex) until told, then sleeps in one-second steps
# as tritonserver's main thread does once it is stopping.
SERVER_LIKE = """
import sys, threading, time
told = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()
print("serving", flush=True)
told.wait()
while True:
    time.sleep(1)
"""


def test_a_real_main_thread_reads_serving_then_stopping():
    child = subprocess.Popen([sys.executable, "-c", SERVER_LIKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"serving\n"
        state = main_thread_stopping(child.pid, sustained=0.5)
        assert wait_until(lambda: state() == "ready", 5.0)
        assert child.stdin is not None
        child.stdin.write(b"stop\n")
        child.stdin.flush()
        assert wait_until(lambda: state() == "not ready", 5.0)
    finally:
        child.kill()
        child.wait()


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
