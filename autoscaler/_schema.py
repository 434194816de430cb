"""Generic helpers behind :mod:`autoscaler.config`: typed reading of mappings and value checks.

Reading (``build``) turns a mapping into a frozen dataclass, checking each field against its type
annotation, naming unknown keys (with a close match when there is one) and falling back to the
default after reporting a bad value, so that every problem of a file is found in one pass. The
checks (``positive``, ``one_of``, ...) return a list of messages, each ``<key path> = <value>: <rule>``.

Reading is total: any value JSON or YAML can produce (a 400-digit integer, a 5 MB string, a list nested
a thousand deep; integers past Python's digit limit once :mod:`autoscaler.safe_parse` has read them)
becomes a message naming the key and its bound, never an exception, and a message shows at most a short,
abbreviated form of the value (:func:`show`), so an error never echoes a large input back.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
import reprlib
import sys
import typing
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")

#: Longest string and list any field takes; fields with a tighter rule check it in ``validate``.
MAX_STRING = 4096
MAX_ITEMS = 256

_FLOAT_MAX = sys.float_info.max

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlong = 40
_SHORT.maxlevel = 3
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 6


def show(value: Any) -> str:
    """``repr(value)`` abbreviated to about 60 characters, so an error never echoes a large input."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an int past Python's 4300-digit str() limit
        return "<an integer of more than 4300 digits>"


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
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not (isinstance(value, int) and abs(value) > _FLOAT_MAX):
            ok = math.isfinite(value)
            value = float(value)
        # An int too large for a float stays an int: the key's range check refuses it by its bound.
    elif hint is str or origin is typing.Literal:
        ok = isinstance(value, str) and len(value) <= MAX_STRING
        if isinstance(value, str) and not ok:
            errors.append(f"{path} = {show(value)}: must be at most {MAX_STRING} characters, not {len(value)}")
            return default
    elif origin is tuple:
        if isinstance(value, Sequence) and not isinstance(value, str | bytes) and len(value) > MAX_ITEMS:
            errors.append(f"{path}: {len(value)} items, at most {MAX_ITEMS} allowed")
            return default
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
    errors.append(f"{path} = {show(value)}: must be {_describe(hint)}")
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
        errors.append(f"{path or 'top level'} = {show(data)}: must be a mapping with keys {', '.join(fields)}")
        data = {}
    retired: Mapping[str, str] = getattr(cls, "RETIRED_KEYS", {})
    for key in data:
        if key in retired:
            errors.append(f"{_join(path, key)}: no longer a key: {retired[key]}; remove it")
        elif key not in fields:
            name = str(key) if isinstance(key, str) and len(key) <= 60 else show(key)
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            errors.append(f"{_join(path, name)}: unknown key{hint}")
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


def positive(path: str, value: float, high: float) -> list[str]:
    """``0 < value <= high``; the upper bound keeps sums and label values within reason."""
    if 0 < value <= high:
        return []
    rule = "greater than 0" if value <= 0 else f"at most {high:g}"
    return [f"{path} = {show(value)}: must be {rule}"]


def between(path: str, value: float, low: float, high: float) -> list[str]:
    if low <= value <= high:
        return []
    rule = f">= {low}" if value < low else f"at most {high:g}"
    return [f"{path} = {show(value)}: must be {rule}"]


def one_of(path: str, value: str, allowed: Sequence[str]) -> list[str]:
    return [] if value in allowed else [f"{path} = {show(value)}: must be one of {', '.join(allowed)}"]


def non_empty(path: str, value: str) -> list[str]:
    return [] if value.strip() else [f"{path} = {show(value)}: must not be empty"]


def port(path: str, value: int) -> list[str]:
    return [] if 0 <= value <= 65535 else [f"{path} = {show(value)}: must be a TCP port 1..65535 (0 = off)"]


def k8s_name(path: str, value: str) -> list[str]:
    if len(value) <= 253 and _K8S_NAME.match(value):
        return []
    return [f"{path} = {show(value)}: must be a Kubernetes name (lowercase letters, digits, '-', '.'; at most 253)"]


#: Longest model name: it is a label value on every ``nlg_autoscaler_*`` series.
MAX_MODEL_NAME = 128


def model_name(path: str, value: str) -> list[str]:
    if len(value) <= MAX_MODEL_NAME and _MODEL_NAME.match(value):
        return []
    return [
        f"{path} = {show(value)}: must be a Triton model name (letters, digits, '_', '-', '.'; "
        f"at most {MAX_MODEL_NAME})"
    ]


def printable(path: str, value: str, high: int) -> list[str]:
    if len(value) <= high and value.isprintable():
        return []
    return [f"{path} = {show(value)}: must be at most {high} printable characters"]


def http_url(path: str, value: str) -> list[str]:
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.netloc) and value.isprintable()
    except ValueError:  # e.g. an unbalanced '[' in the host
        ok = False
    if ok:
        return []
    return [f"{path} = {show(value)}: must be an http:// or https:// URL with a host, e.g. http://prometheus:9090"]


def host_port(path: str, value: str) -> list[str]:
    if value.startswith(("http://", "https://")):
        return http_url(path, value)
    m = _HOST_PORT.match(value)
    if m and 0 < int(m.group(2)) <= 65535:
        return []
    return [f"{path} = {show(value)}: must be host:port (e.g. 127.0.0.1:8002) or an http:// URL"]


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
