"""Fleet-scale workloads: a trace at K times its rate keeps its shape and its bursts (FleetScale)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from nlgsim.cli import main
from nlgsim.experiment import parse_workload
from nlgsim.profile import load_profile
from nlgsim.workload import FleetScale, Request

H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
CODE = "trace:benchmarks/traces/azure2023_code.csv"


def _trace(scale: FleetScale | None = None) -> list[Request]:
    return parse_workload(CODE, load_profile(H100), lengths="scale:0.125", scale=scale).requests


def test_scale_one_is_the_trace_as_it_is():
    assert _trace(FleetScale(1)) == _trace()


def test_every_request_is_replicated_k_times_each_copy_within_the_jitter():
    trace = _trace()
    scaled = FleetScale(10, jitter_s=2.0, seed=7).apply(trace)
    assert len(scaled) == 10 * len(trace)
    assert [r.id for r in scaled] == list(range(len(scaled)))
    assert all(a.arrival <= b.arrival for a, b in zip(scaled, scaled[1:], strict=False))
    lengths = Counter((r.prompt_tokens, r.output_tokens) for r in trace)
    assert Counter((r.prompt_tokens, r.output_tokens) for r in scaled) == Counter(
        {k: 10 * n for k, n in lengths.items()}
    )
    # Each copy arrives in [original, original + jitter): the sorted copies of a length pair fall
    # behind its originals by no more than the jitter.
    first = min(r.arrival for r in trace)
    last = max(r.arrival for r in trace)
    assert first <= scaled[0].arrival < first + 2.0 and last <= scaled[-1].arrival < last + 2.0


def test_the_bursts_stay_k_times_the_traces_second_by_second():
    """Per 30 s the scaled count is K times the trace's, up to the copies that the jitter carries over
    an edge; the swings (coefficient of variation per 10 s) are the trace's, not flattened."""
    trace = _trace()
    k = 10
    scaled = FleetScale(k, jitter_s=2.0, seed=0).apply(trace)
    times = np.array([r.arrival for r in trace])
    got = np.array([r.arrival for r in scaled])
    for lo in np.arange(0.0, times.max(), 30.0):
        hi = lo + 30.0
        surely = np.count_nonzero((times >= lo) & (times < hi - 2.0))  # every copy lands inside
        maybe = np.count_nonzero((times >= lo - 2.0) & (times < hi))  # some copy may land inside
        inside = np.count_nonzero((got >= lo) & (got < hi))
        assert k * surely <= inside <= k * maybe
    tens = np.arange(0.0, max(r.arrival for r in scaled) + 10.0, 10.0)
    base = np.histogram([r.arrival for r in trace], tens)[0]
    big = np.histogram([r.arrival for r in scaled], tens)[0]
    assert big.std() / big.mean() == pytest.approx(base.std() / base.mean(), rel=0.1)
    # What superposing shifted copies would do instead: the swings shrink.
    rng = np.random.default_rng(0)
    span = max(r.arrival for r in trace)
    shifted = np.concatenate([(np.array([r.arrival for r in trace]) + rng.uniform(0, span)) % span for _ in range(k)])
    flat = np.histogram(shifted, tens)[0]
    assert flat.std() / flat.mean() < 0.8 * big.std() / big.mean()


def test_same_seed_same_trace_another_seed_another_jitter():
    trace = _trace()[:500]
    assert FleetScale(3, seed=1).apply(trace) == FleetScale(3, seed=1).apply(trace)
    assert FleetScale(3, seed=1).apply(trace) != FleetScale(3, seed=2).apply(trace)


@pytest.mark.parametrize(
    ("factor", "jitter", "message"),
    [
        (0, 2.0, "--scale 0: must be a whole number >= 1"),
        (True, 2.0, "--scale True: must be a whole number >= 1"),
        (2, -1.0, "--scale-jitter -1.0: must be a finite number of seconds >= 0"),
        (2, float("nan"), "--scale-jitter nan"),
    ],
)
def test_bad_scales_are_refused_naming_the_flag(factor, jitter, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        FleetScale(factor, jitter_s=jitter)


def test_the_cli_scales_a_trace_and_says_how(capsys):
    code = main([
        "run", "--profile", H100, "--workload", CODE, "--map-lengths", "scale:0.125", "--duration", "120",
        "--scale", "5", "--scale-seed", "3", "--policy", "fixed:4",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "scaled x5: each request replicated 5 times" in out and "(seed 3)" in out


def test_the_cli_refuses_a_scale_for_a_synthetic_workload(capsys):
    code = main(["run", "--profile", H100, "--workload", "complex:1", "--scale", "3", "--policy", "fixed:1"])
    assert code == 2
    assert "--scale 3 applies to a trace" in capsys.readouterr().err


def test_the_docs_state_the_method_and_the_jitters_default():
    from pathlib import Path

    from nlgsim.workload import SCALE_JITTER_S

    text = " ".join((Path(__file__).parents[2] / "docs" / "simulator.md").read_text().split())
    assert f"0-`--scale-jitter` seconds (default {SCALE_JITTER_S:g})" in text
    assert "every request is replicated K times" in text
