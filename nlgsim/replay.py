"""Replay requests against a real Triton serving model_repository/gpt2, and time them from the client.

Open loop: each request is sent at its arrival time (relative to the start of the replay), whatever
is still in flight, over one gRPC stream (tritonclient's decoupled streaming). A prompt of n tokens
is n plain words that GPT-2 tokenizes as one token each, drawn from the request's id (the server's
``num_input_tokens`` checks it); each choice generates exactly its output length (``max_tokens`` with
``ignore_eos``).

Measured per request, on the client's clock: the first response carrying text (TTFT), the final
response (latency), and the tokens generated, so the thesis's per-token latency is latency / tokens
of the longest choice, as the simulator reports it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nlgsim.workload import Request


@dataclass
class Measured:
    request: Request
    sent: float = -1.0
    first: float = -1.0
    last: float = -1.0
    tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0

    @property
    def ttft(self) -> float:
        return self.first - self.sent

    @property
    def latency(self) -> float:
        return self.last - self.sent

    @property
    def per_token(self) -> float:
        """Latency over the longest choice's tokens (the slowest choice per token, as all end together)."""
        return self.latency / max(max(self.tokens, default=1), 1)


def replay(
    url: str,
    requests: Sequence[Request],
    model: str = "gpt2",
    temperature: float = 1.0,
    timeout: float = 600.0,
    progress: Callable[[int], None] | None = None,
) -> list[Measured]:
    """Send ``requests`` at their arrival times; returns one ``Measured`` each, in the same order."""
    import tritonclient.grpc as grpcclient

    from triton_backend.cli.requests import generate_inputs, prompt_of

    measured = {str(r.id): Measured(r) for r in requests}
    done = threading.Event()
    remaining = [len(requests)]
    errors: list[str] = []
    lock = threading.Lock()

    def on_response(result: Any, error: Any) -> None:
        now = time.perf_counter()
        if error is not None:  # the stream's errors do not name their request: count them, fail at the end
            with lock:
                errors.append(str(error))
                remaining[0] -= 1
                if remaining[0] <= 0:
                    done.set()
            return
        response = result.get_response()
        m = measured[response.id]
        texts = result.as_numpy("text_output")
        counts = result.as_numpy("num_output_tokens")
        ninput = result.as_numpy("num_input_tokens")
        final = response.parameters.get("triton_final_response")
        with lock:
            if texts is not None and m.first < 0:
                m.first = now
            if counts is not None:
                if not m.tokens:
                    m.tokens = [0] * len(counts.reshape(-1))
                m.tokens = [a + int(b) for a, b in zip(m.tokens, counts.reshape(-1), strict=True)]
            if ninput is not None:
                m.input_tokens = int(ninput.reshape(-1)[0])
            if final is not None and final.bool_param:
                m.last = now
                remaining[0] -= 1
                if progress is not None:
                    progress(1)
                if remaining[0] <= 0:
                    done.set()

    ordered = sorted(requests, key=lambda r: r.arrival)
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=on_response)
        try:
            start = time.perf_counter()
            for r in ordered:
                delay = start + r.arrival - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sampling = {
                    "max_tokens": max(r.output_tokens),
                    "n": r.choices,
                    "ignore_eos": True,
                    "temperature": temperature,
                }
                inputs = generate_inputs(
                    prompt_of(r.prompt_tokens, random.Random(r.id)),
                    sampling,
                    return_num_output_tokens=True,
                    return_num_input_tokens=True,
                )
                m = measured[str(r.id)]
                m.sent = time.perf_counter()
                client.async_stream_infer(
                    model, inputs, request_id=str(r.id), enable_empty_final_response=True
                )
            if not done.wait(timeout):
                raise TimeoutError(f"{remaining[0]} requests unanswered after {timeout:.0f} s")
        finally:
            client.stop_stream()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed; first: {errors[0]}")
    for m in measured.values():
        m.sent -= start
        m.first -= start
        m.last -= start
    return [measured[str(r.id)] for r in requests]
