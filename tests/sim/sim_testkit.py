"""Hand-made profiles and requests with round numbers, so timelines can be worked out on paper; and a
slice of a committed trace at fleet scale."""

from __future__ import annotations

from nlgsim.experiment import parse_workload
from nlgsim.profile import EngineProfile, linear_profile, load_profile
from nlgsim.workload import FleetScale, Request


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


def conv_fleet(duration: float, scale: int = 10) -> tuple[EngineProfile, list[Request]]:
    """The first ``duration`` s of the committed azure2023_conv trace at ``scale`` times its rate (copies up
    to 15 s later, seed 7), prompts scaled by 0.125, on the measured H100 profile: a fleet's load."""
    profile = load_profile("benchmarks/profiles/h100-gpt2-xl-fp16.json")
    requests = parse_workload(
        "trace:benchmarks/traces/azure2023_conv.csv", profile, duration=duration, lengths="scale:0.125",
        scale=FleetScale(scale, 15.0, 7),
    ).requests  # fmt: skip
    return profile, requests
