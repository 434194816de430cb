"""Hand-made profiles and requests with round numbers, so timelines can be worked out on paper."""

from __future__ import annotations

from nlgsim.profile import EngineProfile, linear_profile
from nlgsim.workload import Request


def paper_profile(max_batch: int = 8, startup_s: float = 10.0, chunk: int = 256) -> EngineProfile:
    """decode(b) = 10 ms + 1 ms * b; prefill P(n) = 20 ms + 1 ms * n (a chunk from s to e: P(e) - P(s))."""
    return linear_profile(
        step_base_s=0.010,
        step_per_seq_s=0.001,
        prefill_base_s=0.020,
        prefill_per_token_s=0.001,
        max_batch=max_batch,
        startup_s=startup_s,
        prefill_chunk_tokens=chunk,
    )


def req(i: int, arrival: float, prompt: int = 10, *tokens: int) -> Request:
    return Request(i, arrival, prompt, tuple(tokens) or (3,))
