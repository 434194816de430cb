"""The scheduler's plan, from states built by hand: what it must do where the engine's own runs give
no easy way to arrive (a randomized engine stress never reached these states)."""

from __future__ import annotations

import pytest
import torch

from triton_backend.detokenizer import TextStream
from triton_backend.kv_cache import CacheShape, PagedKVCache
from triton_backend.length_predictor import LengthPredictor
from triton_backend.sampler import SamplingState
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Scheduler, SchedulerConfig
from triton_backend.sequence import Request, Sequence

PAGE = 16


def request(name: str, prompt: int, cached: int, pages: list[int]) -> Request:
    params = SamplingParams(max_tokens=8, temperature=0.0)
    made = Request(name, list(range(prompt)), params, arrival=0.0, predicted_tokens=8)
    state = SamplingState(params, None, list(range(prompt)), 0)
    made.sequences.append(Sequence(0, state, TextStream([b"x"] * 64, ()), pages=pages, cached=cached))
    return made


@pytest.mark.parametrize(
    ("first", "later", "budget", "first_planned"),
    [
        # The first needs a page, the cache is full, and the later one holds one: the later one is
        # preempted to make room, and must not then be planned (its chunk would run for a request that
        # is back in the queue, and its prefill_finished would find it in no list).
        ((40, 32, 2), (20, 16, 1), 64, (32, 40)),
        # The same with the budget spent on the first: nothing to plan after it anyway.
        ((40, 32, 2), (20, 16, 1), 8, (32, 40)),
        # The first alone can go on: its own page is freed by nobody, so it preempts itself.
        ((40, 32, 2), (20, 0, 0), 64, None),
    ],
    ids=["later-holds-a-page", "budget-spent-on-first", "later-holds-nothing"],
)
def test_a_request_preempted_to_make_room_is_not_planned(first, later, budget, first_planned):
    shape = CacheShape(n_layer=1, n_head=1, head_dim=4, max_len=64, dtype=torch.float32, page_size=PAGE)
    cache = PagedKVCache(shape, 4, torch.device("cpu"))
    pages = [cache.allocate() for _ in range(cache.free_pages)]  # every page in use
    a = request("a", first[0], first[1], pages[: first[2]])
    b = request("b", later[0], later[1], pages[first[2] : first[2] + later[2]])
    scheduler = Scheduler(SchedulerConfig(prefill_chunk_tokens=budget, max_num_seqs=4), cache, LengthPredictor())
    scheduler.prefilling = [a, b]
    plan = scheduler.schedule()
    assert b in plan.preempted and b not in scheduler.prefilling
    assert all(chunk.request in scheduler.prefilling for chunk in plan.prefill), plan.prefill
    planned = [(chunk.start, chunk.end) for chunk in plan.prefill if chunk.request is a]
    assert planned == ([first_planned] if first_planned else [])
    for chunk in plan.prefill:  # as the engine reports the step's work done
        if chunk.last:
            scheduler.prefill_finished(chunk.request)
