"""S3's length predictor: the lengths it keeps in order as they come and go predict what a sort of its
recent history would; its buckets, looked up, are the ones a search finds."""

from __future__ import annotations

import random

from triton_backend.length_predictor import BUCKETS, LengthPredictor, PredictorConfig, _bucket, _search_bucket
from triton_backend.sampling_params import SamplingParams


def sorted_history_prediction(history: list[int], config: PredictorConfig, max_tokens: int) -> int:
    recent = history[-config.history :]
    if len(recent) < config.min_history:
        return max_tokens
    ordered = sorted(recent)
    high = ordered[min(len(ordered) - 1, int(config.quantile * len(ordered)))]
    return min(max_tokens, next((b for b in BUCKETS if b >= high), BUCKETS[-1]))


def test_predictions_follow_the_recent_history_past_its_length():
    config = PredictorConfig(history=16, min_history=4)
    predictor = LengthPredictor(config)
    params = SamplingParams(max_tokens=600, temperature=0.0, ignore_eos=True)
    rng = random.Random(3)
    history: list[int] = []
    for _ in range(200):  # many times the history kept: old lengths leave as new ones come
        want = sorted_history_prediction(history, config, params.max_tokens)
        assert predictor.predict(params, 40) == want
        history.append(rng.choice([1, 5, 5, 30, 200, 600]))
        predictor.observe(params, 40, history[-1], want)


def test_the_looked_up_bucket_is_the_searched_one() -> None:
    assert [_bucket(v) for v in range(2 * BUCKETS[-1])] == [_search_bucket(v) for v in range(2 * BUCKETS[-1])]
