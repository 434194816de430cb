"""The scheduler on its own: a small cache, requests built by hand, and engine steps with no model
(every choice that samples gets `TOKEN`), so tests read as timelines of what each step runs."""

from __future__ import annotations

from collections.abc import Iterable

from triton_backend.kv_pages import PagePool
from triton_backend.length_predictor import LengthPredictor, PredictorConfig
from triton_backend.outputs import RequestUpdate
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Schedule, Scheduler, SchedulerConfig
from triton_backend.scheduler_interface import SampledTokens
from triton_backend.sequence import Request, RequestStatus, Sequence

PAGE = 16
TOKEN = 7  # what every sampling choice gets


def make_cache(pages: int, max_len: int = 256) -> PagePool:
    return PagePool(pages, PAGE, max_len)


def make_scheduler(
    pages: int,
    budget: int = 64,
    max_num_seqs: int = 8,
    predictor: LengthPredictor | None = None,
    cache: PagePool | None = None,
    lazy: bool = False,
) -> Scheduler:
    config = SchedulerConfig(prefill_chunk_tokens=budget, max_num_seqs=max_num_seqs)
    return Scheduler(config, cache or make_cache(pages), predictor or LengthPredictor(), lazy=lazy)


def make_request(
    name: str,
    prompt: int,
    max_tokens: int = 8,
    n: int = 1,
    deadline: float | None = None,
    ignore_eos: bool = True,
) -> Request:
    params = SamplingParams(max_tokens=max_tokens, n=n, temperature=0.0, ignore_eos=ignore_eos, deadline=deadline)
    return Request.with_choices(name, [1 + i % 200 for i in range(prompt)], params, arrival=0.0)


def predicting(tokens: int, requests: Iterable[Request]) -> LengthPredictor:
    """A predictor that has seen every such request stop after `tokens` (S3's guess, right or wrong)."""
    predictor = LengthPredictor(PredictorConfig(min_history=1))
    for request in requests:
        predictor.observe(request.params, len(request.prompt_ids), tokens, predicted=tokens)
    return predictor


def sampling(schedule: Schedule) -> list[Sequence]:
    """The choices that take a token from this step, as the engine samples them."""
    return schedule.decode + [seq for chunk in schedule.prefill for seq in chunk.samples]


def sampled(tokens: dict[Sequence, int]) -> SampledTokens:
    """`tokens` keyed as the engine hands them back: by request id, then choice index."""
    by_request: dict[str, dict[int, int]] = {}
    for seq, token in tokens.items():
        by_request.setdefault(seq.request_id, {})[seq.index] = token
    return SampledTokens(by_request)


def step(scheduler: Scheduler, tokens: dict[Sequence, int] | None = None) -> tuple[Schedule, list[RequestUpdate]]:
    """One engine step: schedule, (no model), update with `TOKEN` for every sampling choice unless
    `tokens` names another."""
    schedule = scheduler.schedule()
    given = {seq: (tokens or {}).get(seq, TOKEN) for seq in sampling(schedule)}
    return schedule, scheduler.update_from_output(schedule, sampled(given))


def plan(schedule: Schedule, requests: Iterable[Request]) -> tuple[list[str], list[tuple[str, int, int, int]]]:
    """A schedule by name: the decoding choices (`name` or `name.index`), and each chunk as
    (name, start, end, choices sampling from it)."""
    owner = {seq: r for r in requests for seq in r.sequences}

    def name(seq: Sequence) -> str:
        request = owner[seq]
        return request.request_id if len(request.sequences) == 1 else f"{request.request_id}.{seq.index}"

    chunks = [(name(c.sequence), c.start, c.end, len(c.samples)) for c in schedule.prefill]
    return [name(seq) for seq in schedule.decode], chunks


def statuses(requests: Iterable[Request]) -> dict[str, RequestStatus]:
    return {r.request_id: r.status for r in requests}
