"""JSON and YAML readers whose integers of any size come back as values, never as an exception.

This module owns one rule: CPython's ``int()`` refuses decimal strings of more than 4300 digits
(``sys.int_info.default_max_str_digits``), and ``json.loads`` and PyYAML's loader call it on every
integer, so a client's 5,000-digit ``min_deployment_count`` would end the parse with an interpreter
message that names no key. Here such an integer is a :class:`HugeInt`: an ``int`` larger than any
bound the configuration allows (so each key's range check refuses it and names the key and its
bound) that shows itself by its length, not its digits.
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml

#: What a :class:`HugeInt` compares as: above every bound a key has (the largest is 3,600,000) and
#: above any float, so a float key's range check, not float(), refuses it.
_MAGNITUDE: Final = 10**400


class HugeInt(int):
    """An integer of more digits than Python converts; ``digits`` is how many it had."""

    digits: int

    def __new__(cls, text: str) -> HugeInt:
        sign = -1 if text.lstrip().startswith("-") else 1
        value = super().__new__(cls, sign * _MAGNITUDE)
        value.digits = sum(c.isdigit() for c in text)
        return value

    def __repr__(self) -> str:
        return f"<{'a negative' if self < 0 else 'an'} integer of {self.digits} digits>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return HugeInt(text)


def loads_json(data: str | bytes | bytearray) -> Any:
    """``json.loads`` with big integers as :class:`HugeInt`; other errors are ``json.loads``'s."""
    return json.loads(data, parse_int=_parse_int)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader whose ``!!int`` constructor keeps what ``int()`` refuses as a HugeInt."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            return HugeInt(str(self.construct_scalar(node)))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with big integers as :class:`HugeInt`."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
