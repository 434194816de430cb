"""What a request may ask for, and the one place its input is checked.

The keys follow vLLM's SamplingParams, as Triton's vLLM backend takes them in the
`sampling_parameters` JSON string; they cover the thesis's Table 4.1. Every problem is reported at
once, each naming the field and what is allowed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Final

from triton_backend.model_shapes import CONTEXT_LENGTH


class InvalidRequest(ValueError):
    """A request the server refuses; the message names every bad field."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    no_repeat_ngram_size: int = 0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    # Sponge-style SLO: seconds from arrival by which the request should finish; orders the queue.
    deadline: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Limits:
    """Server-side bounds from the model configuration."""

    max_n: int = 8
    context_length: int = CONTEXT_LENGTH
    max_stop_strings: int = 8
    max_stop_chars: int = 256  # each stop string
    # The JSON string: every key with a long value fits in far less; a bound keeps parsing cheap.
    max_parameters_bytes: int = 16384
    # Larger than any prompt that fits the context can be (its tokens are at most this many bytes
    # each): what is longer is refused before it is tokenized.
    max_token_bytes: int = 128

    @property
    def max_prompt_bytes(self) -> int:
        return self.context_length * self.max_token_bytes


# Integers beyond these many bits are described, not printed (Python refuses to print some of them).
_SHOWN_BITS = 128

#: The largest integer a key takes where nothing tighter applies: what an int64 holds.
INT64_MAX: Final = 2**63 - 1


def int_bounds(limits: Limits) -> dict[str, tuple[int, int]]:
    """The inclusive range each integer key is checked against (max_tokens and min_tokens then meet
    the prompt's share of the context and each other)."""
    return {
        "max_tokens": (1, limits.context_length),
        "min_tokens": (0, limits.context_length),
        "n": (1, limits.max_n),
        "top_k": (0, INT64_MAX),
        "no_repeat_ngram_size": (0, INT64_MAX),
        "seed": (0, INT64_MAX),
    }


def show_range(low: int, high: int) -> str:
    """``[0, 2^63-1]``: the form error messages and the README's table write a range in."""
    return f"[{low}, {'2^63-1' if high == INT64_MAX else high}]"


class HugeInt:
    """A JSON integer of more digits than Python converts (4300 by default): kept as its length, so
    that the key it was given for is named in the error instead of the parser failing on it."""

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(text: str) -> int | HugeInt:
    try:
        return int(text)
    except ValueError:
        return HugeInt(text)


def loads(text: str) -> Any:
    """``json.loads`` whose integers past Python's digit limit become :class:`HugeInt`."""
    return json.loads(text, parse_int=_parse_int)


def show(value: Any) -> str:
    """A client's value for an error message, kept short whatever the client sent."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _SHOWN_BITS:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


@dataclass
class _Checker:
    errors: list[str] = field(default_factory=list)

    def int_field(self, raw: dict[str, Any], key: str, default: int, bounds: tuple[int, int], note: str = "") -> int:
        value = raw.get(key, default)
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.errors.append(f"{key}: must be an integer in {show_range(low, high)}{note}, got {show(value)}")
            return default
        return value

    def float_field(self, raw: dict[str, Any], key: str, default: float, rule: str = "") -> float | None:
        value = raw.get(key, default)
        finite = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(value, int) and finite:
            finite = value.bit_length() <= 1023  # larger ones have no float
        elif finite:
            finite = math.isfinite(value)
        if not finite:
            self.errors.append(f"{key}: must be a finite number{rule}, got {show(value)}")
            return None
        return float(value)


_ALLOWED = (
    "max_tokens", "min_tokens", "n", "temperature", "top_p", "top_k",
    "no_repeat_ngram_size", "stop", "seed", "ignore_eos", "deadline",
)  # fmt: skip


def parse_sampling_params(text: str | None, prompt_tokens: int, limits: Limits) -> SamplingParams:
    """Parse the `sampling_parameters` JSON string; raise InvalidRequest naming every bad field."""
    if text is None or text.strip() == "":
        raw: Any = {}
    elif len(text.encode("utf-8", "surrogatepass")) > limits.max_parameters_bytes:
        raise InvalidRequest([f"sampling_parameters: at most {limits.max_parameters_bytes} bytes of JSON"])
    else:
        try:
            raw = loads(text)
        except json.JSONDecodeError as err:
            raise InvalidRequest(
                [f"sampling_parameters: must be a JSON object, got invalid JSON ({err})"]
            ) from err
        except RecursionError as err:
            raise InvalidRequest(["sampling_parameters: must be a flat JSON object, got one nested too deep"]) from err
    if not isinstance(raw, dict):
        raise InvalidRequest([f"sampling_parameters: must be a JSON object, got {type(raw).__name__}"])
    # Triton's vLLM clients send every value as a string of JSON at times ("max_tokens": "32").
    raw = {k: v if k == "stop" else _unquote(v) for k, v in raw.items()}
    check = _Checker()
    unknown = sorted(set(raw) - set(_ALLOWED))
    if unknown:
        check.errors.append(f"sampling_parameters: unknown keys {show(unknown)}; allowed: {', '.join(_ALLOWED)}")

    bounds = int_bounds(limits)
    max_tokens = check.int_field(raw, "max_tokens", 16, bounds["max_tokens"])
    min_tokens = check.int_field(raw, "min_tokens", 0, bounds["min_tokens"], " and <= max_tokens")
    n = check.int_field(raw, "n", 1, bounds["n"])
    top_k = check.int_field(raw, "top_k", 0, bounds["top_k"], " (0 disables top-k)")
    ngram = check.int_field(raw, "no_repeat_ngram_size", 0, bounds["no_repeat_ngram_size"], " (0 disables it)")
    temperature = check.float_field(raw, "temperature", 1.0, " >= 0 (0 is greedy)")
    if temperature is not None and temperature < 0:
        check.errors.append(f"temperature: must be a finite number >= 0 (0 is greedy), got {temperature}")
    top_p = check.float_field(raw, "top_p", 1.0, " in (0, 1]")
    if top_p is not None and not 0 < top_p <= 1:
        check.errors.append(f"top_p: must be a finite number in (0, 1], got {top_p}")
    if min_tokens > max_tokens:
        check.errors.append(f"min_tokens: must be <= max_tokens ({max_tokens}), got {min_tokens}")
    if prompt_tokens + max_tokens > limits.context_length:
        check.errors.append(
            f"max_tokens: prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) must be <= "
            f"the {limits.context_length}-token context"
        )

    stop = raw.get("stop", [])
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        check.errors.append(f"stop: must be a non-empty string or a list of them, got {show(stop)}")
        stop = []
    elif len(stop) > limits.max_stop_strings:
        check.errors.append(f"stop: at most {limits.max_stop_strings} strings, got {len(stop)}")
    elif any(len(s) > limits.max_stop_chars for s in stop):
        check.errors.append(f"stop: each string at most {limits.max_stop_chars} characters")

    seed = raw.get("seed")
    if seed is not None:
        seed = check.int_field(raw, "seed", -1, bounds["seed"])
        seed = None if seed < 0 else seed
    ignore_eos = raw.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        check.errors.append(f"ignore_eos: must be true or false, got {show(ignore_eos)}")
        ignore_eos = False
    deadline = raw.get("deadline")
    if deadline is not None:
        deadline = check.float_field(raw, "deadline", 0.0, " > 0 (seconds)")
        if deadline is not None and deadline <= 0:
            check.errors.append(f"deadline: must be a finite number > 0 (seconds), got {deadline}")
    if check.errors:
        raise InvalidRequest(check.errors)
    return SamplingParams(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        n=n,
        temperature=temperature if temperature is not None else 1.0,
        top_p=top_p if top_p is not None else 1.0,
        top_k=top_k,
        no_repeat_ngram_size=ngram,
        stop=tuple(stop),
        seed=seed,
        ignore_eos=ignore_eos,
        deadline=deadline,
    )


def _unquote(value: Any) -> Any:
    if isinstance(value, str):
        try:
            decoded = loads(value)
        except (ValueError, RecursionError):  # not JSON: kept as text
            return value
        # Only numbers and booleans are unquoted: a stop string "1" stays a string.
        if isinstance(decoded, bool | int | float | HugeInt):
            return decoded
    return value
