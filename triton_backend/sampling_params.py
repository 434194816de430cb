"""What a request may ask for, and the one place its input is checked.

The keys follow vLLM's SamplingParams, as Triton's vLLM backend takes them in the
`sampling_parameters` JSON string; they cover the thesis's Table 4.1. Every problem is reported at
once, each naming the field and what is allowed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from triton_backend.presets import CONTEXT_LENGTH


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


@dataclass
class _Checker:
    errors: list[str] = field(default_factory=list)

    def int_field(self, raw: dict[str, Any], key: str, default: int, minimum: int, rule: str) -> int:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors.append(f"{key}: must be an integer {rule}, got {value!r}")
            return default
        if value < minimum:
            self.errors.append(f"{key}: must be an integer {rule}, got {value}")
            return default
        return value

    def float_field(self, raw: dict[str, Any], key: str, default: float) -> float | None:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.errors.append(f"{key}: must be a finite number, got {value!r}")
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
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidRequest(
                [f"sampling_parameters: must be a JSON object, got invalid JSON ({err})"]
            ) from err
    if not isinstance(raw, dict):
        raise InvalidRequest([f"sampling_parameters: must be a JSON object, got {type(raw).__name__}"])
    # Triton's vLLM clients send every value as a string of JSON at times ("max_tokens": "32").
    raw = {k: v if k == "stop" else _unquote(v) for k, v in raw.items()}
    check = _Checker()
    unknown = sorted(set(raw) - set(_ALLOWED))
    if unknown:
        check.errors.append(f"sampling_parameters: unknown keys {unknown}; allowed: {', '.join(_ALLOWED)}")

    max_tokens = check.int_field(raw, "max_tokens", 16, 1, ">= 1")
    min_tokens = check.int_field(raw, "min_tokens", 0, 0, ">= 0")
    n = check.int_field(raw, "n", 1, 1, f"in [1, {limits.max_n}]")
    if n > limits.max_n:
        check.errors.append(f"n: must be an integer in [1, {limits.max_n}], got {n}")
    top_k = check.int_field(raw, "top_k", 0, 0, ">= 0 (0 disables top-k)")
    ngram = check.int_field(raw, "no_repeat_ngram_size", 0, 0, ">= 0 (0 disables it)")
    temperature = check.float_field(raw, "temperature", 1.0)
    if temperature is not None and temperature < 0:
        check.errors.append(f"temperature: must be >= 0 (0 is greedy), got {temperature}")
    top_p = check.float_field(raw, "top_p", 1.0)
    if top_p is not None and not 0 < top_p <= 1:
        check.errors.append(f"top_p: must be in (0, 1], got {top_p}")
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
        check.errors.append(f"stop: must be a non-empty string or a list of them, got {stop!r}")
        stop = []
    elif len(stop) > limits.max_stop_strings:
        check.errors.append(f"stop: at most {limits.max_stop_strings} strings, got {len(stop)}")

    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        check.errors.append(f"seed: must be an integer in [0, 2^63), got {seed!r}")
        seed = None
    ignore_eos = raw.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        check.errors.append(f"ignore_eos: must be true or false, got {ignore_eos!r}")
        ignore_eos = False
    deadline = raw.get("deadline")
    if deadline is not None:
        deadline = check.float_field(raw, "deadline", 0.0)
        if deadline is not None and deadline <= 0:
            check.errors.append(f"deadline: must be > 0 seconds, got {deadline}")
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
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        # Only numbers and booleans are unquoted: a stop string "1" stays a string.
        if isinstance(decoded, bool | int | float):
            return decoded
    return value
