"""Every bad sampling parameter gets an error naming the field and what is allowed."""

from __future__ import annotations

import json

import pytest

from triton_backend.sampling_params import InvalidRequest, Limits, parse_sampling_params

LIMITS = Limits(max_n=4)


@pytest.mark.parametrize(
    ("params", "field", "allowed"),
    [
        ({"temperature": -0.5}, "temperature", ">= 0"),
        ({"top_p": 0}, "top_p", "(0, 1]"),
        ({"top_p": 1.5}, "top_p", "(0, 1]"),
        ({"top_k": -1}, "top_k", ">= 0"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"max_tokens": 4, "min_tokens": 5}, "min_tokens", "<= max_tokens"),
        ({"n": 0}, "n", "[1, 4]"),
        ({"n": 5}, "n", "[1, 4]"),
        ({"max_tokens": 1020}, "max_tokens", "1024-token context"),
        ({"max_tokens": "lots"}, "max_tokens", "integer"),
        ({"temperature": "hot"}, "temperature", "finite number"),
        ({"stop": [1, 2]}, "stop", "string"),
        ({"seed": -3}, "seed", "[0, 2^63)"),
        ({"ignore_eos": "maybe"}, "ignore_eos", "true or false"),
        ({"beam_width": 4}, "unknown keys ['beam_width']", "allowed"),
        ({"no_repeat_ngram_size": 1.5}, "no_repeat_ngram_size", "integer"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_bad_values_name_the_field(params, field, allowed):
    with pytest.raises(InvalidRequest) as err:
        parse_sampling_params(json.dumps(params), prompt_tokens=10, limits=LIMITS)
    message = str(err.value)
    assert field in message and allowed in message, message


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidRequest) as err:
        parse_sampling_params(json.dumps({"temperature": -1, "top_p": 2, "n": 0}), 5, LIMITS)
    assert len(err.value.errors) == 3


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"'], ids=["malformed", "array", "string"])
def test_sampling_parameters_must_be_a_json_object(text):
    with pytest.raises(InvalidRequest, match="sampling_parameters: must be a JSON object"):
        parse_sampling_params(text, 5, LIMITS)


def test_values_quoted_as_strings_are_accepted_as_vllm_clients_send_them():
    params = parse_sampling_params(
        json.dumps({"max_tokens": "32", "temperature": "0", "stop": "1"}), 5, LIMITS
    )
    assert (params.max_tokens, params.temperature, params.stop) == (32, 0.0, ("1",))


def test_defaults_when_nothing_is_given():
    params = parse_sampling_params(None, 5, LIMITS)
    assert (params.max_tokens, params.n, params.temperature, params.top_k) == (16, 1, 1.0, 0)
