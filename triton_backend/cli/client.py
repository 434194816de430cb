"""`nlg-client generate PROMPT`: stream a generation from the gpt2 model over gRPC with tritonclient."""

from __future__ import annotations

import argparse
import queue
import sys
import uuid
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TextIO

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_backend.cli.requests import generate_inputs


@dataclass(frozen=True)
class Delta:
    texts: list[str]
    finish_reasons: list[str]


class ClientError(RuntimeError):
    """The generation did not complete; the message is one line naming the server and why."""


def stream_generate(
    url: str, prompt: str, sampling: dict[str, Any], model: str = "gpt2", timeout: float = 600.0
) -> Generator[Delta, None, None]:
    """Yield each streamed response (text delta of every choice); raise ClientError on an error response,
    an unreachable server, or ``timeout`` seconds without a response. Leaving early cancels the request."""
    with grpcclient.InferenceServerClient(url) as client:
        try:
            # A port nobody listens on fails here at once; one that accepts but never speaks gRPC
            # would otherwise leave the stream waiting for ever.
            client.is_server_live(client_timeout=min(timeout, 10.0))
        except InferenceServerException as e:
            raise ClientError(f"cannot reach Triton at {url}: {_why(e)}") from None
        yield from stream_on(client, url, prompt, sampling, model, timeout)


def stream_on(
    client: grpcclient.InferenceServerClient,
    url: str,
    prompt: str,
    sampling: dict[str, Any],
    model: str = "gpt2",
    timeout: float = 600.0,
) -> Generator[Delta, None, None]:
    """One request on a stream of its own over ``client``'s channel, as an application that keeps its
    client sends each; what it yields and raises is stream_generate's (``url`` names the server)."""
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    inputs = generate_inputs(prompt, sampling, return_finish_reason=True)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    finished = False
    try:
        try:
            client.async_stream_infer(model, inputs, request_id=uuid.uuid4().hex, enable_empty_final_response=True)
        except InferenceServerException as e:  # the stream broke; its callback got the reason
            raise ClientError(f"Triton at {url}: {_why(_first_error(responses) or e)}") from None
        while not finished:
            try:
                result, error = responses.get(timeout=timeout)
            except queue.Empty:
                raise ClientError(f"Triton at {url}: no response within {timeout:g} s") from None
            if error is not None:
                raise ClientError(f"Triton at {url}: {_why(error)}")
            final = result.get_response().parameters.get("triton_final_response")
            finished = final is not None and final.bool_param
            texts = result.as_numpy("text_output")
            if texts is not None:
                reasons = result.as_numpy("finish_reason")
                yield Delta(
                    [t.decode() for t in texts.reshape(-1)],
                    [r.decode() for r in reasons.reshape(-1)] if reasons is not None else [],
                )
    finally:
        # Leaving before the final response (an error, Ctrl-C, a consumer that stopped) cancels it.
        client.stop_stream(cancel_requests=not finished)


def _first_error(responses: queue.Queue[tuple[Any, Any]], wait: float = 1.0) -> Any:
    try:
        return responses.get(timeout=wait)[1]
    except queue.Empty:
        return None


def _why(error: Any) -> str:
    """tritonclient's message without its status prefix, on one line."""
    text = error.message() if isinstance(error, InferenceServerException) else str(error)
    return " ".join(str(text).split()) or type(error).__name__


class ChoicePrinter:
    """Writes a generation: one choice streams as it comes; several are each written on a line of
    their own, ``[i] text``, when they finish (or at the end), so their tokens never interleave."""

    def __init__(self, n: int, out: TextIO) -> None:
        self._n, self._out = n, out
        self._texts = [""] * n
        self._done = [False] * n
        #: A line is open on ``out`` (a single choice streaming): a message should start on a new one.
        self.partial = False

    def add(self, delta: Delta) -> None:
        if self._n == 1:
            text = "".join(delta.texts)
            self._out.write(text)
            self._out.flush()
            self.partial = self.partial or bool(text)
            return
        for index, text in enumerate(delta.texts[: self._n]):
            self._texts[index] += text
            reason = delta.finish_reasons[index] if index < len(delta.finish_reasons) else ""
            if reason and not self._done[index]:
                self._line(index)

    def finish(self) -> None:
        if self._n == 1:
            self._out.write("\n")
            self.partial = False
        for index in range(self._n if self._n > 1 else 0):
            if not self._done[index]:
                self._line(index)
        self._out.flush()

    def _line(self, index: int) -> None:
        self._done[index] = True
        self._out.write(f"[{index}] {self._texts[index]}\n")
        self._out.flush()


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 after a whole generation, 1 when it failed (one line on stderr), 130 on Ctrl-C."""
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
    gen.add_argument("--n", type=int, default=1, help="choices; with more than one each is printed on its own line")
    gen.add_argument("--stop", action="append", default=[])
    gen.add_argument("--seed", type=int)
    gen.add_argument("--ignore-eos", action="store_true", help="generate max_tokens whatever the model says")
    gen.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each response")
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
    if args.ignore_eos:
        sampling["ignore_eos"] = True
    printer = ChoicePrinter(max(args.n, 1), sys.stdout)
    try:
        with closing(stream_generate(args.url, args.prompt, sampling, args.model, args.timeout)) as stream:
            for delta in stream:
                printer.add(delta)
    except ClientError as err:
        return _fail(printer, str(err), 1)
    except KeyboardInterrupt:
        return _fail(printer, "interrupted; a request under way was cancelled", 130)
    printer.finish()
    return 0


def _fail(printer: ChoicePrinter, message: str, status: int) -> int:
    if printer.partial:
        print(flush=True)
    print(f"nlg-client: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
