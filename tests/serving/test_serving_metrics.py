"""/metrics shows the per-token histograms, with counts that match the requests made."""

from __future__ import annotations

import pytest
from serving_testkit import grpc_generate, metric, scrape, settled_scrape, wait_for

pytestmark = pytest.mark.integration

HISTOGRAMS = (
    "nlg_request_latency_seconds",
    "nlg_time_to_first_token_seconds",
    "nlg_time_per_output_token_seconds",
    "nlg_inter_token_latency_seconds",
)


def test_histograms_and_counters_match_the_requests(triton_tiny):
    url = triton_tiny.metrics_url
    before = settled_scrape(url)  # not counting what earlier tests' streams finish now
    requests = [("one", 1, 6), ("two", 2, 9), ("three", 1, 4)]  # prompt, n, max_tokens
    for prompt, n, max_tokens in requests:
        got = grpc_generate(
            triton_tiny.grpc_url, prompt, {"max_tokens": max_tokens, "n": n, "ignore_eos": True}
        )
        assert got.error is None
    choices = sum(n for _, n, _ in requests)
    tokens = sum(n * m for _, n, m in requests)

    def delta(name: str, **labels: str) -> float:
        return metric(scrape(url), name, **labels) - metric(before, name, **labels)

    # The model records an interval's observations together, the finished counter last
    # (TritonMetrics.record): once it shows every request, so do the histograms and the other counters.
    assert wait_for(lambda: delta("nlg_requests_finished_total", finish_reason="length") == len(requests))
    assert delta("nlg_request_latency_seconds_count") == len(requests)
    assert delta("nlg_time_to_first_token_seconds_count") == choices
    assert delta("nlg_time_per_output_token_seconds_count") == choices
    assert delta("nlg_inter_token_latency_seconds_count") == tokens - choices
    assert delta("nlg_generation_tokens_total") == tokens
    assert delta("nlg_prompt_tokens_total") == 3  # "one", "two", "three" are one token each
    # Each request gets a predicted length on arrival (exact counts: tests/engine); the server is shared
    # with other tests, whose late arrivals may land in this window too.
    assert wait_for(lambda: delta("nlg_length_predictions_total") >= len(requests))
    assert any(name == "nlg_length_underestimates_total" for name, _ in scrape(url))
    samples = scrape(url)
    for name in HISTOGRAMS:
        buckets = [
            v for (n, labels), v in samples.items() if n == f"{name}_bucket" and ("model", "gpt2") in labels
        ]
        assert len(buckets) > 10 and buckets == sorted(buckets), name
    # Per-token latency is a fraction of request latency: request latency over its tokens.
    per_token = delta("nlg_time_per_output_token_seconds_sum") / choices
    request = delta("nlg_request_latency_seconds_sum") / len(requests)
    assert 0 < per_token < request
    assert metric(samples, "nlg_model_info", preset="tiny", weights="random") == 1
