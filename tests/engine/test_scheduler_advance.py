"""A lazy scheduler (`Scheduler(lazy=True)`, stepped through `advance`, the simulator's update: lengths
counted, not kept) moves exactly as the engine's eager one stepped through `update_from_output`: the
same batches step after step, the same ends, pages (page for page), admissions and preemptions, where
choices stop early and the pool holds only some requests at once; and its run-ahead
(`run_decode_steps`) leaves it as stepping does. The lazy one is given its requests as the simulator
builds them: prompt lengths without token ids (`Request.counted`)."""

from __future__ import annotations

import pytest
from scheduler_testkit import TOKEN, make_request, make_scheduler, predicting, sampled, sampling

from triton_backend.scheduler import Schedule, Scheduler
from triton_backend.sequence import Request


def requests() -> list[Request]:
    """Choices of different lengths (the short ones stopped), more than the pool holds at once."""
    return [make_request(f"r{i}", prompt=10 + 7 * i, max_tokens=40, n=1 + i % 3) for i in range(8)]


def stop_at(request: Request, index: int) -> int:
    """Where a choice stops (its EOS): short of max_tokens for every choice but the first, which ends
    at max_tokens."""
    return request.params.max_tokens - 5 * index


def shape(schedule: Schedule) -> tuple[object, ...]:
    if schedule.decode:  # the eager scheduler's rows, counted as the lazy one counts them
        decode = (len(schedule.decode), sum(len(seq.token_ids) for seq in schedule.decode))
    else:
        decode = (schedule.decode_count, schedule.decode_context)
    prefill = [(c.request.request_id, c.start, c.end, len(c.samples)) for c in schedule.prefill]
    return decode, prefill


def held(scheduler: Scheduler, owned: dict[str, Request]) -> list[tuple[object, ...]]:
    """Every choice's count, pages and status: the pages themselves, not only how many."""
    return [
        (seq.request_id, seq.index, scheduler.generated(seq), tuple(seq.pages), seq.finish_reason, r.status)
        for r in owned.values()
        for seq in r.sequences
    ]


def added(scheduler: Scheduler, lazy: bool) -> dict[str, Request]:
    """`requests()` added to `scheduler`, as the simulator adds them where it is lazy; by id."""
    owned = {r.request_id: r for r in requests()}
    if lazy:
        owned = {k: Request.counted(k, r.prompt_tokens, r.params, r.arrival) for k, r in owned.items()}
    for request in owned.values():
        scheduler.add_request(request)
        if lazy:
            for seq in request.sequences:
                if seq.index:
                    scheduler.expect_stop(seq, stop_at(request, seq.index))
    return owned


def run(scheduler: Scheduler, lazy: bool, ahead: int = 1) -> list[tuple[object, ...]]:
    """The timeline; `ahead`: a lazy run takes up to that many decode-only steps at once, and the
    timeline shows each step's state as stepping would (the steps run at once in one entry)."""
    owned = added(scheduler, lazy)
    timeline = []
    while scheduler.has_work:
        schedule = scheduler.schedule()
        planned = shape(schedule)
        steps = 1
        if lazy:
            steps = scheduler.run_decode_steps(schedule, ahead) if ahead > 1 else 0
            ended = [] if steps else [(seq.request_id, seq.index) for seq in scheduler.advance(schedule)]
            steps = max(steps, 1)
        else:
            rows = sampling(schedule)
            stops = {s for s in rows if s.index and s.generated + 1 >= stop_at(owned[s.request_id], s.index)}
            given = sampled({seq: TOKEN for seq in rows})
            given = type(given)(given.tokens, {(seq.request_id, seq.index) for seq in stops})
            updates = scheduler.update_from_output(schedule, given)
            ended = [
                (u.request_id, i)
                for u in updates
                for i, (ids, reason) in enumerate(zip(u.token_ids, u.finish_reasons, strict=True))
                if ids and reason is not None
            ]
        assert scheduler._outstanding == scheduler._outstanding_pages(), "the count admission reads"
        assert scheduler.gauges() == (scheduler.num_running, scheduler.num_waiting, scheduler.kv_pages_used)
        stats = scheduler.make_stats()
        entry = (ended, held(scheduler, owned), stats.kv_pages_used, stats.preemptions, stats.running_requests)
        timeline.append((steps, planned, *entry))
    return timeline


def build(pages: int, lazy: bool) -> Scheduler:
    return make_scheduler(pages, budget=32, max_num_seqs=8, predictor=predicting(8, requests()), lazy=lazy)


@pytest.mark.parametrize("pages", [64, 16], ids=["roomy pool", "short pool"])
def test_the_lazy_scheduler_moves_as_the_eager_one_does(pages: int) -> None:
    eager, lazy = run(build(pages, False), lazy=False), run(build(pages, True), lazy=True)
    assert lazy == eager
    if pages == 16:
        assert eager[-1][5] > 0, "the short pool should preempt"


@pytest.mark.parametrize("pages", [64, 16], ids=["roomy pool", "short pool"])
def test_steps_run_at_once_end_where_stepping_does(pages: int) -> None:
    stepped = run(build(pages, True), lazy=True)
    ahead = run(build(pages, True), lazy=True, ahead=100)
    assert any(entry[0] > 1 for entry in ahead), "some steps should run at once"
    # Each run-ahead entry stands for its steps; the state after it is the stepped state after them.
    i = 0
    for steps, _, ended, state, used, preempted, running in ahead:
        i += steps
        assert stepped[i - 1][2:] == (ended, state, used, preempted, running)
    assert i == len(stepped)


@pytest.mark.parametrize("pages", [64, 16], ids=["roomy pool", "short pool"])
def test_a_decode_step_scheduled_again_is_the_one_stepping_plans(pages: int) -> None:
    """The simulator's run-ahead keeps the step after the run in progress: it takes back all but the
    last step that fits and has the scheduler make the step's schedule again. That schedule plans what
    stepping plans there, and the steps after it end as stepping's do."""
    stepped = run(build(pages, True), lazy=True)
    scheduler = build(pages, True)
    owned = added(scheduler, lazy=True)
    step, again = 0, 0
    schedule = scheduler.schedule()
    while True:
        assert shape(schedule) == stepped[step][1], step
        fit = scheduler.decode_steps_that_fit(schedule, 100)
        if fit >= 2:
            scheduler.take_back_decode_steps(schedule, fit - 1)
            step += fit - 1
            scheduler.schedule_decode_again(schedule)
            again += 1
            continue
        ended = [(seq.request_id, seq.index) for seq in scheduler.advance(schedule)]
        assert scheduler._outstanding == scheduler._outstanding_pages()
        stats = scheduler.make_stats()
        state = (ended, held(scheduler, owned), stats.kv_pages_used, stats.preemptions, stats.running_requests)
        assert stepped[step][2:] == state, step
        step += 1
        if not scheduler.has_work:
            break
        schedule = scheduler.schedule()
    assert step == len(stepped)
    assert again > 3, "some decode steps should be scheduled again"


@pytest.mark.parametrize("pages", [64, 16], ids=["roomy pool", "short pool"])
def test_whether_a_step_ends_a_choice_is_known_before_it_is_taken_back(pages: int) -> None:
    """`ends_a_choice` says, before `advance`, whether the step ends a choice: a decoding one at its
    length or one whose prompt the step completes (a choice of one token), preempted entries skipped."""
    scheduler = build(pages, True)
    added(scheduler, lazy=True)
    one = make_request("one token", prompt=20, max_tokens=1, n=2)
    scheduler.add_request(Request.counted(one.request_id, one.prompt_tokens, one.params, one.arrival))
    said, ended = [], []
    while scheduler.has_work:
        schedule = scheduler.schedule()
        said.append(scheduler.ends_a_choice(schedule))
        ended.append(bool(scheduler.advance(schedule)))
    assert said == ended
    assert 0 < sum(ended) < len(ended)
    assert "one token" not in scheduler.requests


def test_the_eager_scheduler_refuses_a_request_without_its_prompts_tokens() -> None:
    counted = Request.counted("r0", 10, requests()[0].params, 0.0)
    with pytest.raises(ValueError, match="Request.counted"):
        build(64, False).add_request(counted)


def test_a_lazy_scheduler_refuses_the_eager_update_and_the_eager_one_the_lazy() -> None:
    lazy, eager = build(64, True), build(64, False)
    with pytest.raises(RuntimeError, match="advance"):
        lazy.update_from_output(lazy.schedule(), sampled({}))
    with pytest.raises(RuntimeError, match="update_from_output"):
        eager.advance(eager.schedule())
