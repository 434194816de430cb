"""What the model instance says it loaded."""

from __future__ import annotations

import torch

from triton_backend.presets import build_model


def test_random_weights_are_described_with_the_seed_they_were_drawn_from():
    _, info = build_model("tiny", None, torch.device("cpu"), torch.float32, 7)
    assert info.random_weights and "seed 7" in info.describe()
