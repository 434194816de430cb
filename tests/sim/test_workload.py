"""Workloads: the thesis's query types, CSV traces and how lengths are fitted into GPT-2's context."""

from __future__ import annotations

import random
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from nlgsim.workload import (
    COMPLEX,
    LENGTH_STRATEGIES,
    SIMPLE,
    LengthMap,
    MappingCounts,
    QueryType,
    load_trace,
    thesis_requests,
)

TRACES = Path(__file__).resolve().parents[2] / "benchmarks" / "traces"


@pytest.mark.parametrize("query", [SIMPLE, COMPLEX], ids=["simple", "complex"])
def test_table_4_2_statistics(query):
    reqs = thesis_requests(query, rate=10.0, count=4000, seed=1)
    lengths = np.array([n for r in reqs for n in r.output_tokens])
    assert {r.prompt_tokens for r in reqs} == {query.prompt_tokens}
    assert {r.choices for r in reqs} == {query.choices}
    assert lengths.min() == query.gen_min
    assert lengths.max() == query.gen_max
    assert lengths.mean() == pytest.approx(query.gen_mean, abs=0.3)
    gaps = np.diff([r.arrival for r in reqs])
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)  # Poisson at 10 req/s


@pytest.mark.parametrize("query", [SIMPLE, COMPLEX], ids=["simple", "complex"])
def test_a_live_request_draws_its_one_length_by_the_same_table(query):
    rng = random.Random(0)
    drawn = [query.draw_max_tokens(rng) for _ in range(20000)]
    assert min(drawn) == query.gen_min
    assert max(drawn) == query.gen_max
    assert statistics.mean(drawn) == pytest.approx(query.gen_mean, abs=0.5)


def test_a_query_of_one_length_always_draws_it():
    fixed = QueryType("fixed", prompt_tokens=8, gen_mean=20, gen_min=20, gen_max=20, choices=2)
    assert {fixed.draw_max_tokens(random.Random(s)) for s in range(50)} == {20}
    assert {n for r in thesis_requests(fixed, 5.0, 20, seed=0) for n in r.output_tokens} == {20}


def test_same_seed_same_requests_other_seed_other_requests():
    assert thesis_requests(COMPLEX, 5.0, 50, seed=3) == thesis_requests(COMPLEX, 5.0, 50, seed=3)
    assert thesis_requests(COMPLEX, 5.0, 50, seed=3) != thesis_requests(COMPLEX, 5.0, 50, seed=4)


@pytest.mark.parametrize(
    ("mapping", "prompt", "output", "want"),
    [
        ("refuse", 100, 20, (100, 20)),
        ("refuse", 1010, 20, None),  # does not fit: refused
        ("drop", 1004, 20, (1004, 20)),  # exactly fits
        ("drop", 1005, 20, None),
        ("clip", 100, 20, (100, 20)),
        ("clip", 5000, 20, (1004, 20)),  # the output kept, the prompt cut to what is left
        ("clip", 5000, 900, (124, 900)),
        ("clip", 10, 5000, (1, 1023)),  # an output longer than the context is capped, one prompt token
        ("scale:0.125", 4000, 20, (500, 20)),
        ("scale:0.125", 4, 20, (1, 20)),  # at least one token
        ("scale:0.5", 4000, 100, (924, 100)),  # scaled to 2000, then clipped
    ],
    ids=[
        "refuse-fits", "refuse", "drop-fits", "drop", "clip-fits", "clip-prompt", "clip-long-output",
        "clip-output-over-context", "scale", "scale-min-1", "scale-then-clip",
    ],
)  # fmt: skip
def test_length_maps(mapping, prompt, output, want):
    assert LengthMap.parse(mapping).apply(prompt, output) == want


@pytest.mark.parametrize("bad", ["cut", "scale", "scale:0", "scale:2", "scale:x", "clip:3", "drop:1"])
def test_length_map_errors_name_the_flag_and_the_strategies(bad):
    with pytest.raises(ValueError, match="--map-lengths") as e:
        LengthMap.parse(bad)
    assert "scale:0.125" in str(e.value)


def test_the_documented_strategies_are_the_codes():
    doc = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text()
    section = doc.split("### Fitting lengths into the context")[1].split("\n#")[0]
    table = re.findall(r"^\| `([a-z:F]+)` \| (.+) \|$", section, re.M)
    assert {name for name, _ in table} == set(LENGTH_STRATEGIES)
    for name, text in table:
        assert text == LENGTH_STRATEGIES[name]


def _long_trace(tmp_path: Path) -> Path:
    """Six requests: three fit GPT-2's 1,024 tokens as they are, three do not."""
    path = tmp_path / "long.csv"
    path.write_text(
        "timestamp,input_tokens,output_tokens\n"
        "0,100,10\n1,3000,5\n2,900,100\n3,1000,24\n4,8000,2\n5,500,2000\n"
    )
    return path


def test_a_trace_that_does_not_fit_is_refused_by_default_with_the_count_and_the_flag(tmp_path):
    with pytest.raises(ValueError) as e:
        load_trace(_long_trace(tmp_path))
    message = str(e.value)
    assert "3 of 6 requests do not fit the model's 1024-token context" in message
    assert "--map-lengths clip, scale:F or drop" in message
    assert str(tmp_path) not in message  # the file's name, not where it lies
    # A window that fits loads as it is.
    trace = load_trace(_long_trace(tmp_path), duration=1.0)
    assert [(r.prompt_tokens, r.output_tokens) for r in trace.requests] == [(100, (10,))]
    assert trace.changes == MappingCounts(read=1)


@pytest.mark.parametrize(
    ("mapping", "want", "counts"),
    [
        ("drop", [(100, 10), (900, 100), (1000, 24)], MappingCounts(read=6, dropped=3)),
        (
            "clip",
            [(100, 10), (1019, 5), (900, 100), (1000, 24), (1022, 2), (1, 1023)],
            MappingCounts(read=6, prompts_clipped=3, outputs_capped=1),
        ),
        (
            "scale:0.25",
            [(25, 10), (750, 5), (225, 100), (250, 24), (1022, 2), (1, 1023)],
            MappingCounts(read=6, scaled=6, prompts_clipped=2, outputs_capped=1),
        ),
    ],
    ids=["drop", "clip", "scale"],
)
def test_each_strategy_reports_what_it_changed(tmp_path, mapping, want, counts):
    trace = load_trace(_long_trace(tmp_path), LengthMap.parse(mapping))
    assert [(r.prompt_tokens, r.output_tokens[0]) for r in trace.requests] == want
    assert [r.id for r in trace.requests] == list(range(len(want)))
    assert trace.changes == counts
    assert f"--map-lengths {mapping}" in trace.mapping


def test_any_csv_with_time_input_and_output_columns(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n12.5,100,7\n10.0,50,3\n11.0,2000,40\n")
    trace = load_trace(path, LengthMap.parse("clip"))
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 50, (3,)),
        (1.0, 984, (40,)),
        (2.5, 100, (7,)),
    ]
    assert trace.changes.prompts_clipped == 1 and trace.changes.outputs_capped == 0
    fast = load_trace(path, LengthMap.parse("clip"), speed=2.0, start=0.5)
    assert [r.arrival for r in fast.requests] == [0.25, 1.0]


def test_a_csv_without_the_columns_names_the_accepted_names(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("when,input_tokens,output_tokens\n1,2,3\n")
    with pytest.raises(ValueError, match="no timestamp column; name it one of timestamp"):
        load_trace(path)


def test_azure_trace_window():
    with pytest.raises(ValueError, match="requests do not fit"):
        load_trace(TRACES / "azure2023_code.csv", duration=60)
    trace = load_trace(TRACES / "azure2023_code.csv", LengthMap.parse("scale:0.125"), duration=60)
    assert trace.requests[0].arrival == 0.0
    assert trace.duration < 60
    assert all(r.prompt_tokens + r.output_tokens[0] <= 1024 for r in trace.requests)
    assert trace.changes.scaled == trace.changes.read == len(trace.requests)


def test_a_ramp_rises_linearly_then_holds_the_rate():
    reqs = thesis_requests(SIMPLE, rate=10.0, count=6000, seed=2, ramp_s=200.0)
    arrivals = np.array([r.arrival for r in reqs])
    assert len(reqs) == 6000
    # 10 req/s x 200 s / 2 = 1000 expected during the ramp, a quarter of them in its first half.
    assert (arrivals < 200).sum() == pytest.approx(1000, rel=0.08)
    assert (arrivals < 100).sum() == pytest.approx(250, rel=0.15)
    assert np.diff(arrivals[arrivals > 200]).mean() == pytest.approx(0.1, rel=0.05)


def test_a_burstgpt_trace_loads_and_its_failed_requests_are_left_out_and_counted(tmp_path):
    # BurstGPT's columns; its failures are logged with 0 response tokens and put no decoding load.
    path = tmp_path / "BurstGPT_1.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    trace = load_trace(path, LengthMap.parse("clip"))
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 472, (18,)), (113.0, 417, (276,)),
    ]  # fmt: skip
    assert trace.changes.read == 3 and trace.changes.no_output == 1
    assert "1 rows without output or prompt tokens left out" in trace.changes.describe()
    assert "left out" not in MappingCounts(read=3).describe()


def test_a_negative_token_count_is_refused_with_its_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n0,10,5\n1,-3,5\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: input and output tokens must be >= 0"):
        load_trace(path)


def test_the_docs_name_every_column_a_trace_may_use():
    from nlgsim.trace_rows import INPUT_COLUMNS, OUTPUT_COLUMNS, TIME_COLUMNS

    row = next(
        line for line in (Path(__file__).parents[2] / "docs" / "simulator.md").read_text().splitlines()
        if line.startswith("| `trace:PATH`")
    )  # fmt: skip
    named = {name.lower() for name in re.findall(r"`([^`]+)`", row)}
    assert set(TIME_COLUMNS) | set(INPUT_COLUMNS) | set(OUTPUT_COLUMNS) <= named
