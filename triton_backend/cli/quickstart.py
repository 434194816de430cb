"""`nlg-quickstart`: start a local tritonserver with GPT-2 on CPU, stream one generation, stop."""

from __future__ import annotations

import argparse
import sys
import time

from triton_backend.cli.client import stream_generate
from triton_backend.launch import TritonServer
from triton_backend.model_shapes import PRESETS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nlg-quickstart", description=__doc__)
    parser.add_argument("prompt", nargs="?", default="Once upon a time")
    parser.add_argument("--preset", choices=PRESETS, default="gpt2")
    parser.add_argument("--weights-path", default="")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    env = {"NLG_PRESET": args.preset, "NLG_WEIGHTS_PATH": args.weights_path}
    print(f"starting tritonserver with {args.preset} on 127.0.0.1 ...", flush=True)
    with TritonServer(env=env) as server:
        print(f"ready: HTTP {server.http_url}, gRPC {server.grpc_url}, metrics {server.metrics_url}")
        if not args.weights_path:
            print("(no --weights-path: RANDOM weights, so the text is noise; the streaming is real)")
        print(f"prompt: {args.prompt!r}\n---", flush=True)
        start = time.monotonic()
        tokens = 0
        for delta in stream_generate(
            server.grpc_url, args.prompt, {"max_tokens": args.max_tokens, "seed": 0}
        ):
            sys.stdout.write(delta.texts[0])
            sys.stdout.flush()
            tokens += 1
        elapsed = time.monotonic() - start
        print(f"\n---\n{tokens} responses in {elapsed:.2f}s ({elapsed / max(tokens, 1) * 1000:.1f} ms each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
