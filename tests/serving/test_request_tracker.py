"""RequestTracker: the serving statistics one request's outputs make, whatever the engine hands over at once."""

from __future__ import annotations

import pytest

from triton_backend.metrics import Observations, RequestTracker
from triton_backend.outputs import FinishReason, RequestOutput


def output(time: float, tokens: int, total: int, finished: bool = False) -> RequestOutput:
    return RequestOutput(
        request_id="r",
        time=time,
        texts=("x" * tokens,),
        token_ids=(tuple(range(tokens)),),
        total_tokens=(total,),
        finish_reasons=(FinishReason.LENGTH if finished else None,),
        num_input_tokens=4,
        finished=finished,
        arrival=0.0,
    )


def test_tokens_handed_over_together_are_one_gap_each_and_sum_to_the_decode_time():
    into = Observations()
    tracker = RequestTracker()
    tracker.observe(output(0.1, 1, 1), into)  # the first token, from the prompt
    tracker.observe(output(0.2, 1, 2), into)
    tracker.observe(output(0.5, 3, 5, finished=True), into)  # three steps run back to back
    assert into.time_to_first_token == [pytest.approx(0.1)]
    assert len(into.inter_token_latency) == 5 - 1
    assert into.inter_token_latency == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert sum(into.inter_token_latency) == pytest.approx(0.5 - 0.1)
    assert into.time_per_output_token == [pytest.approx(0.5 / 5)]
    assert into.generation_tokens == 5
    assert into.finished == {"length": 1}
