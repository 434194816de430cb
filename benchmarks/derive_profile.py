"""Derive (not measure) an engine profile for the thesis's setting: GPT2-XL, fp16, one NVIDIA T4.

No T4 is available to this project, so this profile is a roofline model of the project's engine on
that GPU, with every assumption written into the profile's ``notes`` and ``extra``:

* a decode step reads all weights once (2 bytes x 1.558e9 parameters) and the batch's KV cache
  (2 x 48 layers x 1600 x 2 bytes = 307,200 bytes a cached token), at an effective 240 GB/s (75% of
  the T4's 320 GB/s), or computes 2 x 1.558e9 FLOPs a sequence at an effective 20 TFLOP/s, whichever
  is slower; plus a fixed 6 ms a step (about 700 kernel launches of a 48-layer eager PyTorch forward)
  and 0.2 ms a sequence (sampling and detokenizing);
* a prefill chunk of n tokens is the same with n tokens in place of the batch, plus its attention;
* max batch 32: (15 GB usable - 3.1 GB weights - 1.5 GB workspace) / 315 MB a 1,024-token slot;
* start-up 40 s: a pod with the model already on the node's disk (as in the thesis), container and
  Python backend start, torch import, 3.1 GB to the GPU, CUDA context. Assumed, not measured.

Usage (from the repository root): python -m benchmarks.derive_profile [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nlgsim.profile import EngineProfile

PARAMS = 1.558e9
WEIGHT_BYTES = 2 * PARAMS
KV_BYTES_PER_TOKEN = 2 * 48 * 1600 * 2
BANDWIDTH = 240e9
FLOPS = 20e12
STEP_FIXED_S = 0.006
PER_SEQ_S = 0.0002
MAX_BATCH = 32
STARTUP_S = 40.0
CHUNK = 256


def decode_s(batch: int, context: int) -> float:
    weights = max(WEIGHT_BYTES / BANDWIDTH, 2 * PARAMS * batch / FLOPS)
    kv = batch * context * KV_BYTES_PER_TOKEN / BANDWIDTH
    return STEP_FIXED_S + weights + kv + PER_SEQ_S * batch


def prefill_s(tokens: int) -> float:
    """P(n): the chunks of an n-token prompt, each a forward over its tokens and the cache before it."""
    total, start = 0.0, 0
    while start < tokens:
        end = min(tokens, start + CHUNK)
        n = end - start
        weights = max(WEIGHT_BYTES / BANDWIDTH, 2 * PARAMS * n / FLOPS)
        attention = 4 * 48 * 1600 * n * end / FLOPS + end * KV_BYTES_PER_TOKEN / BANDWIDTH
        total += STEP_FIXED_S + weights + attention + PER_SEQ_S
        start = end
    return total


def derive() -> EngineProfile:
    batches = (1, 2, 4, 8, 16, 24, 32)
    contexts = (32, 128, 256, 512, 768, 1024)
    prompts = (16, 64, 128, 256, 384, 512, 768, 1024)
    return EngineProfile(
        hardware="cuda: NVIDIA T4 (16 GB), DERIVED roofline model, not measured",
        preset="gpt2-xl",
        dtype="float16",
        source="derived",
        max_batch=MAX_BATCH,
        max_context=1024,
        prefill_chunk_tokens=CHUNK,
        startup_s=STARTUP_S,
        decode_batch=batches,
        decode_context=contexts,
        decode_s=tuple(tuple(round(decode_s(b, c), 6) for c in contexts) for b in batches),
        prefill_tokens=prompts,
        prefill_s=tuple(round(prefill_s(n), 6) for n in prompts),
        notes=(
            "DERIVED, not measured: a roofline model of the project's engine serving GPT2-XL in fp16 on one "
            "NVIDIA T4 (the thesis's setting), made by benchmarks/derive_profile.py; see its docstring for "
            "every assumption. Use it to reproduce the thesis's experiments, not to size real T4 deployments."
        ),
        extra={
            "weight_bytes": WEIGHT_BYTES,
            "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
            "effective_bandwidth_bytes_s": BANDWIDTH,
            "effective_flops": FLOPS,
            "step_fixed_s": STEP_FIXED_S,
            "per_sequence_s": PER_SEQ_S,
            "startup_s_assumed": STARTUP_S,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/profiles/t4-gpt2-xl-fp16-derived.json"))
    args = parser.parse_args()
    derive().save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
