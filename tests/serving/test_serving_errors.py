"""Bad input: each request gets an error naming the field; the server keeps serving; it is counted."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from serving_testkit import grpc_generate, metric, scrape, wait_for

pytestmark = pytest.mark.integration

BAD = [
    (None, {"max_tokens": 4}, "text_input: is required"),
    ("", {"max_tokens": 4}, "text_input: must be a non-empty string"),
    (b"\xff\xfe bad bytes", {"max_tokens": 4}, "text_input: must be valid UTF-8"),
    ("hi", "{max_tokens: 4", "sampling_parameters: must be a JSON object"),
    ("hi", {"max_tokens": 4, "beams": 2}, "unknown keys ['beams']"),
    ("hi", {"max_tokens": "many"}, "max_tokens: must be an integer"),
    ("hi", {"temperature": -1}, "temperature: must be a finite number >= 0"),
    ("hi", {"top_p": 0}, "top_p: must be a finite number in (0, 1]"),
    ("hi", {"top_p": 1.01}, "top_p: must be a finite number in (0, 1]"),
    ("hi", {"top_k": -2}, "top_k: must be an integer in [0, 2^63-1]"),
    ("hi", {"top_k": 2**70}, "top_k: must be an integer in [0, 2^63-1] (0 disables top-k), got 1180591620717411303424"),
    ("hi", {"max_tokens": 0}, "max_tokens: must be an integer in [1, 1024]"),
    ("hi", {"max_tokens": 3, "min_tokens": 4}, "min_tokens: must be <= max_tokens"),
    ("hi", {"n": 0}, "n: must be an integer in [1, 8]"),
    ("hi", {"n": 9}, "n: must be an integer in [1, 8]"),
    ("hi " * 600, {"max_tokens": 500}, "the 1024-token context"),
    # Values no number or parser holds: each the usual field error, never the exception's text.
    ("hi", '{"temperature": 1' + "0" * 400 + '}', "temperature: must be a finite number >= 0"),
    ("hi", '{"top_p": 1' + "0" * 400 + '}', "top_p: must be a finite number in (0, 1]"),
    ("hi", '{"deadline": 1' + "0" * 400 + '}', "deadline: must be a finite number > 0"),
    ("hi", '{"max_tokens": ' + "9" * 5000 + "}", "max_tokens: must be an integer in [1, 1024], got an integer of 5"),
    ("hi", '{"seed": 1' + "0" * 5000 + "}", "seed: must be an integer in [0, 2^63-1], got an integer of 5001 digits"),
    ("hi", '{"stop": ' + "[" * 5000 + "]" * 5000 + "}", "sampling_parameters: must be a flat JSON object"),
    ("x" * 200_000, {"max_tokens": 4}, "text_input: at most 131072 bytes"),
]


@pytest.mark.parametrize(("prompt", "sampling", "message"), BAD, ids=[m[:60] for _, _, m in BAD])
def test_bad_input_is_refused_by_name_and_the_server_keeps_serving(triton_tiny, prompt, sampling, message):
    before = metric(scrape(triton_tiny.metrics_url), "nlg_requests_rejected_total")
    refused = grpc_generate(triton_tiny.grpc_url, prompt, sampling)
    assert refused.error is not None and message in refused.error, refused.error
    assert "Traceback" not in refused.error and ".py" not in refused.error and len(refused.error) < 600
    assert refused.finals == 1 and not refused.texts
    served = grpc_generate(triton_tiny.grpc_url, "still here?", {"max_tokens": 3})
    assert served.error is None and sum(served.num_output_tokens) == 3
    assert wait_for(
        lambda: metric(scrape(triton_tiny.metrics_url), "nlg_requests_rejected_total") == before + 1
    )


NUMERIC_FIELDS = ("max_tokens", "min_tokens", "n", "temperature", "top_p", "top_k", "no_repeat_ngram_size",
                  "seed", "deadline")  # fmt: skip


def http_error(http_url: str, body: dict) -> str:
    """The error of a generate_stream request Triton refuses (400, the error as one server-sent event)."""
    request = urllib.request.Request(f"http://{http_url}/v2/models/gpt2/generate_stream",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=120)
    assert refused.value.code == 400
    text = refused.value.read().decode().strip()
    return str(json.loads(text.removeprefix("data: "))["error"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_an_integer_of_5000_digits_is_refused_naming_its_field(triton_tiny, field, protocol):
    """Reported: CPython's "Exceeds the limit (4300 digits) ... sys.set_int_max_str_digits()" advice
    reached clients in place of the field's rule."""
    sampling = '{"%s": %s}' % (field, "9" * 5000)  # noqa: UP031 - the braces of JSON
    if protocol == "grpc":
        error = grpc_generate(triton_tiny.grpc_url, "hi", sampling).error
    else:
        error = http_error(triton_tiny.http_url, {"text_input": "hi", "sampling_parameters": sampling})
    assert error is not None and error.startswith(f"{field}: must be "), error
    assert "got an integer of 5000 digits" in error and "Exceeds" not in error and "set_int" not in error, error
