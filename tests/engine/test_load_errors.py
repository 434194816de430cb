"""A load error the operator fixes with a setting reaches Triton's log as its one line
(triton_backend/load_errors.py): in-process, the error leaves `frameless` with no frame of its own;
through the real tritonserver, the log names the setting and holds no traceback or server path."""

from __future__ import annotations

import traceback

import pytest

from triton_backend.launch import TritonServer
from triton_backend.load_errors import frameless
from triton_backend.memory_budget import CacheDoesNotFit
from triton_backend.settings import InvalidSettings, load_settings


def frames_below_the_caller(err: BaseException) -> list[str]:
    """The frames the error passed through under the test's own call."""
    return [frame.name for frame in traceback.extract_tb(err.__traceback__)[1:]]


def refuse_settings(args: dict[str, str]) -> None:
    load_settings({"max_num_seqs": "0"}, {"NLG_DTYPE": "int4"})


def cache_too_small(args: dict[str, str]) -> None:
    raise CacheDoesNotFit("kv_cache_bytes: 1 is below the 1048576 bytes one full-context sequence needs")


@pytest.mark.parametrize("build", [refuse_settings, cache_too_small])
def test_an_operators_error_leaves_without_a_frame_and_keeps_its_message(build):
    with pytest.raises((InvalidSettings, CacheDoesNotFit)) as caught:
        frameless(build)({})
    assert frames_below_the_caller(caught.value) == []
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    if isinstance(caught.value, InvalidSettings):
        assert len(caught.value.errors) == 2  # every bad setting, still at once


def test_a_bug_keeps_its_traceback():
    def build(args: dict[str, str]) -> None:
        raise KeyError("model_config")

    with pytest.raises(KeyError) as caught:
        frameless(build)({})
    assert "build" in frames_below_the_caller(caught.value)


def test_a_build_that_succeeds_runs_once_with_the_arguments():
    seen: list[dict[str, str]] = []
    assert frameless(seen.append)({"model_name": "gpt2"}) is None
    assert seen == [{"model_name": "gpt2"}]


@pytest.mark.integration
def test_a_cache_that_cannot_hold_one_sequence_fails_the_load_with_one_line(tmp_path):
    env = {"NLG_PRESET": "tiny", "NLG_KV_CACHE_BYTES": "1"}
    server = TritonServer(env=env, ready_timeout=120, log_path=tmp_path / "triton.log")
    with pytest.raises(RuntimeError, match="tritonserver exited"):
        server.start()
    log = (tmp_path / "triton.log").read_text(errors="replace")
    said = "failed to load 'gpt2' version 1: Internal: CacheDoesNotFit: kv_cache_bytes: 1 is below the 1048576 bytes"
    assert said in log
    for leak in ("At:", "Traceback", ".py(", "/triton_backend/"):
        assert leak not in log, leak
