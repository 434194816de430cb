"""How the model learns that its server is stopping: over the server's HTTP endpoint, with a timeout,
never through a call that holds the interpreter's lock while the server unloads it."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from triton_backend.launch import free_port
from triton_backend.server_watch import Readiness, http_model_ready, watch_readiness


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

