"""A real tritonserver streams GPT-2 tokens over gRPC and HTTP, as the request contract says."""

from __future__ import annotations

import pytest
import torch
from serving_testkit import grpc_generate, http_generate_stream

from triton_backend.presets import build_model
from triton_backend.tokenizer import load_tokenizer

pytestmark = pytest.mark.integration
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def reference_model():
    model, _ = build_model("tiny", None, torch.device("cpu"), torch.float32)  # the server's weights
    return model


def hf_greedy_text(model, prompt: str, tokens: int) -> str:
    ids = load_tokenizer().encode(prompt).ids
    out = model.generate(
        torch.tensor([ids]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=50256
    )
    return load_tokenizer().decode(out[0, len(ids) :].tolist())


def test_greedy_stream_equals_transformers_generate(triton_tiny, reference_model):
    got = grpc_generate(
        triton_tiny.grpc_url, PROMPT, {"max_tokens": 24, "temperature": 0, "ignore_eos": True}
    )
    assert got.error is None and got.finals == 1
    assert len(got.texts) > 1  # streamed, not one block
    assert got.text() == hf_greedy_text(reference_model, PROMPT, 24)
    assert got.finish_reasons == ["length"]
    assert sum(got.num_output_tokens) == 24


def test_http_generate_stream_speaks_the_same_contract(triton_tiny, reference_model):
    events = http_generate_stream(
        triton_tiny.http_url,
        {
            "text_input": PROMPT,
            "stream": True,
            "sampling_parameters": '{"max_tokens": 12, "temperature": 0, "ignore_eos": true}',
            "return_finish_reason": True,
        },
    )
    assert len(events) > 1
    assert "".join(e["text_output"] for e in events) == hf_greedy_text(reference_model, PROMPT, 12)
    assert events[-1]["finish_reason"] == "length"


def test_without_stream_one_response_holds_prompt_and_text(triton_tiny):
    whole = grpc_generate(triton_tiny.grpc_url, PROMPT, {"max_tokens": 8, "temperature": 0}, stream=False)
    streamed = grpc_generate(triton_tiny.grpc_url, PROMPT, {"max_tokens": 8, "temperature": 0})
    assert len(whole.texts) == 1
    assert whole.text() == PROMPT + streamed.text()
    bare = grpc_generate(
        triton_tiny.grpc_url,
        PROMPT,
        {"max_tokens": 8, "temperature": 0},
        stream=False,
        exclude_input_in_output=True,
    )
    assert bare.text() == streamed.text()


def test_n_choices_come_as_one_delta_each(triton_tiny):
    got = grpc_generate(
        triton_tiny.grpc_url, PROMPT, {"max_tokens": 10, "n": 3, "seed": 5, "ignore_eos": True}
    )
    assert all(len(response) == 3 for response in got.texts)
    choices = [got.text(i) for i in range(3)]
    assert len(set(choices)) == 3
    assert got.finish_reasons == ["length"] * 3


def test_seed_repeats_and_other_seeds_differ(triton_tiny):
    def sample(seed: int) -> str:
        params = {"max_tokens": 12, "temperature": 1.0, "top_p": 0.95, "top_k": 100, "seed": seed}
        return grpc_generate(triton_tiny.grpc_url, PROMPT, params).text()

    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_max_and_min_tokens_bound_the_output(triton_tiny):
    got = grpc_generate(
        triton_tiny.grpc_url, PROMPT, {"max_tokens": 5, "min_tokens": 5, "temperature": 0.7, "seed": 1}
    )
    assert sum(got.num_output_tokens) == 5
    assert got.finish_reasons == ["length"]


def test_stop_string_ends_the_stream_before_it(triton_tiny):
    params = {"max_tokens": 16, "temperature": 1.0, "seed": 3, "ignore_eos": True}
    free = grpc_generate(triton_tiny.grpc_url, PROMPT, params).text()
    stop = free[len(free) // 2 : len(free) // 2 + 4]
    got = grpc_generate(triton_tiny.grpc_url, PROMPT, {**params, "stop": [stop]})
    assert got.text() == free[: free.index(stop)]
    assert got.finish_reasons == ["stop"]


def test_no_repeat_ngram_size_removes_repeated_ngrams(triton_tiny):
    tokenizer = load_tokenizer()
    params = {"max_tokens": 20, "temperature": 0, "ignore_eos": True}
    looping = tokenizer.encode(grpc_generate(triton_tiny.grpc_url, PROMPT, params).text()).ids
    assert len(set(zip(looping, looping[1:], strict=False))) < len(looping) - 1  # random weights loop
    text = grpc_generate(triton_tiny.grpc_url, PROMPT, {**params, "no_repeat_ngram_size": 2}).text()
    ids = tokenizer.encode(PROMPT + text).ids
    bigrams = list(zip(ids, ids[1:], strict=False))
    assert len(bigrams) == len(set(bigrams))
