"""The scheduler's plans, step by step with no model: admission, prefill chunks, preemption victims,
and a state built by hand that the engine's own runs never reach."""

from __future__ import annotations

import pytest
from scheduler_testkit import make_cache, make_request, make_scheduler, plan, predicting, sampled, statuses, step

from triton_backend.sequence import RequestStatus

PREFILLING, RUNNING, WAITING = RequestStatus.PREFILLING, RequestStatus.RUNNING, RequestStatus.WAITING


# Without history the predictor expects max_tokens, so a choice reserves prompt + max_tokens tokens:
# (10, 6) is one page of 16, (20, 12) two, (30, 18) three.
@pytest.mark.parametrize(
    ("pages", "max_num_seqs", "requests", "admitted"),
    [
        (8, 8, [("a", 10, 6, 1, None), ("b", 20, 12, 1, None)], ["a", "b"]),
        # b's two pages are free, but a has reserved three of the four.
        (4, 8, [("a", 30, 18, 1, None), ("b", 20, 12, 1, None)], ["a"]),
        # c would fit beside a; it does not overtake b, which does not.
        (4, 8, [("a", 30, 18, 1, None), ("b", 40, 8, 1, None), ("c", 5, 5, 1, None)], ["a"]),
        # Four pages for a three-page cache, and nothing admitted: it goes in (its prompt fits).
        (3, 8, [("a", 40, 24, 1, None)], ["a"]),
        # Choices count against max_num_seqs, not requests.
        (16, 3, [("a", 4, 4, 2, None), ("b", 4, 4, 2, None), ("c", 4, 4, 1, None)], ["a"]),
        (16, 1, [("a", 4, 4, 1, None), ("b", 4, 4, 1, 10.0), ("c", 4, 4, 1, 1.0)], ["c"]),
    ],
    ids=[
        "room-for-all",
        "reserved-pages-count",
        "no-overtaking",
        "alone-it-goes-in",
        "choices-count",
        "deadline-first",
    ],
)
def test_admission(pages, max_num_seqs, requests, admitted):
    scheduler = make_scheduler(pages, max_num_seqs=max_num_seqs)
    made = [make_request(name, prompt, max_tokens, n, deadline) for name, prompt, max_tokens, n, deadline in requests]
    for request in made:
        scheduler.add_request(request)
        assert request.status is WAITING
    schedule = scheduler.schedule()
    assert [chunk.request.request_id for chunk in schedule.prefill] == admitted  # in admission order
    want = {r.request_id: PREFILLING if r.request_id in admitted else WAITING for r in made}
    assert statuses(made) == want
    stats = scheduler.make_stats()
    assert (stats.running_requests, stats.waiting_requests) == (len(admitted), len(made) - len(admitted))


def test_a_running_requests_reservation_holds_off_a_newcomer_until_it_finishes():
    scheduler = make_scheduler(4)
    a = make_request("a", 10, max_tokens=30)  # reserves 40 tokens: three pages, of which it holds one
    scheduler.add_request(a)
    step(scheduler)
    b = make_request("b", 20, max_tokens=12)  # two pages: free, but one of them is a's
    scheduler.add_request(b)
    steps = 1
    while a.status is not RequestStatus.FINISHED:
        schedule, _ = step(scheduler)
        steps += 1
        assert schedule.prefill == [], steps
        assert b.status is WAITING
    assert steps == 30  # a's prefill gave its first token, each step after one more
    schedule, _ = step(scheduler)
    assert plan(schedule, [b]) == ([], [("b", 0, 20, 1)])


# (name, prompt, max_tokens, deadline) arriving before step k (from 1); each chunk in a plan is
# (name, start, end, choices that sample from it).
@pytest.mark.parametrize(
    ("budget", "arrivals", "steps"),
    [
        (
            64,
            {1: [("a", 40, 2, 1), ("b", 10, 2, 1)]},
            [([], [("a", 0, 40, 1), ("b", 0, 10, 1)]), (["a", "b"], [])],
        ),
        (
            16,
            {1: [("a", 40, 3, 1), ("b", 10, 2, 1)]},
            [
                ([], [("a", 0, 16, 0)]),
                ([], [("a", 16, 32, 0)]),
                ([], [("a", 32, 40, 1), ("b", 0, 8, 0)]),  # a's last 8 tokens, the budget's rest to b
                (["a"], [("b", 8, 10, 1)]),
                (["a", "b"], []),
            ],
        ),
        (
            64,
            {1: [("a", 20, 2, 3)], 2: [("b", 5, 1, 1)]},
            [([], [("a.0", 0, 20, 3)]), (["a.0", "a.1", "a.2"], [("b", 0, 5, 1)])],
        ),
    ],
    ids=["whole-prompts", "chunks-of-the-budget", "n-choices-prefill-once"],
)
def test_prefill_chunks_and_the_step_a_request_starts_decoding(budget, arrivals, steps):
    scheduler = make_scheduler(32, budget=budget)
    made = []
    got = []
    k = 1
    while scheduler.has_work or k in arrivals:
        for name, prompt, max_tokens, n in arrivals.get(k, []):
            made.append(make_request(name, prompt, max_tokens, n))
            scheduler.add_request(made[-1])
        schedule, _ = step(scheduler)
        got.append(plan(schedule, made))
        k += 1
    assert got == steps
    assert scheduler.make_stats().kv_pages_used == 0


def test_the_other_choices_get_copies_of_the_prompts_pages():
    scheduler = make_scheduler(32, budget=16)
    a = make_request("a", 20, max_tokens=4, n=3)
    scheduler.add_request(a)
    first, *others = a.sequences
    schedule, _ = step(scheduler)
    assert (plan(schedule, [a])[1], schedule.page_copies) == ([("a.0", 0, 16, 0)], [])
    schedule, _ = step(scheduler)
    assert plan(schedule, [a])[1] == [("a.0", 16, 20, 3)]
    assert len(first.pages) == 2 and all(len(seq.pages) == 2 for seq in others)
    # The k-th page of each other choice is a copy of the first choice's k-th: the prompt's positions.
    want = [(first.pages[k], seq.pages[k]) for seq in others for k in range(2)]
    assert schedule.page_copies == want
    assert len({dst for _, dst in schedule.page_copies} | set(first.pages)) == 6  # six distinct pages
    assert [seq.cached for seq in a.sequences] == [20, 20, 20]
    assert [seq.generated for seq in a.sequences] == [1, 1, 1]


# Every request here is predicted to stop after 16 tokens and runs to max_tokens, so each outgrows
# the two pages it reserved when its 33rd token is decoded.
@pytest.mark.parametrize(
    ("budget", "pages", "arrivals", "victim"),
    [
        (64, 6, {1: [("a", 16, 40, None), ("b", 16, 40, None), ("c", 16, 40, None)]}, ("c", 18)),
        # The deadlines admit c, a, b in that order: the latest admitted goes, not the latest to arrive.
        (64, 6, {1: [("a", 16, 40, 2.0), ("b", 16, 40, 3.0), ("c", 16, 40, 1.0)]}, ("b", 18)),
        # c, admitted last, is still prefilling (33 tokens, 16 a step) when b needs a page.
        (16, 7, {1: [("a", 16, 40, None), ("b", 16, 40, None)], 17: [("c", 33, 15, None)]}, ("c", 19)),
    ],
    ids=["latest-admitted", "admission-order-not-arrival", "a-prefilling-request"],
)
def test_the_latest_admitted_request_is_preempted(budget, pages, arrivals, victim):
    made = [
        make_request(name, prompt, max_tokens, deadline=deadline)
        for k in arrivals
        for name, prompt, max_tokens, deadline in arrivals[k]
    ]
    scheduler = make_scheduler(pages, budget=budget, predictor=predicting(16, made))
    by_name = {r.request_id: r for r in made}
    k = 1
    while scheduler.make_stats().preemptions == 0:
        for name, *_ in arrivals.get(k, []):
            scheduler.add_request(by_name[name])
        schedule, _ = step(scheduler)
        assert k < 60, "no preemption"
        k += 1
    preempted = [r.request_id for r in made if r.status is RequestStatus.PREEMPTED]
    assert (preempted, k - 1) == ([victim[0]], victim[1])
    assert by_name[victim[0]].sequences[0] not in schedule.decode
    assert all(chunk.request.status is not RequestStatus.PREEMPTED for chunk in schedule.prefill)


def test_a_preempted_request_goes_first_recomputes_and_loses_no_token():
    made = [make_request(name, 16, max_tokens=40) for name in "abc"]
    # Eight pages: at step 18 each needs its third, two are free, and c, admitted last, gives way. a
    # and b then fit (four pages each at 40 tokens); c needs four more, d one, behind it.
    scheduler = make_scheduler(8, predictor=predicting(16, made))
    a, b, c = made
    for request in made:
        scheduler.add_request(request)
    for _ in range(18):
        step(scheduler)
    assert statuses(made) == {"a": RUNNING, "b": RUNNING, "c": RequestStatus.PREEMPTED}
    assert c.sequences[0].pages == [] and c.sequences[0].generated == 17
    # Its prediction was too short: it comes back against twice what it has generated.
    assert c.predicted_tokens == 34
    d = make_request("d", 4, max_tokens=4, deadline=0.001)  # an earlier deadline than any
    scheduler.add_request(d)
    while a.status is not RequestStatus.FINISHED:
        schedule, _ = step(scheduler)
        assert schedule.prefill == []  # c needs four pages: never free while a and b run
    schedule, _ = step(scheduler)
    # c first, recomputing its 32 tokens before its last (which its next decode step feeds); d after.
    assert plan(schedule, made + [d]) == ([], [("c", 0, 32, 0), ("d", 0, 4, 1)])
    while scheduler.has_work:
        step(scheduler)
    assert [r.sequences[0].generated for r in made + [d]] == [40, 40, 40, 4]
    assert [len(r.sequences[0].token_ids) for r in made] == [16 + 40] * 3
    stats = scheduler.make_stats()
    assert (stats.preemptions, stats.kv_pages_used, stats.running_requests) == (1, 0, 0)


@pytest.mark.parametrize(
    ("first", "later", "budget", "first_planned"),
    [
        # The first needs a page, the cache is full, and the later one holds one: the later one is
        # preempted to make room, and must not then be planned (its chunk would run for a request that
        # is back in the queue, and update would move it from PREEMPTED to RUNNING).
        ((40, 32, 2), (20, 16, 1), 64, (32, 40)),
        # The same with the budget spent on the first: nothing to plan after it anyway.
        ((40, 32, 2), (20, 16, 1), 8, (32, 40)),
        # The first alone can go on: its own page is freed by nobody, so it preempts itself.
        ((40, 32, 2), (20, 0, 0), 64, None),
    ],
    ids=["later-holds-a-page", "budget-spent-on-first", "later-holds-nothing"],
)
def test_a_request_preempted_to_make_room_is_not_planned(first, later, budget, first_planned):
    """(prompt, cached, pages held) of two prefilling requests, the later holding pages while the
    earlier still prefills: admission order never leaves them so, so the test puts them there."""
    cache = make_cache(4, max_len=64)
    pages = [cache.allocate() for _ in range(cache.free_pages)]  # every page in use
    scheduler = make_scheduler(4, budget=budget, max_num_seqs=4, cache=cache)
    a, b = make_request("a", first[0]), make_request("b", later[0])
    held = {"a": pages[: first[2]], "b": pages[first[2] : first[2] + later[2]]}
    for request, (_, cached, _) in ((a, first), (b, later)):
        request.sequences[0].pages, request.sequences[0].cached = held[request.request_id], cached
        scheduler.requests[request.request_id] = request
        request.move_to(PREFILLING)
        scheduler._admitted.append(request)
        scheduler._num_prefilling += 1  # the counts admission keeps
        scheduler._admitted_choices += 1
    schedule = scheduler.schedule()
    assert b.status is RequestStatus.PREEMPTED and b not in scheduler._admitted
    assert all(chunk.request.status is PREFILLING for chunk in schedule.prefill), schedule.prefill
    planned = [(chunk.start, chunk.end) for chunk in schedule.prefill if chunk.request is a]
    assert planned == ([first_planned] if first_planned else [])
    # The step's work handed back, as the engine does: a request the plan completes starts decoding.
    scheduler.update_from_output(schedule, sampled({seq: 7 for chunk in schedule.prefill for seq in chunk.samples}))
    assert a.status is (RUNNING if first_planned else RequestStatus.PREEMPTED)
    assert scheduler.make_stats().waiting_requests == (1 if first_planned else 2)


def test_decode_steps_run_at_once_stop_before_a_page_that_is_not_free():
    """a and b, predicted at 16 tokens, decode in four pages: a lazy scheduler's `run_decode_steps`
    runs the 16 steps that fit their two pages each at once, and leaves them as 16 steps one by one
    do; the next schedule then preempts b in both."""

    def running_pair():
        made = [make_request(name, 16, max_tokens=40) for name in "ab"]
        scheduler = make_scheduler(4, predictor=predicting(16, made), lazy=True)
        for request in made:
            scheduler.add_request(request)
        scheduler.advance(scheduler.schedule())  # both prompts, and each one's first token
        return scheduler, made

    def state(scheduler, made):
        stats = scheduler.make_stats()
        return [(scheduler.generated(r.sequences[0]), len(r.sequences[0].pages)) for r in made], stats.kv_pages_used

    stepped, stepped_made = running_pair()
    for _ in range(16):
        stepped.advance(stepped.schedule())
    ahead, ahead_made = running_pair()
    assert ahead.run_decode_steps(ahead.schedule(), 100) == 16
    assert state(ahead, ahead_made) == state(stepped, stepped_made) == ([(17, 2)] * 2, 4)
    for scheduler, (a, b) in ((stepped, stepped_made), (ahead, ahead_made)):
        assert scheduler.schedule().decode_count == 1
        assert (a.status, b.status) == (RUNNING, RequestStatus.PREEMPTED)


def test_decode_steps_are_not_run_at_once_beside_a_prefill():
    scheduler = make_scheduler(8, lazy=True)
    scheduler.add_request(make_request("a", 20))
    assert scheduler.run_decode_steps(scheduler.schedule(), 10) == 0
