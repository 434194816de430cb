"""Which sequences run each step, and the KV pages they hold: iteration-level scheduling.

A step is vLLM v1's: `schedule()` says what it runs (a `Schedule`), the engine runs that and samples,
`update_from_output(schedule, sampled)` takes the new tokens back, keyed by request id, and returns
what changed of each request; `make_stats()` reports the load (the seam is `scheduler_interface`).
Only the scheduler moves a request from status to status (`RequestStatus`), hands out and takes back
pages (`kv_pages.PagePool`: numbers, no tensors), and records what each sequence has cached. It
imports no torch: the simulator drives it with a profile's step times.

Requests wait in earliest-deadline-first order (those without a deadline behind, first come first
served; preempted requests go first of all). The head is admitted when the free pages, less what the
running requests still have reserved, cover its prompt and S3's predicted output for each choice. A
step decodes every running choice once and prefills at most `prefill_chunk_tokens` tokens, so a long
prompt stalls the running streams by one bounded chunk at a time. When a sequence needs a page and
none is free (a length was underestimated), the most recently admitted request is preempted: its
pages are freed and it is recomputed later from its tokens, none lost or repeated.

The simulator builds it with `lazy=True` and takes steps back through `advance`: the same admission,
batching, pages and preemption, with the lengths counted instead of kept. The decoding choices are
not listed each step (the schedule counts them); each holds its count at the step it began decoding.
A choice takes a page every page_size steps, so the decoding choices are kept by the residue of those
steps (a step's takers are one list, in admission order), and a heap keyed by step says when one ends
(at max_tokens, or where the caller said it stops: `expect_stop`). A step then costs O(1) plus its
events (pages taken, choices ended: O(log n) each, requests admitted), where listing every row made it
cost O(batch); the engine keeps the eager path, whose rows it needs. Its requests may hold prompt
lengths without token ids (`Request.counted`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from triton_backend.engine_stats import EngineStats
from triton_backend.kv_pages import PagePool, pages_for
from triton_backend.length_predictor import LengthPredictor
from triton_backend.outputs import FinishReason, RequestUpdate
from triton_backend.scheduler_interface import SampledTokens
from triton_backend.sequence import Request, RequestStatus, Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    prefill_chunk_tokens: int = 256
    max_num_seqs: int = 64

    def __post_init__(self) -> None:
        if self.prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens: must be >= 1, got {self.prefill_chunk_tokens}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs: must be >= 1, got {self.max_num_seqs}")


class PrefillChunk(NamedTuple):
    """Tokens start..end of one sequence, to be cached this step (a tuple: one is built a prefill)."""

    request: Request
    sequence: Sequence
    start: int
    end: int
    # The choices that take their first token from this chunk's last row: every choice of a fresh
    # request, on the chunk that completes its prompt; none on any other chunk.
    samples: tuple[Sequence, ...] = ()


PageCopy = tuple[int, int]  # (source page, destination page)


class Schedule:
    """One step's work, for the engine to run and hand back to `update_from_output` with its samples.
    A plain class with slots: one is built every step."""

    __slots__ = ("decode", "prefill", "page_copies", "decode_count", "decode_context")

    def __init__(self) -> None:
        self.decode: list[Sequence] = []  # each feeds its last token and samples the next
        self.prefill: list[PrefillChunk] = []
        # To copy once the step's forward pass has written them: a fresh prompt, prefilled in its first
        # choice, into the pages of its other choices.
        self.page_copies: list[PageCopy] = []
        # A lazy scheduler lists no decode rows: it counts them, and the tokens they attend to (each
        # row's prompt and generated tokens, the one it feeds included).
        self.decode_count = 0
        self.decode_context = 0


_Due = tuple[int, int, int, Sequence]  # (step, its request's admitted_as, choice index, the choice): unique
_Taker = tuple[int, int, Sequence]  # (its request's admitted_as, choice index, the choice): unique


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, pages: PagePool, predictor: LengthPredictor, lazy: bool = False
    ) -> None:
        self.config = config
        self._pages = pages
        self._predictor = predictor
        self.requests: dict[str, Request] = {}  # every unfinished request, by id, in arrival order
        self._waiting: list[tuple[float, int, Request]] = []  # WAITING and PREEMPTED, by deadline
        self._order = itertools.count()
        self._admitted: list[Request] = []  # PREFILLING and RUNNING, in admission order
        # Kept as requests move, so that a step costs no walk over every admitted request for them.
        self._num_prefilling = 0  # of the admitted, those PREFILLING
        self._admitted_choices = 0  # the admitted requests' unfinished choices
        self._preemptions = 0  # sequences preempted so far
        self._admissions = 0
        # `_outstanding_pages()`, kept as pages are taken and choices admitted, end or leave: admission
        # reads it each step a choice ends at full batch.
        self._outstanding = 0
        self._lazy = lazy
        # The lazy path's (module docstring). A decoding choice's length at step `_step` is
        # prompt_tokens + generated + _step - synced.
        self._step = 0  # steps taken back
        self._decoding: dict[Sequence, Request] = {}  # the RUNNING requests' unfinished choices
        self._offsets = 0  # over `_decoding`, prompt_tokens + generated - synced
        # A decoding choice takes a page every page_size steps, in the steps of one residue modulo
        # page_size (`_residue`): the decoding choices by that residue, each list in admission order,
        # are a step's takers in the order stepping gives them pages.
        self._page_phase: list[list[_Taker]] = [[] for _ in range(pages.page_size)]
        # The step whose token ends each decoding choice. An entry is left behind when its choice is
        # preempted: it is its choice's while the choice decodes under the admission it names (a
        # preempted request is admitted again under a new count).
        self._end_due: list[_Due] = []
        self._joining: list[Request] = []  # moved to RUNNING this step: they decode from the next

    @property
    def has_work(self) -> bool:
        return bool(self.requests)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._admitted)

    @property
    def num_prefilling(self) -> int:
        return self._num_prefilling

    @property
    def kv_pages_used(self) -> int:
        return self._pages.used_pages

    def gauges(self) -> tuple[int, int, int]:
        """`num_running`, `num_waiting` and `kv_pages_used` at once: the simulator reads them each step."""
        return len(self._admitted), len(self._waiting), self._pages.used_pages

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in flight")
        if len(request.sequences) > self.config.max_num_seqs:
            raise ValueError(f"n: {len(request.sequences)} is above this instance's max_num_seqs")
        if not self._lazy and len(request.prompt_ids) != request.prompt_tokens:
            raise ValueError("a request without its prompt's tokens (Request.counted) is for a lazy scheduler")
        request.predicted_tokens = self._predictor.predict(request.params, request.prompt_tokens)
        self.requests[request.request_id] = request
        deadline = request.deadline
        heapq.heappush(self._waiting, (deadline if deadline is not None else float("inf"), next(self._order), request))

    def finish_requests(self, request_ids: Iterable[str], reason: FinishReason) -> list[RequestUpdate]:
        """Ends requests where they stand (cancelled by a client, or a failed step): their unfinished
        choices end with `reason`, their pages are freed. Ids not here are skipped."""
        updates = []
        for request_id in request_ids:
            request = self.requests.pop(request_id, None)
            if request is None:
                continue
            if request in self._admitted:
                self._leave(request)
            else:
                self._waiting = [entry for entry in self._waiting if entry[2] is not request]
                heapq.heapify(self._waiting)
            for seq in request.sequences:
                if seq.running:
                    seq.finish_reason = reason
            request.move_to(RequestStatus.FINISHED_ABORTED)
            updates.append(_update(request))
        return updates

    def schedule(self) -> Schedule:
        schedule = Schedule()
        if self._lazy:
            step, pool = self._step, self._pages
            takers = self._page_phase[step % pool.page_size]
            if takers:
                if len(takers) > pool.free_pages:
                    self._plan_decode_lazy(schedule, takers)
                else:  # most steps: every taker's page is free
                    self._give_pages(takers)
            count = schedule.decode_count = len(self._decoding)
            schedule.decode_context = self._offsets + count * step
            if self._waiting and count < self.config.max_num_seqs:
                self._admit(count)
        else:
            self._plan_decode(schedule)
            self._admit(len(schedule.decode))
        if self._num_prefilling:
            self._plan_prefill(schedule)
            schedule.page_copies = [
                pair
                for chunk in schedule.prefill
                for sibling in chunk.samples
                if sibling is not chunk.sequence
                for pair in zip(chunk.sequence.pages, sibling.pages, strict=False)
            ]
        return schedule

    def update_from_output(self, schedule: Schedule, output: SampledTokens) -> list[RequestUpdate]:
        """Takes a step back once it ran: what it cached, and each sampling choice's new token. Returns
        an update of each request that got tokens, in the step's order; those it finished have left."""
        if self._lazy:
            raise RuntimeError("a lazy scheduler takes steps back through advance")
        self._cache(schedule)
        updated, ended = [], []
        tokens, stopped = output.tokens, output.stopped
        for request in self._admitted:
            given = tokens.get(request.request_id)
            if not given:
                continue
            seqs = request.sequences
            ending = False
            for index, token in given.items():
                seq = seqs[index]
                seq.append(token, (request.request_id, index) in stopped if stopped else False)
                if seq.finish_reason is not None:
                    ending = True
                    self._end_choice(request, seq)
            updated.append(request)
            if ending and all(seq.finish_reason is not None for seq in seqs):
                ended.append(request)
        self._remove(ended)
        return [_update(request) for request in updated]

    def expect_stop(self, seq: Sequence, generated: int) -> None:
        """Lazy path: `seq` stops (its EOS) with its `generated`-th token, where that is short of its
        max_tokens; the simulator, which knows each choice's length, says so once instead of each step."""
        seq.stop_at = generated

    def advance(self, schedule: Schedule) -> list[Sequence]:
        """The lazy path's `update_from_output`: every row takes a token that is not EOS, and a choice
        ends at its max_tokens or where `expect_stop` said; no update is built (the tokens count as
        handed out). Returns the choices that ended: the decoding ones in admission order, then each
        chunk's samples, the order `update_from_output` ends them in."""
        if not self._lazy:
            raise RuntimeError("an eager scheduler takes steps back through update_from_output")
        if schedule.prefill:  # it lists no decode rows to cache
            self._cache(schedule)
        step = self._step
        self._step = step + 1
        ended: list[Sequence] = []
        done = []
        end_due = self._end_due
        decoding = self._decoding
        while end_due and end_due[0][0] <= step:
            _, admitted_as, _, seq = heapq.heappop(end_due)
            request = decoding.get(seq)
            if request is None or request.admitted_as != admitted_as:
                continue
            self._materialize(seq)
            if self._ends_choice(request, seq):
                done.append(request)
            ended.append(seq)
        for chunk in schedule.prefill:
            for seq in chunk.samples:
                seq.generated = seq.taken = seq.generated + 1
                if seq.generated < seq.params.max_tokens and seq.generated != seq.stop_at:
                    continue
                if self._ends_choice(chunk.request, seq):
                    done.append(chunk.request)
                ended.append(seq)
        if done:
            self._remove(done)
        if self._joining:
            for request in self._joining:
                if request.status is RequestStatus.RUNNING:
                    for seq in request.sequences:
                        if seq.finish_reason is None:
                            self._join(request, seq)
            self._joining = []
        return ended

    def _ends_choice(self, request: Request, seq: Sequence) -> bool:
        """Ends `seq` (its count is its own), as `Sequence.append` would; True if its request is done."""
        stop = seq.stop_at
        seq.finish_reason = FinishReason.STOP if stop and seq.generated >= stop else FinishReason.LENGTH
        self._end_choice(request, seq)
        for s in request.sequences:  # a loop: cheaper than all() over a generator, once a choice
            if s.finish_reason is None:
                return False
        return True

    def _join(self, request: Request, seq: Sequence) -> None:
        """Lazy path: `seq` decodes from this step on; when it needs its next page, and when it ends."""
        step = seq.synced = self._step
        length = seq.prompt_tokens + seq.generated
        self._decoding[seq] = request
        self._offsets += length - step
        key = request.admitted_as, seq.index, seq
        # Its length at step t is length + t - step; it takes a page at the first t where that passes
        # its pages, within page_size steps of this one (its pages hold its length - 1 tokens and
        # fewer than page_size more), and every page_size steps after.
        bisect.insort(self._page_phase[self._residue(seq)], key)
        stop, most = seq.stop_at, seq.params.max_tokens
        last = stop if stop and stop < most else most
        heapq.heappush(self._end_due, (step + last - 1 - seq.generated, *key))

    def _residue(self, seq: Sequence) -> int:
        """The steps, modulo page_size, in which decoding `seq` takes a page: its length at step t is
        prompt_tokens + generated + t - synced, and it takes one where that passes a page's end."""
        return (seq.synced + 1 - seq.prompt_tokens - seq.generated) % self._pages.page_size

    def _materialize(self, seq: Sequence) -> None:
        """Lazy path: `seq` leaves the decoding choices with its count brought up to date."""
        request = self._decoding.pop(seq)
        self._page_phase[self._residue(seq)].remove((request.admitted_as, seq.index, seq))
        self._offsets -= seq.prompt_tokens + seq.generated - seq.synced
        seq.generated = seq.taken = seq.generated + self._step - seq.synced

    def generated(self, seq: Sequence) -> int:
        """`seq`'s generated tokens now, on either path."""
        if seq in self._decoding:
            return seq.generated + self._step - seq.synced
        return seq.generated

    def longest_decode(self) -> int:
        """Lazy path: the longest decoding choice's context this step (an O(batch) walk, for profiles
        whose engine pads attention to the longest)."""
        step = self._step
        return max([s.prompt_tokens + s.generated - s.synced for s in self._decoding], default=-step) + step

    def _cache(self, schedule: Schedule) -> None:
        """What `schedule` cached, once it ran; a prompt it completed decodes from the next step. A lazy
        scheduler lists no decode rows: a decoding choice's cache is read only once it has left the
        batch, which empties it (preempted) or ends it."""
        for seq in schedule.decode:
            seq.cached = len(seq.token_ids)  # its position + 1
        for chunk in schedule.prefill:
            chunk.sequence.cached = chunk.end
            for sibling in chunk.samples:  # the others' pages hold copies of the chunk's
                sibling.cached = chunk.end
            if chunk.request.status is RequestStatus.PREFILLING and not chunk.request.prefill_targets():
                self._start_running(chunk.request)

    def _start_running(self, request: Request) -> None:
        self._num_prefilling -= 1
        request.move_to(RequestStatus.RUNNING)
        if self._lazy:
            self._joining.append(request)

    def _end_choice(self, request: Request, seq: Sequence) -> None:
        self._admitted_choices -= 1
        self._outstanding -= max(0, self._unreserved(seq))
        self._pages.release(seq.pages)
        self._predictor.observe(request.params, request.prompt_tokens, seq.generated, request.predicted_tokens)

    def _remove(self, ended: list[Request]) -> None:
        for request in ended:
            request.move_to(RequestStatus.FINISHED)
            self._admitted.remove(request)
            del self.requests[request.request_id]

    def run_decode_steps(self, schedule: Schedule, steps: int) -> int:
        """Lazy path: hands back `schedule` and runs up to `steps - 1` more steps like it at once, the
        simulator's fast path over the steps in which nothing but the batch's lengths changes. The caller
        promises that no request arrives meanwhile. Returns the steps run, `schedule`'s included: 0 where
        `schedule` prefills (the caller steps it as usual), fewer than `steps` where a choice would end
        or a later step would need a page that is not free (its schedule preempts). Pages are taken in
        the order stepping takes them.

        Admission cannot change on the way: a head the step's schedule left waiting for lack of batch
        room waits until a choice ends; one waiting for pages sees the free pages less the running
        choices' outstanding reservations only shrink (a page taken within a reservation lowers both,
        one taken beyond it only the free ones)."""
        steps = self.decode_steps_that_fit(schedule, steps)
        if steps:
            self.take_back_decode_steps(schedule, steps)
        return steps

    def take_back_decode_steps(self, schedule: Schedule, steps: int) -> None:
        """`run_decode_steps` for a caller that has `decode_steps_that_fit(schedule, n)`'s answer: `steps`
        is at most that, and nothing changed since."""
        step, size = self._step, self._pages.page_size
        # The later steps' takers, in the order stepping gives them pages (`schedule` took its own).
        # None ends or leaves on the way: each residue's list holds for the whole run.
        phases, takers = self._page_phase, list[_Taker]()
        for t in range(step + 1, step + steps):
            takers += phases[t % size]
        self._give_pages(takers)
        self._step += steps

    def schedule_decode_again(self, schedule: Schedule) -> None:
        """Lazy path: makes `schedule` the next step, after `take_back_decode_steps(schedule, k)` with k
        below what `decode_steps_that_fit` said: what `schedule()` would plan then, without building
        it anew. The same rows decode, a token longer each, and the choices due take their pages (they
        fit: k is below the answer). Nobody is admitted: the head that waited at `schedule` waits still
        (`run_decode_steps` says why), and nothing prefills (`schedule` had nothing to)."""
        takers = self._page_phase[self._step % self._pages.page_size]
        if takers:
            self._give_pages(takers)
        schedule.decode_context = self._offsets + schedule.decode_count * self._step

    def ends_a_choice(self, schedule: Schedule) -> bool:
        """Lazy path: whether taking `schedule` back (`advance`) ends a choice, one its prefill completes
        included; the simulator takes the steps in which none does ahead of its event queue."""
        for chunk in schedule.prefill:
            for seq in chunk.samples:
                if seq.generated + 1 >= seq.params.max_tokens or seq.generated + 1 == seq.stop_at:
                    return True
        end_due, decoding = self._end_due, self._decoding
        while end_due:
            when, admitted_as, _, seq = end_due[0]
            request = decoding.get(seq)
            if request is not None and request.admitted_as == admitted_as:
                return when <= self._step
            heapq.heappop(end_due)  # left behind by a preemption (`advance` skips it)
        return False

    def decode_steps_that_fit(self, schedule: Schedule, steps: int) -> int:
        """The steps `run_decode_steps(schedule, steps)` would run, and nothing changed: the caller can
        time the run before it is made."""
        if schedule.prefill or self._joining or not schedule.decode_count or steps < 1:
            return 0
        step, decoding = self._step, self._decoding
        end_due = self._end_due
        while end_due:
            when, admitted_as, _, seq = end_due[0]
            request = decoding.get(seq)
            if request is not None and request.admitted_as == admitted_as:
                steps = min(steps, when - step)
                break
            heapq.heappop(end_due)
        free, size = self._pages.free_pages, self._pages.page_size
        # Each choice takes at most one page in `size` steps: most runs need no look at which.
        if steps < 2 or len(decoding) * -(-(steps - 1) // size) <= free:
            return steps
        takes = list[int]()  # the later steps (`schedule` took its own), once for each page taken in them
        for residue in range(size):
            first = step + 1 + (residue - step - 1) % size
            takes += list(range(first, step + steps, size)) * len(self._page_phase[residue])
        if len(takes) > free:
            takes.sort()
            steps = takes[free] - step  # the first step whose page is not free does not run
        return steps

    def make_stats(self) -> EngineStats:
        return EngineStats(
            running_requests=len(self._admitted),
            waiting_requests=len(self._waiting),
            kv_pages_used=self._pages.used_pages,
            kv_pages_total=self._pages.num_pages,
            preemptions=self._preemptions,
            length_predictions=self._predictor.predictions,
            length_underestimates=self._predictor.underestimates,
            prefilling_requests=self._num_prefilling,
        )

    def _plan_decode(self, schedule: Schedule) -> None:
        """Every running request's unfinished choices, each with a page for the position it decodes."""
        page_size = self._pages.page_size
        running = RequestStatus.RUNNING
        admitted, decode = self._admitted, schedule.decode
        i = 0
        # By index: a preemption takes requests from the end, those after this one (or this one last).
        while i < len(admitted):
            request = admitted[i]
            i += 1
            if request.status is not running:
                continue  # prefilling
            first = len(decode)
            for seq in request.sequences:
                if seq.finish_reason is not None:
                    continue
                pages = seq.pages
                if len(seq.token_ids) > len(pages) * page_size:  # its position (len - 1) is past them
                    if not self._ensure_free_page(schedule, keep=request):
                        del decode[first:]  # it was preempted itself, the last admitted
                        break
                    self._take_page(seq)
                decode.append(seq)

    def _plan_decode_lazy(self, schedule: Schedule, due: list[_Taker]) -> None:
        """`_plan_decode`, counted, where this step's takers (`due`, the choices whose length passes
        their pages) are more than the free pages: they take one in admission order, preempting where
        none is free; `schedule` counts its rows after."""
        pool, decoding = self._pages, self._decoding
        free = pool.free_pages
        takers: list[_Taker] = []  # given their pages together, before any preemption
        # A copy: a preemption on the way takes its choices out of the list.
        for entry in due[:]:
            seq = entry[2]
            request = decoding.get(seq)
            if request is None:
                continue  # preempted on the way
            if len(takers) == free:
                self._give_pages(takers)
                takers = []
                if not self._ensure_free_page(schedule, keep=request):
                    continue  # it was preempted itself, the last admitted
                free = pool.free_pages
            takers.append(entry)
        self._give_pages(takers)

    def _ensure_free_page(self, schedule: Schedule, keep: Request) -> bool:
        """Preempt the latest-admitted other requests until a page is free; False if `keep` went too."""
        while self._pages.free_pages == 0:
            victim = self._admitted[-1]
            self._preempt(victim, schedule)
            if victim is keep:
                return False
        return True

    def _preempt(self, request: Request, schedule: Schedule) -> None:
        self._leave(request)
        schedule.prefill = [chunk for chunk in schedule.prefill if chunk.request is not request]
        request.preemptions += 1
        # The prediction was too short: admit it next time against a doubled one (S3's re-bucketing),
        # so it is not preempted over and over.
        generated = max(seq.generated for seq in request.sequences)
        request.predicted_tokens = min(request.params.max_tokens, max(2 * generated, 2 * request.predicted_tokens))
        self._preemptions += sum(1 for seq in request.sequences if seq.running)
        request.move_to(RequestStatus.PREEMPTED)
        heapq.heappush(self._waiting, (-float("inf"), next(self._order), request))

    def _leave(self, request: Request) -> None:
        """Takes an admitted request out of the batch and frees its pages; the caller moves it on."""
        self._admitted.remove(request)
        if request.status is RequestStatus.PREFILLING:
            self._num_prefilling -= 1
        for seq in request.sequences:
            if seq in self._decoding:
                self._materialize(seq)
            if seq.finish_reason is None:
                self._admitted_choices -= 1
                self._outstanding -= max(0, self._unreserved(seq))
            self._pages.release(seq.pages)
            seq.cached = 0

    def _admit(self, decoding: int) -> None:
        """`decoding`: the running requests' unfinished choices."""
        waiting, most = self._waiting, self.config.max_num_seqs
        # Every waiting request has a choice to run, so none fits beside a full batch.
        if not waiting or decoding >= most:
            return
        running_seqs = self._admitted_choices
        pool = self._pages
        while waiting:
            request = waiting[0][2]
            choices = [s for s in request.sequences if s.finish_reason is None]
            # Strict order: a large head waits rather than being overtaken forever. With nothing
            # admitted (every admitted request has a running choice) it goes in alone.
            if running_seqs and running_seqs + len(choices) > most:
                return
            # Each choice's prompt, what it generated and what it is predicted to generate yet (at least
            # a token), within the context; in pages.
            predicted, size, longest = request.predicted_tokens, pool.page_size, pool.max_len
            reserve = [
                pages_for(min(s.prompt_tokens + s.generated + max(predicted - s.generated, 1), longest), size)
                for s in choices
            ]
            need = sum(reserve)
            if running_seqs and need > pool.free_pages - self._outstanding:
                return
            heapq.heappop(waiting)
            self._admissions += 1
            request.admitted_as = self._admissions
            for seq, pages in zip(choices, reserve, strict=True):
                seq.reserved_pages = pages
            self._outstanding += need
            running_seqs += len(choices)
            self._admitted_choices += len(choices)
            self._num_prefilling += 1
            request.move_to(RequestStatus.PREFILLING)
            self._admitted.append(request)

    def _outstanding_pages(self) -> int:
        """The pages the admitted requests' unfinished choices have reserved and not yet taken (what
        `_outstanding` keeps; a test ties the two)."""
        return sum(max(0, self._unreserved(s)) for r in self._admitted for s in r.sequences if s.finish_reason is None)

    def _plan_prefill(self, schedule: Schedule) -> None:
        budget = self.config.prefill_chunk_tokens
        # The prefilling requests, in admission order: found from the end, where they mostly are
        # (admitted last), so a step with a full batch walks a few, not all.
        prefilling, left, status = [], self._num_prefilling, RequestStatus.PREFILLING
        for request in reversed(self._admitted):
            if request.status is status:
                prefilling.append(request)
                left -= 1
                if not left:
                    break
        prefilling.reverse()
        pool = self._pages
        for request in prefilling:
            if request.status is not status:
                # Preempted while an earlier one made room (the table test builds this state; the
                # engine's own runs leave no later request holding pages while an earlier one still
                # prefills): planning it would run a chunk for a request that is back in the queue.
                continue
            targets = request.prefill_targets()
            if not targets:  # nothing to recompute: it decodes from the next step
                self._start_running(request)
                continue
            last = len(targets) - 1
            for index, (seq, target) in enumerate(targets):
                if budget == 0:
                    return
                start = seq.cached
                end = min(target, start + budget)
                if not self._take_pages(seq, pool.pages_for(end), schedule, request):
                    return
                samples: tuple[Sequence, ...] = ()
                if end == target and index == last and request.fresh:
                    if len(request.sequences) > 1 and not self._give_siblings_pages(request, schedule):
                        return
                    samples = tuple(request.sequences)
                schedule.prefill.append(PrefillChunk(request, seq, start, end, samples))
                budget -= end - start

    def _give_siblings_pages(self, request: Request, schedule: Schedule) -> bool:
        """Pages for the other choices, which get a copy of the first choice's prompt."""
        prompt_pages = self._pages.pages_for(request.prompt_tokens)
        return all(self._take_pages(seq, prompt_pages, schedule, request) for seq in request.sequences[1:])

    def _take_pages(self, seq: Sequence, pages: int, schedule: Schedule, keep: Request) -> bool:
        """Grows `seq` to hold `pages` pages, preempting as `_ensure_free_page` does where they are not
        free; False if `keep` went too."""
        count = pages - len(seq.pages)
        if count <= self._pages.free_pages:  # at once: nothing to preempt on the way
            if count > 0:
                self._outstanding -= min(count, max(0, self._unreserved(seq)))
                self._pages.allocate_to(seq.pages, count)
            return True
        for _ in range(count):
            if not self._ensure_free_page(schedule, keep=keep):
                return False
            self._take_page(seq)
        return True

    def _give_pages(self, takers: list[_Taker]) -> None:
        """`_take_page` for each of `takers`' choices in turn, written out: page events are much of a
        lazy step."""
        if not takers:
            return
        unreserved = 0
        for (_, _, seq), page in zip(takers, self._pages.take(len(takers)), strict=True):
            pages = seq.pages
            if seq.reserved_pages > len(pages):
                unreserved += 1
            pages.append(page)
        self._outstanding -= unreserved

    def _take_page(self, seq: Sequence) -> None:
        """A page for `seq`, which counts against its reservation while that lasts."""
        if self._unreserved(seq) > 0:
            self._outstanding -= 1
        seq.pages.append(self._pages.allocate())

    def _unreserved(self, seq: Sequence) -> int:
        """The pages `seq`'s reservation holds beyond those it has taken (below 0: it took more)."""
        return seq.reserved_pages - len(seq.pages)


def _update(request: Request) -> RequestUpdate:
    """What changed of `request` since its last update: each choice's new tokens, and how it stands."""
    seqs = request.sequences
    return RequestUpdate(
        request.request_id,
        tuple([seq.take_new() for seq in seqs]),  # a list built in place: faster than a generator's tuple
        tuple([seq.generated for seq in seqs]),
        tuple([seq.finish_reason for seq in seqs]),
        request.prompt_tokens,
        request.finished,
        request.arrival,
    )
