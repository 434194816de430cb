"""One engine step: schedule, run the model, update the sequences; and the engine's statistics.

`Engine` is single-threaded and knows nothing of Triton: `add`, `abort` and `step` are its seams,
`stats` its report. `engine_loop` runs it on a thread; tests and benchmarks call it directly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from triton_backend.detokenizer import TextStream
from triton_backend.kv_cache import PagedKVCache
from triton_backend.length_predictor import LengthPredictor
from triton_backend.outputs import FinishReason, RequestOutput
from triton_backend.presets import EOS_TOKEN_ID
from triton_backend.runner import DecodeInput, GPT2Runner, PrefillInput
from triton_backend.sampler import SamplingState, sample
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import PrefillChunk, Scheduler, SchedulerConfig
from triton_backend.sequence import Request, Sequence


@dataclass(frozen=True)
class EngineStats:
    running_requests: int
    waiting_requests: int
    kv_pages_used: int
    kv_pages_total: int
    preemptions: int  # sequences preempted since start
    length_predictions: int = 0  # requests given a predicted output length, since start
    length_underestimates: int = 0  # choices that generated more than their prediction, since start

    @property
    def kv_usage(self) -> float:
        return self.kv_pages_used / self.kv_pages_total


class Engine:
    def __init__(
        self,
        runner: GPT2Runner,
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
        self._requests: dict[str, Request] = {}
        # Seeds for requests that name none: reproducible runs of the engine, distinct per choice.
        self._seeds = random.Random(seed)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def in_flight(self) -> list[str]:
        return list(self._requests)

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams, arrival: float) -> None:
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in flight")
        if params.n > self.scheduler.config.max_num_seqs:
            raise ValueError(f"n: {params.n} is above this instance's max_num_seqs")
        request = Request(request_id, list(prompt_ids), params, arrival)
        for index in range(params.n):
            seed = params.seed + index if params.seed is not None else self._seeds.getrandbits(63)
            generator = None if params.greedy else torch.Generator().manual_seed(seed)
            state = SamplingState(params, generator, list(prompt_ids), 0)
            request.sequences.append(Sequence(index, state, TextStream(self._token_bytes, params.stop)))
        self._requests[request_id] = request
        self.scheduler.add(request)

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request (cancelled by its client) and free its pages; None if it is not here."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return None
        self.scheduler.remove(request_id)
        for seq in request.sequences:
            if seq.running:
                seq.finish_reason = FinishReason.CANCELLED
        return self._output(request, self._clock())

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        plan = self.scheduler.schedule()
        work = [chunk for chunk in plan.prefill if chunk.end > chunk.start]
        decode_logits, chunk_logits = self.runner.step(
            [DecodeInput(seq.pages, seq.last_token, seq.position) for seq in plan.decode],
            [PrefillInput(c.sequence.pages, c.sequence.sampling.token_ids[c.start : c.end], c.start) for c in work],
        )
        touched: dict[str, Request] = {}
        if decode_logits is not None:
            for seq in plan.decode:
                seq.cached = seq.position + 1
            self._sample(plan.decode, decode_logits)
            for request in self.scheduler.running:
                touched[request.request_id] = request
        rows = {} if chunk_logits is None else {id(chunk): row for chunk, row in zip(work, chunk_logits, strict=True)}
        for request in self._prefill(plan.prefill, rows):
            touched[request.request_id] = request
        now = self._clock()
        outputs = []
        for request in touched.values():
            for seq in request.sequences:
                if seq.finish_reason is not None and seq.pages:
                    self.scheduler.sequence_finished(request, seq)
            output = self._output(request, now)
            outputs.append(output)
            if output.finished:
                self.scheduler.request_finished(request)
                del self._requests[request.request_id]
        return outputs

    def stats(self) -> EngineStats:
        return EngineStats(
            running_requests=len(self.scheduler.running) + len(self.scheduler.prefilling),
            waiting_requests=self.scheduler.num_waiting,
            kv_pages_used=self.cache.used_pages,
            kv_pages_total=self.cache.num_pages,
            preemptions=self.scheduler.preemptions,
            length_predictions=self.scheduler.predictor.predictions,
            length_underestimates=self.scheduler.predictor.underestimates,
        )

    def _prefill(self, chunks: list[PrefillChunk], logits: dict[int, torch.Tensor]) -> list[Request]:
        """Finish a step's chunks (`logits`: each computed chunk's last row, by id); returns the fresh
        requests whose prefill it completed (their first tokens sampled)."""
        started = []
        for chunk in chunks:
            if not chunk.last:
                continue
            request = chunk.request
            if request.fresh:
                first = request.sequences[0]
                for sibling in request.sequences[1:]:
                    self.cache.copy_pages(first.pages, sibling.pages)
                    sibling.cached = first.cached
                row = logits[id(chunk)]
                self._sample(request.sequences, row.unsqueeze(0).expand(len(request.sequences), -1).clone())
                started.append(request)
            self.scheduler.prefill_finished(request)
        return started

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        for seq, token in zip(seqs, sample(logits, [s.sampling for s in seqs]), strict=True):
            self._append(seq, token)

    def _append(self, seq: Sequence, token: int) -> None:
        state = seq.sampling
        state.token_ids.append(token)
        state.generated += 1
        seq.new_token_ids.append(token)
        seq.new_text += seq.text.push(token)
        params = state.params
        if seq.text.stopped or (token == EOS_TOKEN_ID and not params.ignore_eos):
            seq.finish_reason = FinishReason.STOP
        elif state.generated >= params.max_tokens:
            seq.finish_reason = FinishReason.LENGTH
        if seq.finish_reason is not None:
            seq.new_text += seq.text.finish()

    def _output(self, request: Request, now: float) -> RequestOutput:
        seqs = request.sequences
        texts, token_ids, totals, reasons = zip(
            *[(seq.new_text, tuple(seq.new_token_ids), seq.sampling.generated, seq.finish_reason) for seq in seqs],
            strict=True,
        )
        for seq in seqs:
            seq.new_text = ""
            seq.new_token_ids.clear()
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
