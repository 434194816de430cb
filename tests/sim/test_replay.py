"""The replay client against a real tritonserver (tiny preset): lengths are exact, times are ordered."""

from __future__ import annotations

import pytest

from nlgsim.replay import replay
from nlgsim.workload import Request

pytestmark = pytest.mark.integration


def test_replay_sends_exact_lengths_and_times_every_request(triton_tiny):
    reqs = [Request(0, 0.0, 12, (5,)), Request(1, 0.2, 40, (3, 3)), Request(2, 0.3, 1, (1,))]
    measured = replay(triton_tiny.grpc_url, reqs)
    assert [m.request.id for m in measured] == [0, 1, 2]
    assert [m.input_tokens for m in measured] == [12, 40, 1]
    assert [m.tokens for m in measured] == [[5], [3, 3], [1]]
    for m in measured:
        assert 0 <= m.sent <= m.first <= m.last
        assert m.sent >= m.request.arrival - 0.01
        assert m.per_token == pytest.approx(m.latency / max(m.request.output_tokens))
