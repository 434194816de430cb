"""`nlg-client generate PROMPT`: stream a generation from the gpt2 model over gRPC with tritonclient."""

from __future__ import annotations

import argparse
import queue
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import tritonclient.grpc as grpcclient

from triton_backend.cli.requests import generate_inputs


@dataclass(frozen=True)
class Delta:
    texts: list[str]
    finish_reasons: list[str]


def stream_generate(
    url: str, prompt: str, sampling: dict[str, Any], model: str = "gpt2", timeout: float = 600.0
) -> Iterator[Delta]:
    """Yield each streamed response (text delta of every choice); raise on an error response."""
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    inputs = generate_inputs(prompt, sampling, return_finish_reason=True)
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        try:
            client.async_stream_infer(
                model, inputs, request_id=uuid.uuid4().hex, enable_empty_final_response=True
            )
            while True:
                result, error = responses.get(timeout=timeout)
                if error is not None:
                    raise RuntimeError(str(error))
                final = result.get_response().parameters.get("triton_final_response")
                texts = result.as_numpy("text_output")
                if texts is not None:
                    reasons = result.as_numpy("finish_reason")
                    yield Delta(
                        [t.decode() for t in texts.reshape(-1)],
                        [r.decode() for r in reasons.reshape(-1)] if reasons is not None else [],
                    )
                if final is not None and final.bool_param:
                    return
        finally:
            client.stop_stream()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nlg-client")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="stream one generation to stdout")
    gen.add_argument("prompt")
    gen.add_argument("--url", default="127.0.0.1:8001", help="Triton gRPC address")
    gen.add_argument("--model", default="gpt2")
    gen.add_argument("--max-tokens", type=int, default=32)
    gen.add_argument("--temperature", type=float, default=1.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--n", type=int, default=1)
    gen.add_argument("--stop", action="append", default=[])
    gen.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    sampling: dict[str, Any] = {
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "n": args.n,
        "stop": args.stop,
    }
    if args.seed is not None:
        sampling["seed"] = args.seed
    try:
        for delta in stream_generate(args.url, args.prompt, sampling, args.model):
            for index, text in enumerate(delta.texts):
                if text:
                    sys.stdout.write(text if args.n == 1 else f"[{index}]{text}")
            sys.stdout.flush()
    except RuntimeError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        return 1
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
