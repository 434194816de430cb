"""A request's status through the scheduler's seam (schedule, update, abort), with no model: the moves
it makes, the pages each move frees, and the moves it may not make."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from scheduler_testkit import make_request, make_scheduler, predicting, step

from triton_backend.model_shapes import EOS_TOKEN_ID
from triton_backend.outputs import FinishReason
from triton_backend.sequence import RequestStatus

S = RequestStatus


def test_a_request_waits_prefills_runs_and_finishes():
    scheduler = make_scheduler(8, budget=16)
    a = make_request("a", 40, max_tokens=3)
    scheduler.add_request(a)
    seen = [a.status]
    updated = []
    while scheduler.has_work:
        _, got = step(scheduler)
        seen.append(a.status)
        updated.append([r.request_id for r in got])
    # Three chunks of 16, 16 and 8 tokens, the last giving the first token; two decode steps.
    assert seen == [S.WAITING, S.PREFILLING, S.PREFILLING, S.RUNNING, S.RUNNING, S.FINISHED]
    assert updated == [[], [], ["a"], ["a"], ["a"]]  # only steps that gave it a token hand it back
    assert a.sequences[0].generated == 3 and a.sequences[0].finish_reason is FinishReason.LENGTH
    assert "a" not in scheduler.requests and scheduler.make_stats().kv_pages_used == 0


def test_a_choice_that_ends_frees_its_pages_while_the_others_go_on():
    scheduler = make_scheduler(16)
    a = make_request("a", 20, max_tokens=8, n=2, ignore_eos=False)
    scheduler.add_request(a)
    step(scheduler)  # the prompt in the first choice, copied to the second: two pages each
    assert scheduler.make_stats().kv_pages_used == 4
    first, second = a.sequences
    _, updated = step(scheduler, {first: EOS_TOKEN_ID})
    assert (first.finish_reason, second.finish_reason) == (FinishReason.STOP, None)
    assert first.pages == [] and scheduler.make_stats().kv_pages_used == 2
    assert [u.request_id for u in updated] == ["a"] and a.status is S.RUNNING
    assert updated[0].finish_reasons == (FinishReason.STOP, None)
    schedule, _ = step(scheduler)
    assert schedule.decode == [second]
    _, updated = step(scheduler, {second: EOS_TOKEN_ID})
    assert [u.request_id for u in updated] == ["a"] and a.status is S.FINISHED and a.finished
    assert updated[0].finished and updated[0].token_ids == ((), (EOS_TOKEN_ID,))
    assert [seq.generated for seq in a.sequences] == [2, 4]
    assert scheduler.make_stats().kv_pages_used == 0 and not scheduler.has_work


def preempted_b():
    """a and b predicted at 16 tokens, running to 40 in four pages: b, admitted last, is preempted
    when both outgrow them."""
    made = [make_request(name, 16, max_tokens=40) for name in "ab"]
    scheduler = make_scheduler(4, predictor=predicting(16, made))
    for request in made:
        scheduler.add_request(request)
    for _ in range(30):
        step(scheduler)
        if made[1].status is S.PREEMPTED:
            return scheduler, made
    raise AssertionError("b was never preempted")


def waiting_b():
    scheduler = make_scheduler(8, max_num_seqs=1)
    made = [make_request(name, 4) for name in "ab"]
    for request in made:
        scheduler.add_request(request)
    step(scheduler)
    return scheduler, made


def prefilling_b():
    scheduler = make_scheduler(8, budget=16)
    made = [make_request("a", 4), make_request("b", 40)]
    for request in made:
        scheduler.add_request(request)
    step(scheduler)
    return scheduler, made


def running_b():
    scheduler = make_scheduler(8)
    made = [make_request("a", 4), make_request("b", 4, n=2)]
    for request in made:
        scheduler.add_request(request)
    step(scheduler)
    return scheduler, made


@pytest.mark.parametrize(
    ("state", "status"),
    [(waiting_b, S.WAITING), (prefilling_b, S.PREFILLING), (running_b, S.RUNNING), (preempted_b, S.PREEMPTED)],
    ids=["waiting", "prefilling", "running", "preempted"],
)
def test_an_abort_ends_a_request_where_it_stands(state, status):
    scheduler, (a, b) = state()
    assert (a.status, b.status) == (S.RUNNING, status)
    held_by_a = sum(len(seq.pages) for seq in a.sequences)
    (update,) = scheduler.finish_requests(["b"], FinishReason.CANCELLED)
    assert (update.request_id, update.finished) == ("b", True)
    assert update.finish_reasons == (FinishReason.CANCELLED,) * len(b.sequences)
    assert b.status is S.FINISHED_ABORTED and b.finished
    assert [seq.finish_reason for seq in b.sequences] == [FinishReason.CANCELLED] * len(b.sequences)
    assert all(seq.pages == [] for seq in b.sequences)
    stats = scheduler.make_stats()
    assert (stats.running_requests, stats.waiting_requests, stats.kv_pages_used) == (1, 0, held_by_a)
    assert list(scheduler.requests) == ["a"] and scheduler.finish_requests(["b"], FinishReason.CANCELLED) == []
    while scheduler.has_work:  # a goes on to its end, alone
        schedule, _ = step(scheduler)
        assert all(chunk.request is a for chunk in schedule.prefill)
    assert a.status is S.FINISHED and scheduler.make_stats().kv_pages_used == 0


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (S.WAITING, S.RUNNING),  # decoding needs its prompt cached first
        (S.WAITING, S.FINISHED),
        (S.PREEMPTED, S.RUNNING),  # recomputing comes first
        (S.PREFILLING, S.FINISHED),
        (S.FINISHED, S.RUNNING),
        (S.FINISHED_ABORTED, S.PREFILLING),
        (S.FINISHED, S.FINISHED_ABORTED),
    ],
)
def test_a_move_out_of_order_is_refused_naming_the_request(start, to):
    request = make_request("r", 4)
    request.status = start
    with pytest.raises(RuntimeError, match=f"'r' cannot go from {start.value} to {to.value}"):
        request.move_to(to)
    assert request.status is start


# What the engine may call on the scheduler: the seam (scheduler_interface), nothing of its tables.
SEAM = {"add_request", "finish_requests", "schedule", "update_from_output", "make_stats", "has_work"}


def test_the_engine_uses_only_the_seam_and_changes_no_request_state():
    tree = ast.parse((Path(__file__).parents[2] / "triton_backend" / "engine.py").read_text())
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "scheduler"
    }
    assert used <= SEAM, used - SEAM
    # It assigns to its own attributes and local tables only: never to a request's, a sequence's or a
    # chunk's attributes, nor into their lists.
    targets = [
        target
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
    ]

    def owned(node: ast.expr) -> bool:  # `self.x`, a local name, or what a call made
        if isinstance(node, ast.Attribute):
            return ast.unparse(node.value) == "self"
        return isinstance(node, ast.Name | ast.Call)

    foreign = [
        ast.unparse(t)
        for t in targets
        if (isinstance(t, ast.Attribute) and not owned(t)) or (isinstance(t, ast.Subscript) and not owned(t.value))
    ]
    assert foreign == []
    assert used  # the walk saw the engine's calls at all
