"""One engine step: schedule, run the model, update; and the engine's statistics.

`Engine` is single-threaded and knows nothing of Triton: `add`, `abort` and `step` are its seams,
`stats` its report. `engine_loop` runs it on a thread; tests and benchmarks call it directly. The
scheduler it is given (`scheduler_interface`; `engine_factory` builds it) owns the requests' state;
the engine runs what a `Schedule` describes (the forward pass, the page copies, the sampling), hands
the sampled tokens back keyed by request id, and turns the scheduler's updates into text.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from triton_backend.detokenizer import TextStream
from triton_backend.engine_stats import EngineStats
from triton_backend.kv_cache import PagedKVCache
from triton_backend.model_runner import DecodeInput, ModelRunner, PrefillInput
from triton_backend.outputs import FinishReason, RequestOutput, RequestUpdate
from triton_backend.sampler import SamplingState, sample
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Schedule
from triton_backend.scheduler_interface import SampledTokens, SchedulerInterface
from triton_backend.sequence import Request, Sequence


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        scheduler: SchedulerInterface,
        token_bytes: list[bytes],
        clock: Callable[[], float],
        seed: int = 0,
    ) -> None:
        self.runner = runner
        self.cache: PagedKVCache = runner.cache
        self.scheduler = scheduler
        self._token_bytes = token_bytes
        self._clock = clock
        # Seeds for requests that name none: reproducible runs of the engine, distinct per choice.
        self._seeds = random.Random(seed)
        # The output side, per request in flight (in arrival order) and choice: the sampler's state (its
        # generator and the tokens its bans read) and the text stream. The scheduler holds neither.
        self._choices: dict[str, list[tuple[SamplingState, TextStream]]] = {}

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def in_flight(self) -> list[str]:
        return list(self._choices)

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams, arrival: float) -> None:
        """ValueError, naming the field, for a request id already in flight or more choices than fit."""
        self.scheduler.add_request(Request.with_choices(request_id, prompt_ids, params, arrival))
        choices = []
        for index in range(params.n):
            seed = params.seed + index if params.seed is not None else self._seeds.getrandbits(63)
            generator = None if params.greedy else torch.Generator().manual_seed(seed)
            state = SamplingState(params, generator, list(prompt_ids), 0)
            choices.append((state, TextStream(self._token_bytes, params.stop)))
        self._choices[request_id] = choices

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request (cancelled by its client) and free its pages; None if it is not here."""
        updates = self.scheduler.finish_requests([request_id], FinishReason.CANCELLED)
        return self._output(updates[0], self._clock(), {}) if updates else None

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        schedule = self.scheduler.schedule()
        decode_logits, chunk_logits = self.runner.step(
            [DecodeInput(seq.pages, seq.last_token, seq.position) for seq in schedule.decode],
            [PrefillInput(c.sequence.pages, c.sequence.token_ids[c.start : c.end], c.start) for c in schedule.prefill],
        )
        if schedule.page_copies:
            self.cache.copy_pages(schedule.page_copies)
        sampled = self._sample(schedule, decode_logits, chunk_logits)
        texts: dict[str, list[str]] = {}  # each choice's new text, by request
        stopped: set[tuple[str, int]] = set()
        for request_id, tokens in sampled.items():
            choices = self._choices[request_id]
            new = texts[request_id] = [""] * len(choices)
            for index, token in tokens.items():
                state, stream = choices[index]
                state.append(token)
                new[index] = stream.push(token)
                if stream.stopped:
                    stopped.add((request_id, index))
        updates = self.scheduler.update_from_output(schedule, SampledTokens(sampled, stopped))
        now = self._clock()
        return [self._output(update, now, texts) for update in updates]

    def stats(self) -> EngineStats:
        return self.scheduler.make_stats()

    def _sample(
        self, schedule: Schedule, decode_logits: torch.Tensor | None, chunk_logits: torch.Tensor | None
    ) -> dict[str, dict[int, int]]:
        """The next token of each decoded choice, and the first of each fresh request's choices whose
        prompt the step completed (all of them from the prompt's last row), by request id and choice."""
        sampled: dict[str, dict[int, int]] = {}

        def take(seqs: list[Sequence], logits: torch.Tensor) -> None:
            states = [self._choices[seq.request_id][seq.index][0] for seq in seqs]
            for seq, token in zip(seqs, sample(logits, states), strict=True):
                sampled.setdefault(seq.request_id, {})[seq.index] = token

        if decode_logits is not None:
            take(schedule.decode, decode_logits)
        if chunk_logits is not None:
            for chunk, row in zip(schedule.prefill, chunk_logits, strict=True):
                if chunk.samples:
                    seqs = list(chunk.samples)
                    take(seqs, row.unsqueeze(0).expand(len(seqs), -1).clone())
        return sampled

    def _output(self, update: RequestUpdate, now: float, texts: dict[str, list[str]]) -> RequestOutput:
        """The update with each choice's new text; a choice that ended releases what its stream held back."""
        request_id = update.request_id
        choices = self._choices.pop(request_id) if update.finished else self._choices[request_id]
        new = texts.get(request_id) or [""] * len(choices)
        for index, reason in enumerate(update.finish_reasons):
            if reason is not None and update.token_ids[index]:  # it ended with a token of this step
                new[index] += choices[index][1].finish()
        return RequestOutput(
            request_id=request_id,
            time=now,
            texts=tuple(new),
            token_ids=update.token_ids,
            total_tokens=update.total_tokens,
            finish_reasons=update.finish_reasons,
            num_input_tokens=update.num_input_tokens,
            finished=update.finished,
            arrival=update.arrival,
        )
