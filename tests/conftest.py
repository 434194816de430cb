"""Fixtures shared by the whole suite: a real tritonserver serving the tiny GPT-2 preset."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from triton_backend.launch import TritonServer


@pytest.fixture(scope="session")
def triton_tiny() -> Iterator[TritonServer]:
    """tritonserver with model_repository/gpt2 on the tiny preset (random weights, seed 0)."""
    with TritonServer(env={"NLG_PRESET": "tiny", "NLG_MAX_NUM_SEQS": "32"}) as server:
        yield server
