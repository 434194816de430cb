"""A tritonserver started by hand, not through nlg-triton: no drain settings, the default exit timeout
(30 s), HTTP on a port other than 8000 or off. SIGTERM with eight long streams open ends each with a
final response (finished, or cut for the shutdown), the server exits 0 inside its exit timeout and
no stub outlives it. Before the model read the server's arguments, it drained for 122 s, the server
killed it at 30 s and crashed (SIGSEGV or a malloc abort), and no stream got its final response.

And a server killed with its stubs (SIGKILL: the OOM killer, a container killed) leaves its shared
memory in /dev/shm; the next server's model removes it at load, and never a live server's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from plain_server import PlainTritonServer
from serving_testkit import Stream, alive, grpc_generate, http_generate_stream, metric, scrape, stub_pids, wait_for

from triton_backend.engine_loop import SHUTDOWN_MESSAGE
from triton_backend.server_stop import DEFAULT_EXIT_TIMEOUT_SECONDS
from triton_backend.shm_sweep import MIN_AGE_SECONDS

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
PROMPT = "Once upon a time"
# The gpt2 preset on a CPU: a thousand tokens each for eight streams take minutes, far past the exit timeout.
LONG = {"max_tokens": 1000, "ignore_eos": True}
MODEL_ENV = {"NLG_PRESET": "gpt2", "NLG_MAX_NUM_SEQS": "8"}
STREAMS = 8
CRASH_SIGNS = ("Exit timeout expired", "malloc", "Signal (6)", "Signal (11)", "Aborted", "Traceback")


def open_streams(server: PlainTritonServer, http_streams: int) -> tuple[list[threading.Thread], dict[int, Any]]:
    """STREAMS long streams: the first `http_streams` over HTTP (generate_stream), the rest over gRPC."""
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        try:
            if i < http_streams:
                body = {"text_input": PROMPT, "stream": True, "sampling_parameters": json.dumps(LONG)}
                results[i] = http_generate_stream(server.http_url, {**body, "return_finish_reason": True})
            else:
                results[i] = grpc_generate(server.grpc_url, PROMPT, LONG)
        except Exception as err:  # the test reports what the client saw
            results[i] = repr(err)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    return threads, results


def outcome(result: Any) -> str:
    """Whether a stream that got exactly one final response "finished" or was "cut"; for one that did
    not, what it got."""
    if isinstance(result, Stream):
        if result.finals != 1:
            return f"{result.finals} final responses"
        if result.error is None:
            return "finished" if result.finish_reasons == ["length"] else f"finished with {result.finish_reasons}"
        return "cut" if SHUTDOWN_MESSAGE in result.error else result.error
    if isinstance(result, list) and result:  # the events of an HTTP stream; its end is the final one
        last = result[-1]
        if "error" in last:
            return "cut" if SHUTDOWN_MESSAGE in last["error"] else last["error"]
        return "finished" if last.get("finish_reason") == "length" else f"finished with {last}"
    return repr(result)


@pytest.mark.parametrize(
    ("http", "http_streams"),
    [(True, 2), (False, 0)],
    ids=["http-other-port", "http-off"],
)
def test_sigterm_ends_every_stream_and_exits_0_at_the_default_exit_timeout(tmp_path, http, http_streams):
    server = PlainTritonServer(tmp_path / "triton.log", MODEL_ENV, http=http)
    server.start()
    assert server.process is not None
    try:
        stubs = stub_pids(server.process.pid)
        assert stubs, "no stub process found"
        threads, results = open_streams(server, http_streams)

        def in_model() -> float:
            samples = scrape(server.metrics_url)
            return metric(samples, "nlg_requests_running") + metric(samples, "nlg_requests_waiting")

        seen = wait_for(lambda: in_model() == STREAMS, timeout=60)
        assert seen, f"the model holds {in_model()} of {STREAMS} streams; the clients got {results}"
        assert wait_for(lambda: all(not isinstance(r, str) for r in results.values()), timeout=5)
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            code = server.process.wait(DEFAULT_EXIT_TIMEOUT_SECONDS + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"tritonserver did not exit after SIGTERM; its log ends:\n{server.log()[-6000:]}")
        took = time.monotonic() - stopped_at
        for thread in threads:
            thread.join(30)
        log = server.log()
        left = wait_for(lambda: not any(alive(pid) for pid in stubs), timeout=5)
    finally:
        server.stop()
    assert code == 0, log[-4000:]
    assert took < DEFAULT_EXIT_TIMEOUT_SECONDS, log[-4000:]
    for sign in CRASH_SIGNS:
        assert sign not in log, log[-4000:]
    assert left, "a stub outlived its server"
    outcomes = [outcome(results.get(i)) for i in range(STREAMS)]
    assert set(outcomes) <= {"finished", "cut"}, outcomes
    assert "cut" in outcomes, outcomes  # the exit timeout, not the streams' ends, bounded this stop


def regions_of(pids: list[int], prefix: str) -> set[Path]:
    """The Python-backend shared-memory regions these processes map."""
    found = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and Path(fields[5]).name.startswith(prefix):
                found.add(Path(fields[5]))
    return found


def test_the_shared_memory_of_a_killed_server_is_removed_by_the_next_one_and_a_live_ones_is_kept(tmp_path):
    # A prefix of the test's own: the servers of other tests on this machine leave these regions alone.
    prefix = f"nlgtest_{uuid.uuid4().hex[:8]}_"
    args = [f"--backend-config=python,shm-region-prefix-name={prefix}"]
    env = {"NLG_PRESET": "tiny"}
    live = PlainTritonServer(tmp_path / "live.log", env, args)
    live.start()
    try:
        assert live.process is not None
        kept = regions_of(stub_pids(live.process.pid), prefix)
        killed = PlainTritonServer(tmp_path / "killed.log", env, args)
        killed.start()
        assert killed.process is not None
        left = regions_of(stub_pids(killed.process.pid), prefix)
        assert kept and left, "a stub maps no region"
        os.killpg(killed.process.pid, signal.SIGKILL)  # the server and its stubs at once: a container killed
        killed.stop()
        assert all(region.exists() for region in left), "nothing was left behind to remove"
        # Regions younger than the sweep's minimum age are kept: their server may not have mapped them yet.
        created = max(region.stat().st_ctime for region in left)
        time.sleep(max(0.0, created + MIN_AGE_SECONDS + 1 - time.time()))
        after = PlainTritonServer(tmp_path / "after.log", env, args)
        after.start()
        try:
            assert not any(region.exists() for region in left), [r for r in left if r.exists()]
            assert all(region.exists() for region in kept), "a live server's region was removed"
            assert after.log().count("left by a tritonserver that is gone") == len(left), after.log()[-3000:]
            assert grpc_generate(live.grpc_url, PROMPT, {"max_tokens": 4}).finals == 1
        finally:
            after.stop()
    finally:
        live.stop()
        for region in Path("/dev/shm").glob(f"{prefix}*"):
            region.unlink()
