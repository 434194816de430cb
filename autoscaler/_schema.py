"""Generic helpers behind :mod:`autoscaler.config`: typed reading of mappings and value checks.

Reading (``build``) turns a mapping into a frozen dataclass, checking each field against its type
annotation, naming unknown keys (with a close match when there is one) and falling back to the
default after reporting a bad value, so that every problem of a file is found in one pass. The
checks (``positive``, ``one_of``, ...) return a list of messages, each ``<key path> = <value>: <rule>``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(hint: Any) -> str:
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a finite number"
    if hint is str or typing.get_origin(hint) is typing.Literal:
        return "a string"
    if typing.get_origin(hint) is tuple:
        return "a list"
    return "a mapping"


def _placeholder(hint: Any) -> Any:
    """A value for a required field that is missing; the missing key itself is reported."""
    if typing.get_origin(hint) is typing.Literal or hint is str:
        return ""
    if typing.get_origin(hint) is tuple:
        return ()
    return {bool: False, int: 0, float: 0.0}.get(hint)


def _convert(
    hint: Any, value: Any, path: str, errors: list[str], default: Any, nested: tuple[type, ...]
) -> Any:
    origin = typing.get_origin(hint)
    ok: bool
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            value = float(value)
    elif hint is str or origin is typing.Literal:
        ok = isinstance(value, str)
    elif origin is tuple:
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            (item_hint, _) = typing.get_args(hint)
            return tuple(
                _convert(item_hint, item, f"{path}[{i}]", errors, _placeholder(item_hint), nested)
                for i, item in enumerate(value)
            )
        ok = False
    elif hint in nested:
        return build(hint, value, path, errors, nested, base=default)
    else:  # pragma: no cover - a schema bug, not a user error
        raise TypeError(f"{path}: unsupported field type {hint!r}")
    if ok:
        return value
    errors.append(f"{path} = {value!r}: must be {_describe(hint)}")
    return default


def build(
    cls: type[Any],
    data: Any,
    path: str,
    errors: list[str],
    nested: tuple[type, ...],
    base: Any = None,
) -> Any:
    """Builds ``cls`` from ``data``; missing keys take ``base``'s value, else the field default."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if not isinstance(data, Mapping):
        errors.append(f"{path or 'top level'} = {data!r}: must be a mapping with keys {', '.join(fields)}")
        data = {}
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            errors.append(f"{_join(path, str(key))}: unknown key{hint}")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if base is not None:
            default = getattr(base, name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _placeholder(hints[name])
        if name in data:
            values[name] = _convert(hints[name], data[name], _join(path, name), errors, default, nested)
        elif base is None and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{_join(path, name)}: required, {_describe(hints[name])}")
            values[name] = _placeholder(hints[name])
        else:
            values[name] = default
    return cls(**values)


def already_reported(message: str, earlier: list[str]) -> bool:
    """True when ``message`` concerns a key already reported as badly typed (its default stood in)."""
    bad_paths = {re.split(r"[ :]", e, maxsplit=1)[0] for e in earlier}
    return any(re.search(rf"(^|[ (]){re.escape(p)}([ :)]|$)", message) for p in bad_paths if p)


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def positive(path: str, value: float) -> list[str]:
    return [] if value > 0 else [f"{path} = {value!r}: must be greater than 0"]


def at_least(path: str, value: float, low: float) -> list[str]:
    return [] if value >= low else [f"{path} = {value!r}: must be >= {low}"]


def one_of(path: str, value: str, allowed: Sequence[str]) -> list[str]:
    return [] if value in allowed else [f"{path} = {value!r}: must be one of {', '.join(allowed)}"]


def non_empty(path: str, value: str) -> list[str]:
    return [] if value.strip() else [f"{path} = {value!r}: must not be empty"]


def port(path: str, value: int) -> list[str]:
    return [] if 0 <= value <= 65535 else [f"{path} = {value!r}: must be a TCP port 1..65535 (0 = off)"]


def k8s_name(path: str, value: str) -> list[str]:
    if len(value) <= 253 and _K8S_NAME.match(value):
        return []
    return [f"{path} = {value!r}: must be a Kubernetes name (lowercase letters, digits, '-', '.')"]


def model_name(path: str, value: str) -> list[str]:
    if _MODEL_NAME.match(value):
        return []
    return [f"{path} = {value!r}: must be a Triton model name (letters, digits, '_', '-', '.')"]


def http_url(path: str, value: str) -> list[str]:
    parts = urlsplit(value)
    if parts.scheme in ("http", "https") and parts.netloc:
        return []
    return [f"{path} = {value!r}: must be an http:// or https:// URL with a host, e.g. http://prometheus:9090"]


def host_port(path: str, value: str) -> list[str]:
    if value.startswith(("http://", "https://")):
        return http_url(path, value)
    m = _HOST_PORT.match(value)
    if m and 0 < int(m.group(2)) <= 65535:
        return []
    return [f"{path} = {value!r}: must be host:port (e.g. 127.0.0.1:8002) or an http:// URL"]
