"""Builds a small engine in-process and runs it to completion, for tests without Triton."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from transformers import GPT2LMHeadModel

from triton_backend.engine import Engine
from triton_backend.engine_factory import engine_on
from triton_backend.kv_cache import PagedKVCache
from triton_backend.length_predictor import LengthPredictor
from triton_backend.outputs import RequestOutput
from triton_backend.presets import build_model
from triton_backend.runner import cache_shape
from triton_backend.sampling_params import SamplingParams

CPU = torch.device("cpu")


class TickingClock:
    """The engine's clock in tests: each reading is 1 ms after the last, so latencies are positive and
    ordered without sleeping (the autoscaler's FakeClock, by contrast, moves only when told)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def tiny_model() -> GPT2LMHeadModel:
    model, _ = build_model("tiny", None, CPU, torch.float32)
    return model


def make_engine(
    model: GPT2LMHeadModel,
    pages: int = 512,
    chunk: int = 256,
    max_num_seqs: int = 64,
    device: torch.device = CPU,
    cuda_graphs: bool = False,
    predictor: LengthPredictor | None = None,
) -> Engine:
    """The served engine (`engine_on`, as `build_engine` makes it) around a copy of `model`."""
    cache = PagedKVCache(cache_shape(model), pages, device)
    return engine_on(
        served_copy(model), cache, max_num_seqs, chunk, TickingClock(), cuda_graphs=cuda_graphs, predictor=predictor
    )


def served_copy(model: GPT2LMHeadModel) -> GPT2LMHeadModel:
    """The runner takes its model over (on the CPU it packs the projections for oneDNN); tests keep
    the original untouched for transformers' `generate`, the reference."""
    return copy.deepcopy(model)


@dataclass
class Result:
    outputs: list[RequestOutput] = field(default_factory=list)

    @property
    def text(self) -> list[str]:
        choices = len(self.outputs[-1].texts)
        return ["".join(o.texts[i] for o in self.outputs) for i in range(choices)]

    @property
    def final(self) -> RequestOutput:
        return self.outputs[-1]


def run(engine: Engine, arrivals: dict[int, list[tuple[str, list[int], SamplingParams]]]) -> dict[str, Result]:
    """Step the engine; at step k, add the requests arrivals[k]. Returns each request's outputs."""
    results: dict[str, Result] = {}
    step = 0
    while engine.has_work or any(k >= step for k in arrivals):
        for request_id, prompt, params in arrivals.get(step, []):
            engine.add(request_id, prompt, params, arrival=float(step))
            results[request_id] = Result()
        for output in engine.step():
            results[output.request_id].outputs.append(output)
        step += 1
    return results


def greedy_reference(model: GPT2LMHeadModel, prompt: list[int], new_tokens: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=50256,
    )
    return [int(t) for t in out[0, len(prompt) :]]


def ids_of(result: Result, choice: int = 0) -> list[int]:
    return [t for o in result.outputs for t in o.token_ids[choice]]
