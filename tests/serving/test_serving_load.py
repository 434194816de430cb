"""Many streams at once on one instance, and a client that cancels mid-stream."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import tritonclient.grpc as grpcclient
from serving_testkit import grpc_generate, metric, scrape, settled_scrape, wait_for

from triton_backend.cli.requests import generate_inputs

pytestmark = pytest.mark.integration


def test_sixteen_concurrent_streams_all_complete(triton_tiny):
    start = threading.Barrier(16)

    def one(i: int):
        start.wait()
        return grpc_generate(
            triton_tiny.grpc_url, f"stream number {i}", {"max_tokens": 40, "ignore_eos": True}
        )

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    assert all(r.error is None and r.finals == 1 for r in results)
    assert [sum(r.num_output_tokens) for r in results] == [40] * 16
    # The gauge is refreshed off the token path, every 0.1 s.
    assert wait_for(lambda: metric(scrape(triton_tiny.metrics_url), "nlg_requests_running") == 0)


def test_cancelled_stream_stops_generating_and_frees_its_slot(triton_tiny):
    url = triton_tiny.metrics_url
    before = settled_scrape(url)  # the server is the session's: other tests' requests are in its counters
    cancelled_before = metric(before, "nlg_requests_finished_total", finish_reason="cancelled")
    generated_before = metric(before, "nlg_generation_tokens_total")
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(triton_tiny.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    long_request = {"max_tokens": 1000, "ignore_eos": True, "temperature": 1.0}
    client.async_stream_infer("gpt2", generate_inputs("a long story", long_request), request_id=uuid.uuid4().hex)
    for _ in range(5):
        result, error = responses.get(timeout=60)
        assert error is None
    client.stop_stream(cancel_requests=True)
    client.close()
    assert wait_for(
        lambda: (
            metric(scrape(url), "nlg_requests_finished_total", finish_reason="cancelled")
            == cancelled_before + 1
        )
    )
    generated = metric(scrape(url), "nlg_generation_tokens_total")
    time.sleep(0.5)
    samples = scrape(url)
    assert metric(samples, "nlg_generation_tokens_total") == generated  # nothing runs on after the cancel
    assert generated - generated_before < 1000  # cut short of the 1000 it asked for
    assert wait_for(lambda: metric(scrape(url), "nlg_kv_cache_usage_ratio") == 0)
    after = grpc_generate(triton_tiny.grpc_url, "next", {"max_tokens": 2})
    assert after.error is None
