"""A real tritonserver's lifecycle with streams open: SIGTERM drains them, SIGKILL leaves no stub
behind, and a client killed mid-stream is counted as cancelled.

Streams run on the tiny preset with two sequences an instance, so six long streams queue and outlast
a one-second budget's drain: the drain's end (cancelled, with a final response) is always reached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from serving_testkit import Stream, alive, grpc_generate, metric, scrape, settled_scrape, stub_pids, wait_for

from triton_backend.launch import TritonServer
from triton_backend.settings import DrainBudget

pytestmark = pytest.mark.integration
PROMPT = "Once upon a time"
LONG = {"max_tokens": 1000, "ignore_eos": True}  # seconds on the tiny model; 4 + 1000 tokens fit its context
STREAMS = 6
BUDGET = DrainBudget(max_stream_seconds=1)  # drain 3 s, exit timeout 14 s
CLIENT = Path(__file__).with_name("stream_client.py")


def open_streams(server: TritonServer, count: int) -> tuple[list[threading.Thread], dict[int, Stream | str]]:
    results: dict[int, Stream | str] = {}

    def run(i: int) -> None:
        try:
            results[i] = grpc_generate(server.grpc_url, PROMPT, LONG)
        except Exception as err:  # the test reports what the client saw
            results[i] = repr(err)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, results


def in_model(server: TritonServer) -> float:
    samples = scrape(server.metrics_url)
    return metric(samples, "nlg_requests_running") + metric(samples, "nlg_requests_waiting")


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_ends_every_stream_with_a_final_response_and_exits_cleanly(tmp_path):
    server = TritonServer(
        env={"NLG_PRESET": "tiny", "NLG_MAX_NUM_SEQS": "2"}, drain=BUDGET, log_path=tmp_path / "triton.log"
    )
    server.start()
    try:
        threads, results = open_streams(server, STREAMS)
        assert wait_for(lambda: in_model(server) == STREAMS, timeout=30), "the model never saw every stream"
        assert server.process is not None
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            code = server.process.wait(BUDGET.exit_timeout_seconds + 10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not exit after SIGTERM; its log ends:\n{server.log_text()[-6000:]}")
        took = time.monotonic() - stopped_at
        for thread in threads:
            thread.join(30)
        log = server.log_text()
    finally:
        server.stop()
    assert code == 0, log[-4000:]
    # Finished within the budget, by draining, not by Triton's forced exit.
    assert took < BUDGET.exit_timeout_seconds, log[-4000:]
    for bad in ("Exit timeout expired", "malloc", "Aborted", "Signal (6)", "Traceback"):
        assert bad not in log, log[-4000:]
    outcomes = []
    for i in range(STREAMS):
        got = results[i]
        assert isinstance(got, Stream), got
        assert got.finals == 1, got
        if got.error is None:
            assert got.finish_reasons == ["length"]
            outcomes.append("length")
        else:
            assert "cancelled" in got.error, got.error
            outcomes.append("cancelled")
    # Two run at a time and each takes seconds: the 3 s drain ends with some still open.
    assert "cancelled" in outcomes, outcomes


def test_sigkill_of_the_server_leaves_no_stub_behind():
    server = TritonServer(env={"NLG_PRESET": "tiny", "NLG_MAX_NUM_SEQS": "2"}, drain=BUDGET)
    server.start()
    assert server.process is not None
    stubs = stub_pids(server.process.pid)
    try:
        assert stubs, "no stub process found"
        open_streams(server, 4)
        assert wait_for(lambda: in_model(server) == 4, timeout=30)
        server.process.kill()
        server.process.wait()
        # The stub's own check and the watchdog each look about twice a second.
        assert wait_for(lambda: not any(alive(pid) for pid in stubs), timeout=5), [pid for pid in stubs if alive(pid)]
    finally:
        kill_all(stubs)
        server.stop()


def test_a_client_killed_mid_stream_is_counted_as_cancelled(triton_tiny):
    before = settled_scrape(triton_tiny.metrics_url)
    clients = [
        subprocess.Popen(
            [
                sys.executable,
                str(CLIENT),
                protocol,
                triton_tiny.grpc_url if protocol == "grpc" else triton_tiny.http_url,
            ],
            stdout=subprocess.PIPE,
        )
        for protocol in ("grpc", "http")
    ]
    try:
        for client in clients:
            assert client.stdout is not None
            assert client.stdout.readline() == b"streaming\n"
        for client in clients:
            client.kill()
            client.wait()

        def finished(reason: str | None = None) -> float:
            labels = {} if reason is None else {"finish_reason": reason}
            now = scrape(triton_tiny.metrics_url)
            name = "nlg_requests_finished_total"
            return metric(now, name, **labels) - metric(before, name, **labels)

        assert wait_for(lambda: finished("cancelled") == 2, timeout=10), finished("cancelled")
        assert finished() == 2  # under no other reason
        assert wait_for(lambda: in_model(triton_tiny) == 0, timeout=10)
    finally:
        for client in clients:
            client.kill()
            client.wait()
