"""`Scheduler.advance` (the simulator's update: one token for every row, no update built) moves the
scheduler exactly as `update_from_output` does: the same schedules step after step, the same ends,
pages and admissions, where choices stop early and the pool holds only some requests at once."""

from __future__ import annotations

import pytest
from scheduler_testkit import TOKEN, make_request, make_scheduler, predicting, sampled, sampling

from triton_backend.scheduler import Schedule, Scheduler
from triton_backend.sequence import Request


def shape(schedule: Schedule) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int, int]]]:
    return (
        [(seq.request_id, seq.index, len(seq.token_ids)) for seq in schedule.decode],
        [(c.request.request_id, c.start, c.end, len(c.samples)) for c in schedule.prefill],
    )


def requests() -> list[Request]:
    """Choices of different lengths (the short ones stopped), more than the pool holds at once."""
    return [make_request(f"r{i}", prompt=10 + 7 * i, max_tokens=24, n=1 + i % 3) for i in range(8)]


def stop_at(request: Request, index: int) -> int:
    """Where a choice stops: short of max_tokens for every choice but the first."""
    return request.params.max_tokens - 5 * index


def run(scheduler: Scheduler, through_advance: bool) -> list[tuple[object, ...]]:
    owned = {r.request_id: r for r in requests()}
    for request in owned.values():
        scheduler.add_request(request)
    timeline = []
    while scheduler.has_work:
        schedule = scheduler.schedule()
        rows = sampling(schedule)
        stops = {seq for seq in rows if seq.generated + 1 >= stop_at(owned[seq.request_id], seq.index)}
        if through_advance:
            ended = [(seq.request_id, seq.index) for seq in scheduler.advance(schedule, TOKEN, stops)]
        else:
            given = sampled({seq: TOKEN for seq in rows})
            given = type(given)(given.tokens, {(seq.request_id, seq.index) for seq in stops})
            updates = scheduler.update_from_output(schedule, given)
            ended = [
                (u.request_id, i)
                for u in updates
                for i, (ids, reason) in enumerate(zip(u.token_ids, u.finish_reasons, strict=True))
                if ids and reason is not None
            ]
        stats = scheduler.make_stats()
        timeline.append((shape(schedule), ended, stats.kv_pages_used, stats.preemptions, stats.running_requests))
    return timeline


@pytest.mark.parametrize("pages", [64, 12], ids=["roomy pool", "short pool"])
def test_advance_moves_the_scheduler_as_update_from_output_does(pages: int) -> None:
    def build() -> Scheduler:
        return make_scheduler(pages, budget=32, max_num_seqs=8, predictor=predicting(8, requests()))

    by_update, by_advance = run(build(), through_advance=False), run(build(), through_advance=True)
    assert by_advance == by_update
    if pages == 10:
        assert by_update[-1][3] > 0, "the short pool should preempt"
