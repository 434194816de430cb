"""One drain budget: the model's drain, tritonserver's exit timeout, config.pbtxt, the README's
container command and nlg-triton all follow DrainBudget (the chart's tie is in tests/helm)."""

from __future__ import annotations

import re

import pytest

from triton_backend.launch import PROJECT_ROOT, with_drain_budget
from triton_backend.settings import DrainBudget, load_settings

README = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("longest", [1, 30, 120, 600])
def test_exit_timeout_outlasts_the_drain_which_outlasts_the_longest_stream(longest):
    budget = DrainBudget(longest)
    # Triton waits for HTTP streams (up to `longest`) before it unloads the model and its drain runs.
    assert budget.drain_seconds > longest
    assert budget.exit_timeout_seconds > longest + budget.drain_seconds


def test_a_budget_without_streams_is_refused():
    with pytest.raises(ValueError, match="max_stream_seconds: must be an integer >= 1, got 0"):
        DrainBudget(0)


def test_config_pbtxt_drains_for_the_default_budget():
    config = (PROJECT_ROOT / "model_repository" / "gpt2" / "config.pbtxt").read_text(encoding="utf-8")
    [drain] = re.findall(r'key: "drain_seconds" value: \{ string_value: "(\d+)" \}', config)
    assert int(drain) == DrainBudget().drain_seconds
    assert load_settings({}, {}).drain_seconds == DrainBudget().drain_seconds


def test_readme_states_the_default_budget():
    budget = DrainBudget()
    assert f"--exit-timeout-secs={budget.exit_timeout_seconds}" in README
    assert f"| `drain_seconds` | {budget.drain_seconds} |" in README
    assert f"`nlg-triton --max-stream-seconds N` (default {budget.max_stream_seconds})" in README


def test_launcher_sets_drain_and_exit_timeout_together():
    env: dict[str, str] = {}
    args = with_drain_budget(DrainBudget(10), env, ["--log-verbose=1"])
    assert env == {"NLG_DRAIN_SECONDS": "12"}
    assert args == ["--exit-timeout-secs=32", "--log-verbose=1"]


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"NLG_DRAIN_SECONDS": "5"}, [], "NLG_DRAIN_SECONDS: derived from the drain budget"),
        ({}, ["--exit-timeout-secs=5"], "--exit-timeout-secs: derived from the drain budget"),
        ({}, ["--exit-timeout-secs", "5"], "--exit-timeout-secs: derived from the drain budget"),
    ],
    ids=["drain-env", "exit-timeout-joined", "exit-timeout-split"],
)
def test_launcher_refuses_a_drain_or_exit_timeout_set_by_hand(env, args, message):
    with pytest.raises(ValueError, match=message):
        with_drain_budget(DrainBudget(), env, args)


def test_nlg_triton_reports_a_bad_budget_by_its_option(capsys):
    from triton_backend.cli.server import main

    with pytest.raises(SystemExit):
        main(["--max-stream-seconds", "0"])
    assert "--max-stream-seconds: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_docs_name_the_budget():
    helm_doc = (PROJECT_ROOT / "docs" / "helm.md").read_text(encoding="utf-8")
    budget = DrainBudget()
    assert f"`--exit-timeout-secs` = {budget.exit_timeout_seconds}" in helm_doc
