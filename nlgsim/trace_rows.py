"""A trace file's rows, (arrival, input tokens, output tokens), from CSV or from JSON lines.

CSV (the Azure LLM traces, BurstGPT) names its columns in a header; JSON lines (``.jsonl`` or
``.ndjson``: Mooncake's traces) hold one object a line whose keys are the same names. Names are matched
without regard to case. Numeric timestamps count ``time_unit`` (Mooncake's are milliseconds, the
others' seconds); ISO dates carry their own. Every error names the file, the line and what is allowed.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

TIME_COLUMNS = ("timestamp", "time", "arrival", "arrival_time", "ts")
INPUT_COLUMNS = ("contexttokens", "input_tokens", "prompt_tokens", "input", "prompt", "request tokens", "input_length")
OUTPUT_COLUMNS = (
    "generatedtokens", "output_tokens", "generated_tokens", "output", "completion_tokens", "response tokens",
    "output_length",
)  # fmt: skip
#: Seconds in one unit of a numeric timestamp (``--time-unit``).
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")

Row = tuple[float, int, int]


def read_rows(path: Path, time_unit: str = "s") -> list[Row]:
    """Every row of the trace at ``path``, in file order, its timestamp in seconds."""
    if time_unit not in TIME_UNITS:
        raise ValueError(f"time unit {time_unit!r}: use one of {', '.join(TIME_UNITS)}")
    unit = TIME_UNITS[time_unit]
    with path.open(newline="") as f:
        if path.suffix.lower() in JSON_LINES_SUFFIXES:
            return _json_rows(path, f, unit)
        return _csv_rows(path, f, unit)


def _column(header: Sequence[str], names: Sequence[str], what: str, path: Path) -> int:
    lowered = [h.strip().lower() for h in header]
    for n in names:
        if n in lowered:
            return lowered.index(n)
    raise ValueError(f"{path}: no {what} column; name it one of {', '.join(names)} (found {', '.join(header)})")


def _csv_rows(path: Path, f: Iterable[str], unit: float) -> list[Row]:
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{path}: empty file; expected a header with timestamp, input and output columns")
    ti = _column(header, TIME_COLUMNS, "timestamp", path)
    ii = _column(header, INPUT_COLUMNS, "input-token", path)
    oi = _column(header, OUTPUT_COLUMNS, "output-token", path)
    rows = []
    for lineno, row in enumerate(reader, start=2):
        if not row:
            continue
        try:
            raw = (row[ti], row[ii], row[oi])
        except IndexError as e:
            raise ValueError(f"{path}:{lineno}: cannot read {row!r} ({e})") from None
        rows.append(_row(path, lineno, raw, row, unit))
    return rows


def _key(obj: Mapping[str, Any], names: Sequence[str], what: str, path: Path, lineno: int) -> Any:
    for n in names:
        if n in obj:
            return obj[n]
    raise ValueError(f"{path}:{lineno}: no {what} key; name it one of {', '.join(names)} (found {', '.join(obj)})")


def _json_rows(path: Path, f: Iterable[str], unit: float) -> list[Row]:
    rows = []
    seen = False
    for lineno, line in enumerate(f, start=1):
        if not line.strip():
            continue
        seen = True
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not a JSON object ({e.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(
                f"{path}:{lineno}: expected an object with timestamp, input and output keys, "
                f"got a JSON {type(obj).__name__}"
            )
        keys = {str(k).strip().lower(): v for k, v in obj.items()}
        raw = (
            _key(keys, TIME_COLUMNS, "timestamp", path, lineno),
            _key(keys, INPUT_COLUMNS, "input-token", path, lineno),
            _key(keys, OUTPUT_COLUMNS, "output-token", path, lineno),
        )
        rows.append(_row(path, lineno, raw, raw, unit))
    if not seen:
        raise ValueError(f"{path}: empty file; expected one JSON object a line with timestamp, input and output keys")
    return rows


def _row(path: Path, lineno: int, raw: tuple[Any, Any, Any], shown: object, unit: float) -> Row:
    try:
        row = (_seconds(raw[0], unit), _tokens(raw[1]), _tokens(raw[2]))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}:{lineno}: cannot read {shown!r} ({e})") from None
    if row[1] < 0 or row[2] < 0:
        raise ValueError(f"{path}:{lineno}: input and output tokens must be >= 0, got {shown!r}")
    return row


def _seconds(value: Any, unit: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r}: a number or an ISO date")
    if isinstance(value, int | float):
        seconds = float(value) * unit
    else:
        text = str(value).strip()
        try:
            seconds = float(text) * unit
        except ValueError:
            seconds = datetime.fromisoformat(text).timestamp()
    if not math.isfinite(seconds):
        raise ValueError(f"timestamp {value!r}: must be finite")
    return seconds


def _tokens(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"token count {value!r}: a whole number")
    return int(value)
