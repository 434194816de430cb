"""Trace files other than the Azure CSV: JSON lines (Mooncake's traces), timestamps in other units, and
the errors a malformed file gets, each naming its line and what is allowed."""

from __future__ import annotations

import json

import pytest

from nlgsim.trace_rows import TIME_UNITS, read_rows
from nlgsim.workload import load_trace

#: Mooncake's trace format (github.com/kvcache-ai/Mooncake, FAST'25): one object a line, milliseconds.
MOONCAKE = [
    {"timestamp": 0, "input_length": 600, "output_length": 12, "hash_ids": [0, 1]},
    {"timestamp": 1500, "input_length": 300, "output_length": 40, "hash_ids": [2]},
    {"timestamp": 750, "input_length": 100, "output_length": 0, "hash_ids": []},
    {"timestamp": 4000, "input_length": 50, "output_length": 7, "hash_ids": [3]},
]


def write_jsonl(path, objects):
    path.write_text("".join(json.dumps(o) + "\n" for o in objects) + "\n")
    return path


def test_a_mooncake_trace_loads_as_json_lines_with_its_milliseconds(tmp_path):
    path = write_jsonl(tmp_path / "conversation_trace.jsonl", MOONCAKE)
    trace = load_trace(path, time_unit="ms")
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 600, (12,)), (1.5, 300, (40,)), (4.0, 50, (7,)),
    ]  # fmt: skip
    assert trace.changes.no_output == 1  # the row with no output is left out and counted
    in_seconds = load_trace(path)  # read as seconds: a thousand times slower
    assert in_seconds.requests[-1].arrival == pytest.approx(4000.0)


def test_a_csv_with_numeric_timestamps_takes_the_unit_too(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("ts,prompt_tokens,output_tokens\n1000000,10,5\n3500000,20,6\n")
    assert [r[0] for r in read_rows(path, "us")] == [1.0, 3.5]
    assert [r[0] for r in read_rows(path, "ms")] == [1000.0, 3500.0]


def test_json_keys_match_without_case_and_timestamps_may_be_iso_dates(tmp_path):
    path = write_jsonl(tmp_path / "t.ndjson", [
        {"TIMESTAMP": "2023-11-16 18:17:03.5", "ContextTokens": 10, "GeneratedTokens": 3},
        {"TIMESTAMP": "2023-11-16 18:17:05.0", "ContextTokens": 11, "GeneratedTokens": 4},
    ])  # fmt: skip
    rows = read_rows(path, "ms")  # ISO dates carry their own unit
    assert rows[1][0] - rows[0][0] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('{"timestamp": 1, "input_length": 5', r"t.jsonl:2: not a JSON object"),
        ("[1, 2, 3]", r"t.jsonl:2: expected an object with timestamp, input and output keys, got a JSON list"),
        ('{"timestamp": 1, "output_length": 5}', r"t.jsonl:2: no input-token key; name it one of contexttokens"),
        ('{"time": 1, "input": 5, "output": 2.5}', r"t.jsonl:2: cannot read .*token count 2.5: a whole number"),
        ('{"time": true, "input": 5, "output": 2}', r"t.jsonl:2: cannot read .*a number or an ISO date"),
        ('{"time": "NaN", "input": 5, "output": 2}', r"t.jsonl:2: cannot read .*must be finite"),
        ('{"time": 1, "input": -5, "output": 2}', r"t.jsonl:2: input and output tokens must be >= 0"),
    ],
)
def test_a_bad_json_line_is_refused_with_its_number_and_what_is_allowed(tmp_path, line, error):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n' + line + "\n")
    with pytest.raises(ValueError, match=error):
        read_rows(path)


def test_an_empty_json_lines_file_and_an_unknown_unit_are_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match="t.jsonl: empty file; expected one JSON object a line"):
        read_rows(path)
    with pytest.raises(ValueError, match=r"time unit 'min': use one of s, ms, us"):
        read_rows(path, "min")
    assert set(TIME_UNITS) == {"s", "ms", "us"}
