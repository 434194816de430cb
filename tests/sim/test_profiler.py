"""The profiler measures the real engine (tiny preset, a small grid: seconds, not minutes)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from nlgsim.profiler import measure  # noqa: E402


def test_a_measured_profile_is_valid_and_says_what_it_measured():
    profile = measure(
        "tiny", batches=(1, 2), contexts=(32, 64), prompts=(16, 300), reps=1, startup_s=0.5, log=lambda m: None
    )
    assert profile.validate() == []
    assert (profile.source, profile.preset, profile.dtype) == ("measured", "tiny", "float32")
    assert profile.hardware.startswith("cpu: ")
    assert profile.max_batch == 64 and profile.prefill_chunk_tokens == 256
    assert profile.kv_pages == 64 * 1024 // profile.page_size
    assert profile.startup_s == 0.5 and profile.extra["startup_measured_as"] == "given"
    assert all(v > 0 for row in profile.decode_s for v in row)
    # A 300-token prompt takes two engine steps (256 + 44): more than a 16-token one.
    assert profile.prefill_s[1] > profile.prefill_s[0]
