"""One engine as timelines worked out on paper: decode 10 ms + 1 ms/seq, prefill 20 ms + 1 ms/token."""

from __future__ import annotations

import pytest
from sim_testkit import paper_profile, req

from nlgsim.replica import Replica, RequestState


class Engine:
    """Drives one replica the way the simulator does: steps back to back, arrivals between steps."""

    def __init__(self, **profile_args: int) -> None:
        self.done: list[RequestState] = []
        self.replica = Replica(0, paper_profile(**profile_args), lambda s, t: self.done.append(s))
        self.now = 0.0
        self.steps: list[tuple[float, float]] = []

    def run(self, *requests: RequestState) -> None:
        pending = sorted(requests, key=lambda s: s.request.arrival)
        while pending or self.replica.has_work():
            if not self.replica.has_work():
                self.now = max(self.now, pending[0].request.arrival)
            while pending and pending[0].request.arrival <= self.now:
                self.replica.submit(pending.pop(0))
            start = self.now
            self.now = self.replica.start(self.now)
            self.replica.finish(self.now)
            self.steps.append((start, self.now))


def state(i: int, arrival: float, prompt: int = 10, *tokens: int) -> RequestState:
    return RequestState(req(i, arrival, prompt, *tokens))


def test_one_request_prefill_then_one_token_per_step():
    e = Engine()
    a = state(0, 0.0, 10, 3)
    e.run(a)
    # prefill 20 + 10 ms -> first token at 30 ms; two decode steps of 11 ms each.
    assert e.steps == [
        (0.0, pytest.approx(0.030)),
        (pytest.approx(0.030), pytest.approx(0.041)),
        (pytest.approx(0.041), pytest.approx(0.052)),
    ]
    assert a.first_token == pytest.approx(0.030)
    assert a.finish == pytest.approx(0.052)
    assert a.per_token == pytest.approx(0.052 / 3)
    m = e.replica.metrics
    assert (m.time_to_first_token.count, m.request_latency.count, m.time_per_output_token.count) == (1, 1, 1)
    assert m.inter_token_latency.count == 2
    assert m.inter_token_latency.total == pytest.approx(0.022)
    assert (m.prompt_tokens, m.generation_tokens, m.requests_finished) == (10, 3, 1)
    assert (m.requests_running, m.requests_waiting, m.kv_cache_usage) == (0, 0, 0)


def test_a_long_prompt_is_prefilled_in_chunks_of_256_tokens():
    e = Engine()
    a = state(0, 0.0, 600, 1)
    e.run(a)
    # P(256) = 276 ms, then P(512) - P(256) = 256 ms, then P(600) - P(512) = 88 ms.
    assert [round(t1 - t0, 6) for t0, t1 in e.steps] == [0.276, 0.256, 0.088]
    assert a.first_token == a.finish == pytest.approx(0.620)


def test_a_request_arriving_mid_stream_joins_the_running_batch():
    e = Engine()
    a, b = state(0, 0.0, 10, 5), state(1, 0.035, 10, 2)
    e.run(a, b)
    ends = [round(t1, 6) for _, t1 in e.steps]
    # 30: A's first token | 41: A decodes (B not here yet at 30) | 82: A decodes (11) + B prefills (30)
    # | 94: A and B decode together (12) | 105: A alone.
    assert ends == [0.030, 0.041, 0.082, 0.094, 0.105]
    assert b.first_token == pytest.approx(0.082)
    assert b.finish == pytest.approx(0.094)
    assert a.finish == pytest.approx(0.105)
    itl = e.replica.metrics.inter_token_latency
    assert itl.count == 5  # A: 4 decoded tokens, B: 1
    assert itl.total == pytest.approx(0.011 + 0.041 + 2 * 0.012 + 0.011)


def test_choices_share_one_prefill_and_run_as_one_sequence_each():
    e = Engine(max_batch=4)
    a = state(0, 0.0, 10, 2, 3, 3, 4)
    e.run(a)
    assert a.first_token == pytest.approx(0.030)
    # decode steps of 4, 3 (one choice done), 1 sequences: 14, 13, 11 ms
    assert a.finish == pytest.approx(0.030 + 0.014 + 0.013 + 0.011)
    assert a.per_token == pytest.approx(max((0.044) / 2, (0.057) / 3, (0.057) / 3, (0.068) / 4))
    assert e.replica.metrics.time_per_output_token.count == 4
    assert e.replica.metrics.request_latency.count == 1


def test_the_head_of_the_queue_waits_for_room_and_nobody_skips_it():
    e = Engine(max_batch=4)
    a = state(0, 0.0, 10, 5, 5)  # 2 sequences
    b = state(1, 0.001, 10, 2, 2, 2, 2)  # 4 more sequences: waits for A to finish
    c = state(2, 0.002, 10, 2)  # would fit beside A, but queues behind B
    e.run(a, b, c)
    assert b.admitted >= a.finish
    assert c.admitted >= b.admitted
    assert [s.request.id for s in e.done] == [0, 1, 2]


def test_one_token_requests_finish_at_their_first_token():
    e = Engine()
    a = state(0, 0.0, 10, 1)
    e.run(a)
    assert a.first_token == a.finish == pytest.approx(0.030)
    assert (e.replica.has_work(), e.replica.metrics.requests_running, e.replica.outstanding) == (False, 0, 0)


def test_more_choices_than_max_batch_is_an_error_that_names_the_profile_field():
    e = Engine(max_batch=2)
    named = r"request 0: n: 3 is above this instance's max_num_seqs \(the profile's max_batch\)"
    with pytest.raises(ValueError, match=named):
        e.replica.submit(state(0, 0.0, 10, 2, 2, 2))


def test_gauges_while_busy():
    e = Engine(max_batch=2)
    r = e.replica
    for s in (state(0, 0.0, 10, 9), state(1, 0.0, 10, 9), state(2, 0.0, 10, 9)):
        r.submit(s)
    r.finish(r.start(0.0))  # two admitted (prefill 0.030 + 0.030), the third waits
    assert (r.metrics.requests_running, r.metrics.requests_waiting) == (2, 1)
    # 10 prompt tokens cached each, in pages of 16: a page each, of 2 x 64 (room for max_batch full
    # contexts); the engine reports pages held, not tokens
    assert r.metrics.kv_cache_usage == pytest.approx(2 / 128)


@pytest.mark.parametrize(("cost_context", "priced_at"), [("mean", 55), ("max", 100)])
def test_decode_step_is_priced_at_the_mean_or_the_longest_context(cost_context, priced_at):
    """decode(b, c) = 10 ms + 1 us x b x c. After one prefill step, two choices decode together at
    contexts 10 and 100: the graph path pays for their mean, the eager path pads the short one to the
    longest."""
    from dataclasses import replace

    from nlgsim.profile import linear_profile

    profile = linear_profile(
        step_base_s=0.010, step_per_seq_s=0.0, step_per_ctx_token_s=0.000001,
        prefill_base_s=0.0, prefill_per_token_s=0.0, max_batch=2,
    )  # fmt: skip
    replica = Replica(0, replace(profile, extra={"decode_cost_context": cost_context}), lambda s, t: None)
    replica.submit(RequestState(req(0, 0.0, 9, 4)))
    replica.submit(RequestState(req(1, 0.0, 99, 4)))
    prefilled = replica.start(0.0)
    replica.finish(prefilled)
    assert replica.start(prefilled) - prefilled == pytest.approx(0.010 + 0.000001 * 2 * priced_at)
