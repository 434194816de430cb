"""Workloads: the thesis's query types, CSV traces and how lengths are fitted into GPT-2's context."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlgsim.workload import COMPLEX, SIMPLE, LengthMap, load_trace, thesis_requests

TRACES = Path("/work/shared/traces")


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


def test_same_seed_same_requests_other_seed_other_requests():
    assert thesis_requests(COMPLEX, 5.0, 50, seed=3) == thesis_requests(COMPLEX, 5.0, 50, seed=3)
    assert thesis_requests(COMPLEX, 5.0, 50, seed=3) != thesis_requests(COMPLEX, 5.0, 50, seed=4)


@pytest.mark.parametrize(
    ("mapping", "prompt", "output", "want"),
    [
        ("clip", 100, 20, (100, 20)),
        ("clip", 5000, 20, (1004, 20)),  # prompt cut to 1024 - output
        ("clip", 5000, 900, (512, 512)),  # output capped at 512 first
        ("scale:0.125", 4000, 20, (500, 20)),
        ("scale:0.125", 4, 20, (1, 20)),  # at least one token
        ("scale:0.5", 4000, 100, (924, 100)),  # scaled to 2000, then clipped
        ("scale", 800, 10, (100, 10)),  # scale alone is 1/8
    ],
    ids=["fits", "clip-prompt", "clip-output", "scale", "scale-min-1", "scale-then-clip", "default-factor"],
)
def test_length_maps(mapping, prompt, output, want):
    assert LengthMap.parse(mapping).apply(prompt, output) == want


@pytest.mark.parametrize("bad", ["cut", "scale:0", "scale:2", "clip:3"])
def test_length_map_errors_say_what_is_allowed(bad):
    with pytest.raises(ValueError, match="clip' or 'scale:F'|factor must be in"):
        LengthMap.parse(bad)


def test_any_csv_with_time_input_and_output_columns(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n12.5,100,7\n10.0,50,3\n11.0,2000,40\n")
    trace = load_trace(path, LengthMap.parse("clip"))
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 50, (3,)),
        (1.0, 984, (40,)),
        (2.5, 100, (7,)),
    ]
    assert trace.prompts_clipped == 1 and trace.outputs_clipped == 0
    fast = load_trace(path, LengthMap.parse("clip"), speed=2.0, start=0.5)
    assert [r.arrival for r in fast.requests] == [0.25, 1.0]


def test_a_csv_without_the_columns_names_the_accepted_names(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("when,input_tokens,output_tokens\n1,2,3\n")
    with pytest.raises(ValueError, match="no timestamp column; name it one of timestamp"):
        load_trace(path)


@pytest.mark.skipif(not TRACES.exists(), reason="needs ../shared/traces")
def test_azure_trace_window():
    trace = load_trace(TRACES / "azure2023_code.csv", LengthMap.parse("scale:0.125"), duration=60)
    assert trace.requests[0].arrival == 0.0
    assert trace.duration < 60
    assert all(r.prompt_tokens + r.output_tokens[0] <= 1024 for r in trace.requests)
    assert "prompt x 0.125" in trace.mapping


def test_a_ramp_rises_linearly_then_holds_the_rate():
    reqs = thesis_requests(SIMPLE, rate=10.0, count=6000, seed=2, ramp_s=200.0)
    arrivals = np.array([r.arrival for r in reqs])
    assert len(reqs) == 6000
    # 10 req/s x 200 s / 2 = 1000 expected during the ramp, a quarter of them in its first half.
    assert (arrivals < 200).sum() == pytest.approx(1000, rel=0.08)
    assert (arrivals < 100).sum() == pytest.approx(250, rel=0.15)
    assert np.diff(arrivals[arrivals > 200]).mean() == pytest.approx(0.1, rel=0.05)
