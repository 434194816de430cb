"""Serving statistics as plain data, derived from the engine's outputs off the token path.

`RequestTracker` turns the stream of `RequestOutput`s into `Observations` (latencies, token counts,
finished requests); `triton_metrics` maps them onto Prometheus instruments. Per-token latency is the
thesis's: a choice's latency from arrival to its last token, over the tokens it generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triton_backend.buckets import LATENCY_BUCKETS, TOKEN_BUCKETS
from triton_backend.outputs import FinishReason, RequestOutput

__all__ = ["LATENCY_BUCKETS", "TOKEN_BUCKETS", "Observations", "RequestTracker"]


@dataclass
class Observations:
    request_latency: list[float] = field(default_factory=list)
    time_to_first_token: list[float] = field(default_factory=list)
    time_per_output_token: list[float] = field(default_factory=list)
    inter_token_latency: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=dict)


@dataclass
class _Choice:
    first: float | None = None
    last: float | None = None
    done: bool = False


class RequestTracker:
    def __init__(self) -> None:
        self._choices: dict[str, list[_Choice]] = {}

    def observe(self, output: RequestOutput, into: Observations) -> None:
        choices = self._choices.get(output.request_id)
        if choices is None:
            choices = self._choices[output.request_id] = [_Choice() for _ in output.new_tokens]
            if output.error is None:
                into.prompt_tokens += output.num_input_tokens
        for choice, new, total, reason in zip(
            choices, output.new_tokens, output.total_tokens, output.finish_reasons, strict=True
        ):
            if new:
                into.generation_tokens += new
                if choice.first is None:
                    choice.first = output.time
                    into.time_to_first_token.append(output.time - output.arrival)
                elif choice.last is not None:
                    # Steps run back to back hand over their tokens in one output: each token is one gap,
                    # the interval's share, so the count stays a token's and the sum the decode time.
                    into.inter_token_latency.extend([(output.time - choice.last) / new] * new)
                choice.last = output.time
            if reason is not None and not choice.done:
                choice.done = True
                if total and choice.last is not None and reason in (FinishReason.STOP, FinishReason.LENGTH):
                    into.time_per_output_token.append((choice.last - output.arrival) / total)
        if output.finished:
            del self._choices[output.request_id]
            request_reason = request_finish_reason(output)
            into.finished[request_reason] = into.finished.get(request_reason, 0) + 1
            if request_reason in ("stop", "length"):
                into.request_latency.append(output.time - output.arrival)


def request_finish_reason(output: RequestOutput) -> str:
    """One reason for the whole request: error, else cancelled, else length if any choice ran out."""
    reasons = {r for r in output.finish_reasons if r is not None}
    for reason in (FinishReason.ERROR, FinishReason.CANCELLED, FinishReason.LENGTH):
        if reason in reasons:
            return str(reason.value)
    return str(FinishReason.STOP.value)
