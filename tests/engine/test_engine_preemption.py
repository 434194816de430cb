"""S3: admission on predicted lengths, and preemption when a prediction was too short."""

from __future__ import annotations

import pytest
from engine_testkit import greedy_reference, ids_of, make_engine, run, tiny_model

from triton_backend.length_predictor import LengthPredictor, PredictorConfig
from triton_backend.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def trained_predictor(params: SamplingParams, prompt_tokens: int, generated: int) -> LengthPredictor:
    predictor = LengthPredictor(PredictorConfig(min_history=4))
    for _ in range(4):
        predictor.observe(params, prompt_tokens, generated, predicted=params.max_tokens)
    return predictor


def test_predictor_learns_short_outputs_per_group():
    params = SamplingParams(max_tokens=200)
    predictor = LengthPredictor(PredictorConfig(min_history=4))
    assert predictor.predict(params, 20) == 200  # no history: assume the worst
    for generated in (10, 12, 9, 14):
        predictor.observe(params, 20, generated, predicted=200)
    assert predictor.predict(params, 20) == 16  # the bucket over the observed quantile
    assert predictor.predict(SamplingParams(max_tokens=200, n=2), 20) == 200  # another group
    assert predictor.predict(SamplingParams(max_tokens=8), 20) == 8  # never above max_tokens


def test_underestimated_lengths_are_preempted_and_finish_exactly(model):
    params = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
    prompts = {f"r{i}": [100 + i, 200 + i, 300 + i] + list(range(400, 417)) for i in range(4)}
    # Recent requests of this kind stopped after ~16 tokens, so these four are admitted together,
    # but each really runs to 100 tokens: 4 x 120 tokens is more than 24 pages (384 tokens).
    predictor = trained_predictor(params, 20, 16)
    engine = make_engine(model, pages=24, chunk=32, predictor=predictor)
    results = run(engine, {0: [(rid, prompt, params) for rid, prompt in prompts.items()]})
    assert engine.stats().preemptions > 0
    for rid, prompt in prompts.items():
        got = ids_of(results[rid])
        assert len(got) == 100, rid
        assert got == greedy_reference(model, prompt, 100), rid
        assert results[rid].final.finish_reasons[0].value == "length"
    assert engine.stats().kv_pages_used == 0


def test_preempted_choices_of_one_request_each_resume_their_own_text(model):
    params = SamplingParams(max_tokens=100, n=3, temperature=1.0, seed=9, ignore_eos=True)
    prompt = [15496, 995, 11]

    def generate(pages: int, predictor: LengthPredictor) -> list[list[int]]:
        engine = make_engine(model, pages=pages, predictor=predictor)
        other = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
        result = run(engine, {0: [("other", [7, 8, 9], other)], 1: [("r", prompt, params)]})
        if pages < 28:
            assert engine.stats().preemptions > 0
        return [ids_of(result["r"], i) for i in range(3)]

    roomy = generate(512, LengthPredictor())
    # "r" is predicted at 16 tokens a choice, so it is admitted beside "other" (7 pages); its three
    # choices then grow to 21 pages, more than the 24 pages hold with "other" running.
    tight = generate(24, trained_predictor(params, 3, 16))
    assert tight == roomy


def test_the_predictors_counts_reach_the_engines_stats(model):
    params = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
    prompts = {f"r{i}": [100 + i, 200 + i, 300 + i] + list(range(400, 417)) for i in range(4)}
    engine = make_engine(model, pages=512, chunk=32, predictor=trained_predictor(params, 20, 16))
    run(engine, {0: [(rid, prompt, params) for rid, prompt in prompts.items()]})
    stats = engine.stats()
    # Four arrivals, each predicted at 16 tokens; with room for all (no preemption doubles a prediction)
    # every choice ran to 100.
    assert (stats.length_predictions, stats.length_underestimates) == (4, 4)
