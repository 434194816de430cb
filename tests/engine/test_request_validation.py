"""Every bad sampling parameter gets an error naming the field and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triton_backend.sampling_params import InvalidRequest, Limits, int_bounds, parse_sampling_params, show_range

LIMITS = Limits(max_n=4)


@pytest.mark.parametrize(
    ("params", "field", "allowed"),
    [
        ({"temperature": -0.5}, "temperature", ">= 0"),
        ({"top_p": 0}, "top_p", "(0, 1]"),
        ({"top_p": 1.5}, "top_p", "(0, 1]"),
        ({"top_k": -1}, "top_k", "[0, 2^63-1]"),
        ({"top_k": 2**70}, "top_k", "[0, 2^63-1]"),
        ({"top_k": 2**63}, "top_k", "[0, 2^63-1]"),
        ({"max_tokens": 0}, "max_tokens", "[1, 1024]"),
        ({"max_tokens": 4, "min_tokens": 5}, "min_tokens", "<= max_tokens"),
        ({"n": 0}, "n", "[1, 4]"),
        ({"n": 5}, "n", "[1, 4]"),
        ({"max_tokens": 1020}, "max_tokens", "1024-token context"),
        ({"max_tokens": "lots"}, "max_tokens", "integer"),
        ({"temperature": "hot"}, "temperature", "finite number"),
        ({"stop": [1, 2]}, "stop", "string"),
        ({"seed": -3}, "seed", "[0, 2^63-1]"),
        ({"seed": 2**63}, "seed", "[0, 2^63-1]"),
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


HUGE = "1" + "0" * 400  # 10**400: no float holds it
DIGITS = "9" * 5000  # more digits than Python converts to an int by default


@pytest.mark.parametrize(
    ("text", "field", "allowed"),
    [
        ('{"temperature": ' + HUGE + '}', "temperature", "finite number >= 0"),
        ('{"top_p": ' + HUGE + '}', "top_p", "finite number in (0, 1]"),
        ('{"deadline": ' + HUGE + '}', "deadline", "finite number > 0"),
        ('{"temperature": 1e999}', "temperature", "finite number >= 0"),
        ('{"max_tokens": ' + HUGE + '}', "max_tokens", "integer in [1, 1024]"),
        ('{"seed": ' + HUGE + '}', "seed", "[0, 2^63-1]"),
        ('{"n": ' + HUGE + '}', "n", "[1, 4]"),
        ('{"max_tokens": "' + DIGITS + '"}', "max_tokens", "integer in [1, 1024]"),
        ('{"temperature": "' + HUGE + '"}', "temperature", "finite number >= 0"),
        ('{"max_tokens": ' + DIGITS + '}', "max_tokens", "integer in [1, 1024], got an integer of 5000 digits"),
        ('{"stop": ' + ("[" * 100_000 + "]" * 100_000) + '}', "sampling_parameters", "at most"),
        ('{"stop": ' + ("[" * 5000 + "]" * 5000) + '}', "sampling_parameters", "nested too deep"),
        ('{"stop": "' + ("x" * 300) + '"}', "stop", "at most 256 characters"),
        (json.dumps({"stop": "x" * 20_000}), "sampling_parameters", "at most 16384 bytes"),
    ],
    ids=[
        "temperature-10e400", "top_p-10e400", "deadline-10e400", "temperature-1e999", "max_tokens-10e400",
        "seed-10e400", "n-10e400", "quoted-5000-digits", "quoted-10e400", "5000-digits", "oversized-nesting",
        "deep-nesting", "long-stop", "oversized",
    ],
)
def test_values_no_number_or_parser_can_hold_get_the_field_error(text, field, allowed):
    with pytest.raises(InvalidRequest) as err:
        parse_sampling_params(text, prompt_tokens=10, limits=LIMITS)
    message = str(err.value)
    assert message.startswith(field) or f"; {field}" in message, message
    assert allowed in message, message
    assert len(message) < 300, message  # the client's value is described, not echoed


NUMERIC_FIELDS = ("max_tokens", "min_tokens", "n", "temperature", "top_p", "top_k", "no_repeat_ngram_size",
                  "seed", "deadline")  # fmt: skip


@pytest.mark.parametrize("quoted", [False, True], ids=["number", "quoted"])
@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_an_integer_of_5000_digits_in_any_numeric_field_gets_that_fields_range(field, sign, quoted):
    """Reported: CPython's "Exceeds the limit (4300 digits) ... sys.set_int_max_str_digits()" advice
    reached clients, naming no field."""
    number = sign + "9" * 5000
    text = f'{{"{field}": ' + (f'"{number}"' if quoted else number) + "}"
    with pytest.raises(InvalidRequest) as err:
        parse_sampling_params(text, prompt_tokens=10, limits=LIMITS)
    assert err.value.errors == [err.value.errors[0]]  # one problem: that field
    message = err.value.errors[0]
    assert message.startswith(f"{field}: must be "), message
    assert message.endswith("got an integer of 5000 digits"), message
    assert "set_int_max_str_digits" not in message and "Exceeds the limit" not in message
    if field in int_bounds(LIMITS):
        assert show_range(*int_bounds(LIMITS)[field]) in message


NOTES = {"min_tokens": " and <= max_tokens", "top_k": " (0 disables top-k)", "no_repeat_ngram_size": " (0 disables it)"}


def test_the_integer_bounds_are_the_last_values_accepted():
    for field, (low, high) in int_bounds(LIMITS).items():
        given = {"max_tokens": high} if field == "min_tokens" else {}
        for value in (low, high):
            params = parse_sampling_params(json.dumps({**given, field: value}), prompt_tokens=0, limits=LIMITS)
            assert getattr(params, field) == value
        for value in (low - 1, high + 1):
            with pytest.raises(InvalidRequest) as err:
                parse_sampling_params(json.dumps({**given, field: value}), prompt_tokens=0, limits=LIMITS)
            rule = f"must be an integer in {show_range(low, high)}{NOTES.get(field, '')}"
            assert err.value.errors == [f"{field}: {rule}, got {value}"]


README = Path(__file__).parents[2] / "README.md"


@pytest.mark.parametrize("field", ["max_tokens", "top_k", "no_repeat_ngram_size", "seed"])
def test_the_readme_states_the_bounds_the_code_enforces(field):
    text = README.read_text(encoding="utf-8")
    table = text[text.index("`sampling_parameters` (the thesis's Table 4.1") :].split("\n\n")[1]
    rows = [line for line in table.splitlines() if line.startswith(f"| `{field}` |")]
    assert len(rows) == 1, rows
    allowed = rows[0].split("|")[3]
    assert show_range(*int_bounds(Limits())[field]) in allowed, allowed


def test_the_prompt_bound_is_what_the_longest_token_makes_of_the_context():
    from triton_backend.tokenizer import token_bytes

    assert Limits().max_token_bytes == max(len(piece) for piece in token_bytes())
