"""Integers of any size, in every numeric key of every parser: the YAML config (load, --check, a
reload) and the REST API's body. Each is refused naming its key and the bound it breaks.

Reported: a 5,000-digit integer ended the parse with CPython's "Exceeds the limit (4300 digits) for
integer string conversion ...; use sys.set_int_max_str_digits()", naming no key ("body: not JSON",
"a value cannot be read").
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.config import AutoscalerConfig, ConfigError, Registration, load_config, parse_registration
from autoscaler.reload import ConfigWatcher
from autoscaler.safe_parse import HugeInt, load_yaml, loads_json

PROFILE = Path(__file__).resolve().parents[2] / "benchmarks" / "profiles" / "cpu-gpt2-fp32.json"
DIGITS = "9" * 5000
PLACEHOLDER = "__HUGE__"
INTERPRETER = ("set_int_max_str_digits", "Exceeds the limit", "4300")


def numeric_keys(cls: type, path: str = "") -> list[str]:
    """Every int and float key under ``cls``, a list's first item standing for its items."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, key = hints[f.name], f"{path}.{f.name}" if path else f.name
        if hint in (int, float):
            keys.append(key)
        elif dataclasses.is_dataclass(hint):
            keys += numeric_keys(hint, key)
        elif typing.get_origin(hint) is tuple and dataclasses.is_dataclass(typing.get_args(hint)[0]):
            keys += numeric_keys(typing.get_args(hint)[0], f"{key}[0]")
    return keys


CONFIG_KEYS = numeric_keys(AutoscalerConfig)
BODY_KEYS = numeric_keys(Registration)


def document(key: str) -> dict:
    """A config (or body) whose ``key`` holds the placeholder, with what that key needs to be read."""
    data: dict = {}
    if key.startswith("scaler.planner."):
        data["scaler"] = {"type": "planner", "planner": {"profile": str(PROFILE)}}
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        name, _, index = part.partition("[")
        if index:
            node = node.setdefault(name, [{"metric": "ttft_p99", "target": 1}])[0]
        else:
            node = node.setdefault(name, {})
    node[parts[-1]] = PLACEHOLDER
    return data


def assert_named(errors: list[str], key: str, sign: str) -> None:
    shown = f"<{'a negative' if sign else 'an'} integer of 5000 digits>"
    mine = [e for e in errors if e.startswith(f"{key} = {shown}: must be ")]
    assert mine, errors
    assert re.search(r"\d", mine[0].split(": must be ", 1)[1]), mine  # the bound, as a number
    assert not any(word in e for e in errors for word in INTERPRETER), errors


def test_the_walk_finds_the_keys_of_every_section():
    assert {"scaler.min_deployment_count", "scaler.threshold", "scaler.scale_up.max_pods",
            "scaler.signals[0].target", "scaler.planner.headroom", "source.timeout", "loop.interval",
            "leader_election.lease_duration", "api.port", "metrics.port"} <= set(CONFIG_KEYS)  # fmt: skip
    assert set(BODY_KEYS) == {k for k in CONFIG_KEYS if k.startswith("scaler.")}


@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
@pytest.mark.parametrize("key", CONFIG_KEYS)
def test_a_5000_digit_integer_in_the_config_file_is_named_with_its_bound(tmp_path, key, sign):
    path = tmp_path / "autoscaler.yaml"
    path.write_text(yaml.safe_dump(document(key)).replace(PLACEHOLDER, sign + DIGITS), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert_named(caught.value.errors, key, sign)


@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
@pytest.mark.parametrize("key", [k for k in BODY_KEYS if not k.startswith("scaler.planner.")])
def test_a_5000_digit_integer_in_a_rest_body_is_named_with_its_bound(key, sign):
    """What POST and PUT /deployment/ do with a body: read it, then parse the registration."""
    text = json.dumps({"model_id": "m", **document(key)}).replace(f'"{PLACEHOLDER}"', sign + DIGITS)
    with pytest.raises(ConfigError) as caught:
        parse_registration(loads_json(text.encode()))
    assert_named(caught.value.errors, key, sign)


def test_check_and_a_reload_name_the_key(tmp_path, capsys):
    path = tmp_path / "autoscaler.yaml"
    path.write_text("scaler:\n  threshold: 30\napi:\n  port: 0\n", encoding="utf-8")
    watcher = ConfigWatcher(path)
    running = watcher.load()
    path.write_text(f"scaler:\n  max_deployment_count: {DIGITS}\napi:\n  port: 0\n", encoding="utf-8")
    assert watcher.poll() is None and watcher.current == running
    assert "scaler.max_deployment_count = <an integer of 5000 digits>: must be at most 1000" in watcher.last_error
    assert main(["--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "scaler.max_deployment_count = <an integer of 5000 digits>: must be at most 1000" in err
    assert not any(word in err for word in INTERPRETER), err


@pytest.mark.parametrize(
    ("text", "want"),
    [("42", 42), ("0x1F", 31), ("1_000", 1000), ("-" + DIGITS, None), ("4" * 4300, int("4" * 4300))],
    ids=["plain", "hex", "underscores", "5000-digits", "4300-digits"],
)  # fmt: skip
def test_yaml_integers_read_as_before_up_to_pythons_limit(text, want):
    value = load_yaml(f"n: {text}")["n"]
    if want is None:
        assert isinstance(value, HugeInt) and value.digits == 5000 and value < 0
    else:
        assert value == want and not isinstance(value, HugeInt)


def test_the_docs_quote_the_message_the_api_gives():
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "autoscaler.md").read_text().split())
    with pytest.raises(ConfigError) as caught:
        parse_registration(loads_json('{"model_id": "m", "scaler": {"min_deployment_count": %s}}' % DIGITS))  # noqa: UP031
    assert f"`{caught.value.errors[0]}`" in docs


@pytest.mark.parametrize("key", ["page_size", "kv_pages"])
def test_a_5000_digit_integer_in_an_engine_profile_is_named(tmp_path, key):
    from autoscaler.profile import load_profile

    shipped = Path(__file__).resolve().parents[2] / "nlg_demo" / "tiny-cpu-profile.json"
    text = json.dumps({**json.loads(shipped.read_text()), key: 0}).replace(f'"{key}": 0', f'"{key}": {"7" * 5000}')
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        load_profile(path)
    assert f"{key} = <an integer of 5000 digits>" in str(caught.value)
    assert "set_int_max_str_digits" not in str(caught.value) and "4300" not in str(caught.value)
