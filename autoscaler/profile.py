"""Engine profiles: how long one replica's engine takes to prefill, to decode and to start.

A profile is a JSON file written by ``python -m nlgsim profile`` (measured on the real engine) or
by hand (derived from another profile, and then labelled ``"source": "derived"``). It names the
hardware, the model preset and the dtype, so a result can always be traced to the machine it models.
The live planner (:mod:`autoscaler.planner`) sizes replicas from it and the simulator replays it, so
it lives here, in the autoscaler's image, which holds neither torch nor the simulator.

Decode step latency is a table over batch size (running sequences) and mean context length (prompt
plus generated tokens, averaged over the batch); prefill latency is a table over prompt length.
Lookups interpolate linearly and extrapolate linearly from the last two points, so a profile measured
up to batch 16 still answers for batch 20 (with a growing error: prefer measuring the whole range).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from autoscaler.safe_parse import HugeInt, loads_json

SOURCES = ("measured", "derived", "synthetic")


@dataclass(frozen=True)
class EngineProfile:
    """Timing of one replica's engine. Durations are seconds."""

    hardware: str
    preset: str
    dtype: str
    source: str
    max_batch: int
    """Sequences (choices) the engine runs at once: its ``max_num_seqs``."""
    max_context: int
    prefill_chunk_tokens: int
    """Prompt tokens the engine prefills per step (``SchedulerConfig.prefill_chunk_tokens``)."""
    startup_s: float
    """From pod creation to ready (process start, model load, warm-up)."""
    decode_batch: tuple[int, ...]
    decode_context: tuple[int, ...]
    decode_s: tuple[tuple[float, ...], ...]
    """``decode_s[i][j]``: a step of ``decode_batch[i]`` sequences at mean context ``decode_context[j]``."""
    prefill_tokens: tuple[int, ...]
    prefill_s: tuple[float, ...]
    page_size: int = 16
    """Tokens per KV-cache page."""
    kv_pages: int = 0
    """Pages in the KV cache; 0 means room for ``max_batch`` full contexts (the engine's default)."""
    notes: str = ""
    measured_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> list[str]:
        """Every problem with this profile, each naming the JSON key; empty when it is usable."""
        errors: list[str] = []
        if self.source not in SOURCES:
            errors.append(f"source = {self.source!r}, must be one of {', '.join(SOURCES)}")
        if self.max_batch < 1:
            errors.append(f"max_batch = {self.max_batch}, must be >= 1")
        if self.prefill_chunk_tokens < 1:
            errors.append(f"prefill_chunk_tokens = {self.prefill_chunk_tokens}, must be >= 1")
        if self.max_context < 2:
            errors.append(f"max_context = {self.max_context}, must be >= 2")
        if not (self.startup_s >= 0 and math.isfinite(self.startup_s)):
            errors.append(f"startup_s = {self.startup_s}, must be a finite number >= 0")
        errors += _grid_errors("decode_batch", self.decode_batch)
        errors += _grid_errors("decode_context", self.decode_context)
        errors += _grid_errors("prefill_tokens", self.prefill_tokens)
        if len(self.decode_s) != len(self.decode_batch) or any(
            len(row) != len(self.decode_context) for row in self.decode_s
        ):
            errors.append(
                f"decode_s must be a {len(self.decode_batch)} x {len(self.decode_context)} table "
                "(one row per decode_batch entry, one column per decode_context entry)"
            )
        if len(self.prefill_s) != len(self.prefill_tokens):
            errors.append(
                f"prefill_s has {len(self.prefill_s)} entries, prefill_tokens {len(self.prefill_tokens)}: "
                "they must pair up"
            )
        values = [v for row in self.decode_s for v in row] + list(self.prefill_s)
        if any(not (v > 0 and math.isfinite(v)) for v in values):
            errors.append("decode_s and prefill_s entries must be finite numbers > 0 (seconds)")
        return errors

    @property
    def total_pages(self) -> int:
        return self.kv_pages or self.max_batch * -(-self.max_context // self.page_size)

    def decode_step_s(self, batch: int, mean_context: float) -> float:
        """Latency of one decode step of ``batch`` sequences whose mean context is ``mean_context``."""
        return self.decode_curve(batch)(mean_context)

    def decode_curve(self, batch: int) -> DecodeCurve:
        """``decode_step_s`` at one batch size, as a function of the mean context: the batch's grid
        segment is located once, and each batch size's curve is made once (the profile is read only),
        so the planner, the feasibility check and the simulator asking again get it at once."""
        # Kept beside the fields (a frozen dataclass's own dictionary), out of comparisons and JSON.
        curves: dict[int, DecodeCurve] = self.__dict__.setdefault("_decode_curves", {})
        curve = curves.get(batch)
        if curve is None:
            i, wi = _locate(self.decode_batch, float(batch))
            below = self.decode_s[i]
            above = self.decode_s[i + 1] if len(self.decode_batch) > 1 else None
            curve = curves[batch] = DecodeCurve(self.decode_context, below, above, wi)
        return curve

    def prefill_time_s(self, prompt_tokens: int) -> float:
        """P(n): time to prefill a prompt of ``n`` tokens alone, in the engine's chunks.

        A chunk from token s to token e costs P(e) - P(s) (P(0) = 0), so a long prompt split over
        several steps costs what it costs alone.
        """
        if len(self.prefill_tokens) == 1:
            return self.prefill_s[0]
        i, w = _locate(self.prefill_tokens, float(prompt_tokens))
        return max(self.prefill_s[i] + (self.prefill_s[i + 1] - self.prefill_s[i]) * w, 1e-6)

    def with_overhead(
        self, *, first_token_s: float = 0.0, step_s: float = 0.0, per_sequence_s: float = 0.0
    ) -> EngineProfile:
        """This profile plus work it does not contain: ``step_s + per_sequence_s x batch`` more on every
        decode step and ``first_token_s`` more on every prompt (added to P(n), so a prompt's first chunk
        carries it).

        What serving adds to the in-process engine is of this kind: each step's responses built (one per
        request), passed to the server and sent, each request received and answered
        (benchmarks/sim_to_real.py measures them through a real server).
        """
        values = (first_token_s, step_s, per_sequence_s)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(
                f"overheads must be finite and >= 0 s, got first_token_s={first_token_s}, step_s={step_s}, "
                f"per_sequence_s={per_sequence_s}"
            )
        return replace(
            self,
            decode_s=tuple(
                tuple(v + step_s + per_sequence_s * b for v in row)
                for b, row in zip(self.decode_batch, self.decode_s, strict=True)
            ),
            prefill_s=tuple(v + first_token_s for v in self.prefill_s),
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["decode_s"] = [list(row) for row in self.decode_s]
        return json.dumps(data, indent=2) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())


@dataclass(frozen=True)
class DecodeCurve:
    """Decode step latency against mean context at one batch size: the two rows of the batch's grid
    segment (``above`` is ``None`` for a one-row grid) and the batch's weight between them."""

    context: tuple[int, ...]
    below: tuple[float, ...]
    above: tuple[float, ...] | None
    weight: float
    segments: tuple[tuple[int, int, float, float, float, float], ...] | None = field(
        init=False, repr=False, compare=False
    )
    """By where the context falls in the grid (``bisect_right``), the segment a lookup interpolates on:
    its start, its width and each row's value and rise there, the differences taken once. A lookup is
    then one bisection and the arithmetic it always did, in the same order (the simulator asks once a
    step, and writes the lookup out where it asks for many steps at once). None for a one-point grid."""

    def __post_init__(self) -> None:
        grid, lo, hi = self.context, self.below, self.above if self.above is not None else self.below
        segments = None
        if len(grid) > 1:
            last = len(grid) - 2
            segments = tuple(
                (grid[j], grid[j + 1] - grid[j], lo[j], lo[j + 1] - lo[j], hi[j], hi[j + 1] - hi[j])
                for j in (min(max(k - 1, 0), last) for k in range(len(grid) + 1))
            )
        object.__setattr__(self, "segments", segments)

    def __call__(self, mean_context: float) -> float:
        segments = self.segments
        if segments is not None:
            start, width, lo, lo_rise, hi, hi_rise = segments[bisect_right(self.context, mean_context)]
            w = (mean_context - start) / width
            lo = lo + lo_rise * w
            if self.above is None:
                return max(lo, 1e-6)
            hi = hi + hi_rise * w
        else:
            lo = self.below[0]
            if self.above is None:
                return max(lo, 1e-6)
            hi = self.above[0]
        return max(lo + (hi - lo) * self.weight, 1e-6)


def _grid_errors(key: str, grid: Sequence[int]) -> list[str]:
    if not grid:
        return [f"{key} is empty: give at least one point"]
    if any(b <= a for a, b in zip(grid, grid[1:], strict=False)):
        return [f"{key} = {list(grid)}, must be strictly increasing"]
    if grid[0] < 1:
        return [f"{key} = {list(grid)}, entries must be >= 1"]
    return []


def _locate(grid: Sequence[int], x: float) -> tuple[int, float]:
    """Segment index and weight for linear inter/extrapolation on ``grid`` (at least 2 points)."""
    if len(grid) == 1:
        return 0, 0.0
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def profile_from_dict(data: dict[str, Any]) -> EngineProfile:
    """Build and validate a profile from parsed JSON; raises ``ValueError`` naming every bad key."""
    required = (
        "hardware", "preset", "dtype", "source", "max_batch", "max_context", "prefill_chunk_tokens",
        "startup_s", "decode_batch", "decode_context", "decode_s", "prefill_tokens", "prefill_s",
    )  # fmt: skip
    missing = [k for k in required if k not in data]
    if missing:
        raise ValueError(
            f"engine profile lacks {', '.join(missing)}: write it with `python -m nlgsim profile`"
        )
    known = set(required) | {"page_size", "kv_pages", "notes", "measured_at", "extra"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"engine profile has unknown keys {', '.join(unknown)}")
    profile = EngineProfile(
        hardware=str(data["hardware"]),
        preset=str(data["preset"]),
        dtype=str(data["dtype"]),
        source=str(data["source"]),
        max_batch=int(data["max_batch"]),
        max_context=int(data["max_context"]),
        prefill_chunk_tokens=int(data["prefill_chunk_tokens"]),
        startup_s=float(data["startup_s"]),
        decode_batch=tuple(int(b) for b in data["decode_batch"]),
        decode_context=tuple(int(c) for c in data["decode_context"]),
        decode_s=tuple(tuple(float(v) for v in row) for row in data["decode_s"]),
        prefill_tokens=tuple(int(n) for n in data["prefill_tokens"]),
        prefill_s=tuple(float(v) for v in data["prefill_s"]),
        page_size=int(data.get("page_size", 16)),
        kv_pages=int(data.get("kv_pages", 0)),
        notes=str(data.get("notes", "")),
        measured_at=str(data.get("measured_at", "")),
        extra=dict(data.get("extra", {})),
    )
    errors = profile.validate()
    if errors:
        raise ValueError("engine profile is invalid: " + "; ".join(errors))
    return profile


def load_profile(path: str | Path) -> EngineProfile:
    """Reads a profile file; anything wrong with it is a ``ValueError`` naming the file and the key."""
    try:
        data = loads_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"engine profile {path} not found: measure one with `python -m nlgsim profile --out {path}` "
            "or use one of benchmarks/profiles/*.json"
        ) from None
    except OSError as e:
        raise ValueError(f"engine profile {path} cannot be read: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"engine profile {path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"engine profile {path}: top level is {type(data).__name__}, must be an object")
    huge = _huge_integer_at(data)
    if huge is not None:
        key, value = huge
        raise ValueError(f"engine profile {path}: {key} = {value}: not a measurement; measure the profile again")
    try:
        return profile_from_dict(data)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None


def _huge_integer_at(data: Any, key: str = "") -> tuple[str, HugeInt] | None:
    """The first key (dotted, with list indexes) whose value is an integer too long to convert."""
    if isinstance(data, HugeInt):
        return key or "(top level)", data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for name, value in items:
        found = _huge_integer_at(value, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}".lstrip("."))
        if found is not None:
            return found
    return None
