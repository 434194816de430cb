"""The model's settings are stated in four places a user reads: settings.py (the code), config.pbtxt
(what the server loads), the README's table and the chart's values schema. Each must say the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

from triton_backend import settings

ROOT = Path(__file__).resolve().parents[2]
#: Settings the chart sets from keys of its own (model.preset, model.weights), not model.settings.
CHART_OWN_KEYS = {"preset", "weights_path"}


def _config_pbtxt_parameters() -> dict[str, str]:
    text = (ROOT / "model_repository" / "gpt2" / "config.pbtxt").read_text(encoding="utf-8")
    pattern = r'^parameters \{ key: "(\w+)" value: \{ string_value: "([^"]*)" \} \}$'
    return dict(re.findall(pattern, text, re.M))


def _readme_defaults() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("| parameter | default | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.M)
    return {name: value.strip().strip("`").replace("empty", "") for name, value in rows}


def test_config_pbtxt_holds_every_setting_at_its_default():
    assert _config_pbtxt_parameters() == settings.DEFAULTS


def test_the_readme_table_lists_every_setting_with_its_default():
    assert _readme_defaults() == settings.DEFAULTS


def test_the_chart_schema_accepts_exactly_the_settings_the_model_reads():
    schema = json.loads((ROOT / "helm" / "nlg-serving" / "values.schema.json").read_text(encoding="utf-8"))
    properties = schema["properties"]["model"]["properties"]["settings"]["properties"]
    assert set(properties) == set(settings.DEFAULTS) - CHART_OWN_KEYS
    assert properties["dtype"]["enum"] == list(settings.DTYPES)
