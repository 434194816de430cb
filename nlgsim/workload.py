"""Workloads: the requests a run replays, from the thesis's query types or from a trace file.

A request is an arrival time, a prompt length and one output length per choice. Two sources:

* the thesis's Table 4.2 query types at a Poisson rate (``thesis_requests``);
* a CSV trace with a timestamp, input tokens and output tokens per row (``load_trace``), such as the
  Azure LLM inference traces. Their lengths are mapped into GPT-2's 1,024-token window by a
  ``LengthMap`` (clip, or scale the prompt by a factor), and the mapping reports what it changed.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    arrival: float
    """Seconds from the start of the run."""
    prompt_tokens: int
    output_tokens: tuple[int, ...]
    """Tokens each choice generates (the replay sets ``max_tokens`` and ``ignore_eos``)."""

    @property
    def choices(self) -> int:
        return len(self.output_tokens)


@dataclass(frozen=True)
class QueryType:
    """A row of the thesis's Table 4.2."""

    name: str
    prompt_tokens: int
    gen_mean: float
    gen_min: int
    gen_max: int
    choices: int

    @property
    def p_max(self) -> float:
        """Probability that a choice runs to ``gen_max`` (max_tokens); otherwise it stops early.

        The table gives min, mean and max only. We model a choice as reaching max_tokens with
        probability p and otherwise stopping at a uniform length in [min, max] (an EOS), and solve
        p from the mean: p = (mean - (min+max)/2) / (max - (min+max)/2).
        """
        mid = (self.gen_min + self.gen_max) / 2
        return (self.gen_mean - mid) / (self.gen_max - mid)

    def mean_tokens(self) -> float:
        return self.gen_mean * self.choices


SIMPLE = QueryType("simple", prompt_tokens=34, gen_mean=30, gen_min=10, gen_max=34, choices=1)
COMPLEX = QueryType("complex", prompt_tokens=82, gen_mean=62, gen_min=15, gen_max=64, choices=4)
QUERY_TYPES = {q.name: q for q in (SIMPLE, COMPLEX)}


def thesis_requests(
    query: QueryType, rate: float, count: int, seed: int, ramp_s: float = 0.0
) -> list[Request]:
    """``count`` requests of one query type arriving as a Poisson process of ``rate`` per second.

    With ``ramp_s`` > 0 the rate rises linearly from 0 to ``rate`` over the first ``ramp_s`` seconds
    (a non-homogeneous Poisson process: unit-rate arrivals mapped through the inverse of the
    cumulative rate), then stays at ``rate``.
    """
    if rate <= 0 or count < 0 or ramp_s < 0:
        raise ValueError(f"rate = {rate} must be > 0, count = {count} >= 0 and ramp_s = {ramp_s} >= 0")
    rng = np.random.default_rng(seed)
    unit = np.cumsum(rng.exponential(1.0, size=count))
    if ramp_s > 0:
        # Cumulative rate: rate t^2 / (2 ramp) before the ramp ends, then rate (t - ramp / 2).
        knee = rate * ramp_s / 2
        arrivals = np.where(unit < knee, np.sqrt(2 * ramp_s * unit / rate), unit / rate + ramp_s / 2)
    else:
        arrivals = unit / rate
    early = rng.integers(query.gen_min, query.gen_max + 1, size=(count, query.choices))
    to_max = rng.random(size=(count, query.choices)) < query.p_max
    lengths = np.where(to_max, query.gen_max, early)
    return [
        Request(i, float(arrivals[i]), query.prompt_tokens, tuple(int(x) for x in lengths[i]))
        for i in range(count)
    ]


@dataclass(frozen=True)
class LengthMap:
    """How trace lengths become lengths the model can serve.

    ``clip``: outputs are capped at ``max_output``, then prompts at ``max_context - output``.
    ``scale``: prompts are multiplied by ``factor`` (rounded, at least 1) first, then clipped the same
    way, so only the few prompts still too long are cut.
    """

    mode: str = "scale"
    factor: float = 0.125
    max_context: int = 1024
    max_output: int = 512

    @classmethod
    def parse(cls, text: str, max_context: int = 1024) -> LengthMap:
        """``clip`` or ``scale:F`` (``scale`` alone means F = 0.125)."""
        mode, _, arg = text.partition(":")
        if mode == "clip" and not arg:
            return cls("clip", 1.0, max_context)
        if mode == "scale":
            factor = float(arg) if arg else 0.125
            if not 0 < factor <= 1:
                raise ValueError(f"--lengths scale:{arg}: the factor must be in (0, 1]")
            return cls("scale", factor, max_context)
        raise ValueError(f"--lengths = {text!r}: use 'clip' or 'scale:F' with 0 < F <= 1 (e.g. scale:0.125)")

    def apply(self, prompt: int, output: int) -> tuple[int, int]:
        out = max(1, min(output, self.max_output, self.max_context - 1))
        p = max(1, round(prompt * self.factor)) if self.mode == "scale" else max(1, prompt)
        return min(p, self.max_context - out), out

    def describe(self) -> str:
        if self.mode == "scale":
            return (
                f"prompt x {self.factor:g}, output capped at {self.max_output}, "
                f"prompt then clipped to {self.max_context} - output"
            )
        return f"output capped at {self.max_output}, prompt clipped to {self.max_context} - output"


@dataclass(frozen=True)
class Trace:
    name: str
    requests: list[Request]
    mapping: str
    prompts_clipped: int
    outputs_clipped: int

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival if self.requests else 0.0


TIME_COLUMNS = ("timestamp", "time", "arrival", "arrival_time", "ts")
INPUT_COLUMNS = ("contexttokens", "input_tokens", "prompt_tokens", "input", "prompt")
OUTPUT_COLUMNS = ("generatedtokens", "output_tokens", "generated_tokens", "output", "completion_tokens")


def _column(header: Sequence[str], names: Sequence[str], what: str, path: Path) -> int:
    lowered = [h.strip().lower() for h in header]
    for n in names:
        if n in lowered:
            return lowered.index(n)
    raise ValueError(
        f"{path}: no {what} column; name it one of {', '.join(names)} (found {', '.join(header)})"
    )


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.strip()).timestamp()


def load_trace(
    path: str | Path,
    lengths: LengthMap | None = None,
    *,
    start: float = 0.0,
    duration: float | None = None,
    speed: float = 1.0,
) -> Trace:
    """Read a CSV trace; keep rows in ``[start, start + duration)`` seconds after its first row.

    Timestamps are seconds (numbers) or ISO dates; rows may come in any order. ``speed`` divides
    inter-arrival times (2.0 replays the trace twice as fast). Lengths go through ``lengths``.
    """
    path = Path(path)
    lengths = lengths or LengthMap()
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(
                f"{path}: empty file; expected a header with timestamp, input and output columns"
            )
        ti = _column(header, TIME_COLUMNS, "timestamp", path)
        ii = _column(header, INPUT_COLUMNS, "input-token", path)
        oi = _column(header, OUTPUT_COLUMNS, "output-token", path)
        rows = []
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                rows.append((_seconds(row[ti]), int(row[ii]), int(row[oi])))
            except (ValueError, IndexError) as e:
                raise ValueError(f"{path}:{lineno}: cannot read {row!r} ({e})") from None
    if speed <= 0 or not math.isfinite(speed):
        raise ValueError(f"speed = {speed}, must be a finite number > 0")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    requests: list[Request] = []
    prompts_clipped = outputs_clipped = 0
    for t, prompt, output in rows:
        rel = t - t0 - start
        if rel < 0 or (duration is not None and rel >= duration):
            continue
        p, o = lengths.apply(prompt, output)
        scaled = max(1, round(prompt * lengths.factor)) if lengths.mode == "scale" else prompt
        prompts_clipped += p < scaled
        outputs_clipped += o < output
        requests.append(Request(len(requests), rel / speed, p, (o,)))
    return Trace(path.stem, requests, lengths.describe(), prompts_clipped, outputs_clipped)
