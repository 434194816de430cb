"""The model's settings (triton_backend/settings.py): config.pbtxt parameters, NLG_* variables on top,
and one error that names every bad setting."""

from __future__ import annotations

import pytest

from triton_backend.settings import DEFAULTS, InvalidSettings, ModelSettings, load_settings


def test_with_nothing_given_every_setting_is_its_default():
    settings = load_settings({}, {})
    assert isinstance(settings, ModelSettings)
    assert {key: str(getattr(settings, key)).lower() for key in DEFAULTS} == {
        key: value.lower() for key, value in DEFAULTS.items()
    }


def test_a_variable_overrides_the_parameter_and_the_parameter_the_default():
    settings = load_settings(
        {"max_num_seqs": "16", "seed": "3"},
        {"NLG_MAX_NUM_SEQS": "4", "NLG_UNRELATED": "x", "PATH": "/bin"},
    )
    assert settings.max_num_seqs == 4
    assert settings.seed == 3


@pytest.mark.parametrize(("text", "want"), [("true", True), ("False", False), (" TRUE ", True)])
def test_cuda_graphs_reads_true_or_false_in_any_case(text, want):
    assert load_settings({"cuda_graphs": text}, {}).cuda_graphs is want


def test_every_bad_setting_is_named_at_once_with_what_is_allowed():
    with pytest.raises(InvalidSettings) as caught:
        load_settings(
            {"preset": "gpt5", "max_num_seqs": "0", "colour": "blue"},
            {"NLG_DTYPE": "int4", "NLG_PREFILL_CHUNK_TOKENS": "lots", "NLG_CUDA_GRAPHS": "yes"},
        )
    errors = caught.value.errors
    assert len(errors) == 6
    joined = "\n".join(errors)
    for needle in (
        "parameters: unknown key 'colour'",
        "preset: must be one of",
        "'gpt5'",
        "dtype: must be one of auto, float32, float16, bfloat16, got 'int4'",
        "max_num_seqs: must be an integer >= 1, got 0",
        "prefill_chunk_tokens: must be an integer >= 1, got 'lots'",
        "cuda_graphs: must be true or false, got 'yes'",
    ):
        assert needle in joined
    assert str(caught.value).startswith("invalid model settings: ")


@pytest.mark.parametrize(("key", "value"), [("kv_cache_bytes", "-1"), ("seed", "-5"), ("drain_seconds", "-1")])
def test_settings_that_may_be_zero_refuse_a_negative(key, value):
    with pytest.raises(InvalidSettings, match=f"{key}: must be an integer >= 0, got {value}"):
        load_settings({key: value}, {})


@pytest.mark.parametrize(("key", "value"), [("kv_cache_bytes", "0"), ("seed", "0"), ("drain_seconds", "0")])
def test_zero_is_allowed_where_it_means_something(key, value):
    assert getattr(load_settings({key: value}, {}), key) == 0


@pytest.mark.parametrize("value", ["0", "-0.5", "1.01", "nan", "inf", "most", ""])
def test_memory_utilization_is_a_share_above_0_and_at_most_1(value):
    with pytest.raises(InvalidSettings, match=rf"memory_utilization: must be a number in \(0, 1\], got '{value}'"):
        load_settings({"memory_utilization": value}, {})


@pytest.mark.parametrize(("value", "want"), [("1", 1.0), ("0.5", 0.5), (" .95 ", 0.95)])
def test_memory_utilization_reads_a_share(value, want):
    assert load_settings({}, {"NLG_MEMORY_UTILIZATION": value}).memory_utilization == want
