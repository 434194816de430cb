"""Engine profiles: how long one replica's engine takes to prefill, to decode and to start.

A profile is a JSON file written by ``python -m nlgsim profile`` (measured on the real engine) or
by hand (derived from another profile, and then labelled ``"source": "derived"``). It names the
hardware, the model preset and the dtype, so a result can always be traced to the machine it models.

Decode step latency is a table over batch size (running sequences) and mean context length (prompt
plus generated tokens, averaged over the batch); prefill latency is a table over prompt length.
Lookups interpolate linearly and extrapolate linearly from the last two points, so a profile measured
up to batch 16 still answers for batch 20 (with a growing error: prefer measuring the whole range).

The profile itself lives in :mod:`autoscaler.profile` (the live planner reads it); this module adds
the synthetic profiles of tests and what-if questions.
"""

from __future__ import annotations

from autoscaler.profile import SOURCES, EngineProfile, load_profile, profile_from_dict

__all__ = ["SOURCES", "EngineProfile", "linear_profile", "load_profile", "profile_from_dict"]


def linear_profile(
    *,
    step_base_s: float = 0.02,
    step_per_seq_s: float = 0.002,
    step_per_ctx_token_s: float = 0.0,
    prefill_base_s: float = 0.01,
    prefill_per_token_s: float = 0.0005,
    max_batch: int = 16,
    max_context: int = 1024,
    prefill_chunk_tokens: int = 256,
    startup_s: float = 30.0,
) -> EngineProfile:
    """A synthetic profile with linear costs, for tests and for what-if questions about hardware."""
    batches = (1, max_batch) if max_batch > 1 else (1,)
    contexts = (1, max_context)
    decode = tuple(
        tuple(step_base_s + step_per_seq_s * b + step_per_ctx_token_s * b * c for c in contexts) for b in batches
    )
    return EngineProfile(
        hardware="synthetic",
        preset="synthetic",
        dtype="n/a",
        source="synthetic",
        max_batch=max_batch,
        max_context=max_context,
        prefill_chunk_tokens=prefill_chunk_tokens,
        startup_s=startup_s,
        decode_batch=batches,
        decode_context=contexts,
        decode_s=decode,
        prefill_tokens=(1, max_context),
        prefill_s=(prefill_base_s + prefill_per_token_s, prefill_base_s + prefill_per_token_s * max_context),
    )
