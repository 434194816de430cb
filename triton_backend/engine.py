"""One engine step: schedule, run the model, update; and the engine's statistics.

`Engine` is single-threaded and knows nothing of Triton: `add`, `abort` and `step` are its seams,
`stats` its report. `engine_loop` runs it on a thread; tests and benchmarks call it directly. The
scheduler owns the requests' state; the engine runs what a `Schedule` describes (the forward pass,
the page copies, the sampling) and hands the sampled tokens back.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from triton_backend.detokenizer import TextStream
from triton_backend.engine_stats import EngineStats
from triton_backend.kv_cache import PagedKVCache
from triton_backend.length_predictor import LengthPredictor
from triton_backend.model_runner import DecodeInput, ModelRunner, PrefillInput
from triton_backend.outputs import RequestOutput
from triton_backend.sampler import SamplingState, sample
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Schedule, Scheduler, SchedulerConfig
from triton_backend.sequence import Request, Sequence


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        token_bytes: list[bytes],
        scheduler_config: SchedulerConfig,
        clock: Callable[[], float],
        seed: int = 0,
        predictor: LengthPredictor | None = None,
    ) -> None:
        self.runner = runner
        self.cache: PagedKVCache = runner.cache
        self.scheduler = Scheduler(scheduler_config, self.cache, predictor or LengthPredictor())
        self._token_bytes = token_bytes
        self._clock = clock
        # Seeds for requests that name none: reproducible runs of the engine, distinct per choice.
        self._seeds = random.Random(seed)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def in_flight(self) -> list[str]:
        return list(self.scheduler.requests)

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams, arrival: float) -> None:
        if request_id in self.scheduler.requests:
            raise ValueError(f"request id {request_id!r} is already in flight")
        if params.n > self.scheduler.config.max_num_seqs:
            raise ValueError(f"n: {params.n} is above this instance's max_num_seqs")
        request = Request(request_id, list(prompt_ids), params, arrival)
        for index in range(params.n):
            seed = params.seed + index if params.seed is not None else self._seeds.getrandbits(63)
            generator = None if params.greedy else torch.Generator().manual_seed(seed)
            state = SamplingState(params, generator, list(prompt_ids), 0)
            request.sequences.append(Sequence(index, state, TextStream(self._token_bytes, params.stop)))
        self.scheduler.add(request)

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request (cancelled by its client) and free its pages; None if it is not here."""
        request = self.scheduler.abort(request_id)
        return None if request is None else self._output(request, self._clock())

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        schedule = self.scheduler.schedule()
        decode_logits, chunk_logits = self.runner.step(
            [DecodeInput(seq.pages, seq.last_token, seq.position) for seq in schedule.decode],
            [
                PrefillInput(c.sequence.pages, c.sequence.sampling.token_ids[c.start : c.end], c.start)
                for c in schedule.prefill
            ],
        )
        if schedule.page_copies:
            self.cache.copy_pages(schedule.page_copies)
        sampled = self._sample(schedule, decode_logits, chunk_logits)
        updated = self.scheduler.update(schedule, sampled)
        now = self._clock()
        return [self._output(request, now) for request in updated]

    def stats(self) -> EngineStats:
        return self.scheduler.make_stats()

    def _sample(
        self, schedule: Schedule, decode_logits: torch.Tensor | None, chunk_logits: torch.Tensor | None
    ) -> dict[Sequence, int]:
        """The next token of each decoded choice, and the first of each fresh request's choices whose
        prompt the step completed (all of them from the prompt's last row)."""
        sampled: dict[Sequence, int] = {}
        if decode_logits is not None:
            seqs = schedule.decode
            sampled.update(zip(seqs, sample(decode_logits, [s.sampling for s in seqs]), strict=True))
        if chunk_logits is not None:
            for chunk, row in zip(schedule.prefill, chunk_logits, strict=True):
                if chunk.samples:
                    seqs = list(chunk.samples)
                    rows = row.unsqueeze(0).expand(len(seqs), -1).clone()
                    sampled.update(zip(seqs, sample(rows, [s.sampling for s in seqs]), strict=True))
        return sampled

    def _output(self, request: Request, now: float) -> RequestOutput:
        texts, token_ids, totals, reasons = zip(
            *[(*seq.take_new(), seq.generated, seq.finish_reason) for seq in request.sequences], strict=True
        )
        return RequestOutput(
            request_id=request.request_id,
            time=now,
            texts=texts,
            token_ids=token_ids,
            total_tokens=totals,
            finish_reasons=reasons,
            num_input_tokens=len(request.prompt_ids),
            finished=request.finished,
            arrival=request.arrival,
        )
