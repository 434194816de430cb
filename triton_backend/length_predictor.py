"""S3's output-length prediction: a length bucket per request, learned online from finished ones.

Requests are grouped by what is known at arrival (the max_tokens bucket, the prompt-length bucket, n,
whether stop strings or EOS can end it early). Each group keeps the lengths its recent requests
produced; the prediction is the bucket that covers a high quantile of them, never above max_tokens.
A group with too little history predicts max_tokens, so the engine is never optimistic blind. Memory
is admitted against the prediction; a sequence that outgrows it takes free pages, and when there are
none the scheduler preempts (S3's recovery from a misprediction).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from triton_backend.sampling_params import SamplingParams

BUCKETS = (16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class PredictorConfig:
    history: int = 64  # finished requests kept per group
    min_history: int = 8  # below this, predict max_tokens
    quantile: float = 0.9


def _search_bucket(value: int) -> int:
    return BUCKETS[min(bisect.bisect_left(BUCKETS, value), len(BUCKETS) - 1)]


_BUCKET_OF = [_search_bucket(value) for value in range(BUCKETS[-1] + 1)]


def _bucket(value: int) -> int:
    """The smallest bucket edge at or above `value` (the largest edge beyond them): looked up, as it is
    asked three times a request."""
    return _BUCKET_OF[value] if value < BUCKETS[-1] else BUCKETS[-1]


def group_of(params: SamplingParams, prompt_tokens: int) -> tuple[int, int, int, bool]:
    can_end_early = bool(params.stop) or not params.ignore_eos
    return (_bucket(params.max_tokens), _bucket(prompt_tokens), params.n, can_end_early)


class LengthPredictor:
    def __init__(self, config: PredictorConfig | None = None) -> None:
        self.config = config or PredictorConfig()
        self._seen: dict[tuple[int, int, int, bool], deque[int]] = {}  # each group's, oldest first
        # The same lengths in order, kept as they come and go: a prediction per request is an index,
        # not a sort.
        self._ordered: dict[tuple[int, int, int, bool], list[int]] = {}
        self.predictions = 0
        self.underestimates = 0

    def predict(self, params: SamplingParams, prompt_tokens: int) -> int:
        """Predicted generated tokens of each choice: a bucket edge, at most max_tokens."""
        self.predictions += 1
        ordered = self._ordered.get(group_of(params, prompt_tokens))
        if ordered is None or len(ordered) < self.config.min_history:
            return params.max_tokens
        high = ordered[min(len(ordered) - 1, int(self.config.quantile * len(ordered)))]
        return min(params.max_tokens, _bucket(high))

    def observe(self, params: SamplingParams, prompt_tokens: int, generated: int, predicted: int) -> None:
        """Learn from a finished choice; `predicted` is what was admitted against it."""
        if generated > predicted:
            self.underestimates += 1
        group = group_of(params, prompt_tokens)
        seen = self._seen.get(group)
        if seen is None:
            seen = self._seen[group] = deque(maxlen=self.config.history)
            self._ordered[group] = []
        ordered = self._ordered[group]
        if len(seen) == seen.maxlen:
            del ordered[bisect.bisect_left(ordered, seen[0])]  # the oldest, which the append drops
        seen.append(generated)
        bisect.insort(ordered, generated)
