"""Derive (not measure) engine profiles for the thesis's setting: GPT2-XL, fp16, one NVIDIA T4.

No T4 is available to this project, so these profiles are roofline models of the project's engine on
that GPU, with every assumption written into the profile's ``notes`` and ``extra``:

* a decode step reads all weights once (2 bytes x 1.558e9 parameters) and the batch's KV cache
  (2 x 48 layers x 1600 x 2 bytes = 307,200 bytes a cached token) at an effective bandwidth, or
  computes 2 x 1.558e9 FLOPs a sequence at an effective 20 TFLOP/s, whichever is slower; plus a fixed
  cost a step (kernel launches) and 0.2 ms a sequence (sampling and detokenizing);
* a prefill chunk of n tokens is the same with n tokens in place of the batch, plus its attention;
* start-up 40 s: a pod with the model already on the node's disk (as in the thesis), container and
  Python backend start, torch import, 3.1 GB to the GPU, CUDA context. Assumed, not measured.

Two sets of assumptions (:data:`VARIANTS`):

* ``roofline``: 75% of the T4's 320 GB/s, 6 ms a step (about 700 kernel launches of a 48-layer eager
  PyTorch forward), max batch 32 ((15 GB usable - 3.1 GB weights - 1.5 GB workspace) / 315 MB a
  1,024-token slot). A lone sequence takes about 19 ms a token.
* ``calibrated``: set so that one replica carries what the thesis's chapter 4 measured one T4 carry
  (simple queries: served at 40 req/s, not at 80; complex: 2, 3 and 4 GPUs top out at 13, 20 and 30
  req/s, about 6.5-7.5 a GPU), where ``roofline`` carries 22 and 3.9. 87.5% of 320 GB/s and 1 ms a
  step (a fused engine with CUDA graphs, as the thesis's Triton-like one may have been), max batch 64
  (the project's ``max_num_seqs``: paged KV holds 64 sequences of a complex request's length in
  3 GB). A lone sequence takes about 12 ms a token.

Usage (from the repository root): python -m benchmarks.derive_profile [--variant NAME] [--out PATH]
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from nlgsim.profile import EngineProfile

PARAMS = 1.558e9
WEIGHT_BYTES = 2 * PARAMS
KV_BYTES_PER_TOKEN = 2 * 48 * 1600 * 2
FLOPS = 20e12
PER_SEQ_S = 0.0002
STARTUP_S = 40.0
CHUNK = 256
PROFILES = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Assumptions:
    bandwidth: float
    """Effective bytes a second that a step's weight and KV reads stream at."""
    step_fixed_s: float
    max_batch: int
    why: str


VARIANTS = {
    "roofline": Assumptions(240e9, 0.006, 32, "a roofline model of an eager engine"),
    "calibrated": Assumptions(
        280e9, 0.001, 64, "calibrated to the one-T4 capacities the thesis measured (ch. 4: simple 40 req/s, complex ~7)"
    ),
}
OUT = {
    "roofline": PROFILES / "t4-gpt2-xl-fp16-derived.json",
    "calibrated": PROFILES / "t4-gpt2-xl-fp16-calibrated.json",
}


def decode_s(a: Assumptions, batch: int, context: int) -> float:
    weights = max(WEIGHT_BYTES / a.bandwidth, 2 * PARAMS * batch / FLOPS)
    kv = batch * context * KV_BYTES_PER_TOKEN / a.bandwidth
    return a.step_fixed_s + weights + kv + PER_SEQ_S * batch


def prefill_s(a: Assumptions, tokens: int) -> float:
    """P(n): the chunks of an n-token prompt, each a forward over its tokens and the cache before it."""
    total, start = 0.0, 0
    while start < tokens:
        end = min(tokens, start + CHUNK)
        n = end - start
        weights = max(WEIGHT_BYTES / a.bandwidth, 2 * PARAMS * n / FLOPS)
        attention = 4 * 48 * 1600 * n * end / FLOPS + end * KV_BYTES_PER_TOKEN / a.bandwidth
        total += a.step_fixed_s + weights + attention + PER_SEQ_S
        start = end
    return total


def derive(variant: str = "roofline") -> EngineProfile:
    a = VARIANTS[variant]
    batches = tuple(b for b in (1, 2, 4, 8, 16, 24, 32, 48, 64) if b <= a.max_batch)
    contexts = (32, 128, 256, 512, 768, 1024)
    prompts = (16, 64, 128, 256, 384, 512, 768, 1024)
    return EngineProfile(
        hardware=f"cuda: NVIDIA T4 (16 GB), DERIVED ({variant}), not measured",
        preset="gpt2-xl",
        dtype="float16",
        source="derived",
        max_batch=a.max_batch,
        max_context=1024,
        prefill_chunk_tokens=CHUNK,
        startup_s=STARTUP_S,
        decode_batch=batches,
        decode_context=contexts,
        decode_s=tuple(tuple(round(decode_s(a, b, c), 6) for c in contexts) for b in batches),
        prefill_tokens=prompts,
        prefill_s=tuple(round(prefill_s(a, n), 6) for n in prompts),
        notes=(
            f"DERIVED, not measured: {a.why}, serving GPT2-XL in fp16 on one NVIDIA T4 (the thesis's "
            "setting), made by benchmarks/derive_profile.py; see its docstring for every assumption. Use it "
            "to reproduce the thesis's experiments, not to size real T4 deployments."
        ),
        extra={
            "variant": variant,
            **{k: v for k, v in asdict(a).items() if k != "why"},
            "weight_bytes": WEIGHT_BYTES,
            "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
            "effective_flops": FLOPS,
            "per_sequence_s": PER_SEQ_S,
            "startup_s_assumed": STARTUP_S,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default=None, help="default: write both")
    parser.add_argument("--out", type=Path, help="with --variant: where to write it")
    args = parser.parse_args()
    for variant in [args.variant] if args.variant else sorted(VARIANTS):
        out = args.out if args.out and args.variant else OUT[variant]
        derive(variant).save(out)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
