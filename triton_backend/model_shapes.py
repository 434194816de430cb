"""GPT-2's fixed numbers and its architectures by name, as plain data: no torch, no transformers.

The settings, the sampling parameters, the detokenizer and the sequences check against these without
loading the model's stack; `presets` builds models from them.
"""

from __future__ import annotations

CONTEXT_LENGTH = 1024
VOCAB_SIZE = 50257
EOS_TOKEN_ID = 50256

#: (n_embd, n_layer, n_head): the public configs of OpenAI's GPT-2 releases; "tiny" is for tests.
SHAPES: dict[str, tuple[int, int, int]] = {
    "tiny": (64, 2, 4),
    "gpt2": (768, 12, 12),
    "gpt2-medium": (1024, 24, 16),
    "gpt2-large": (1280, 36, 20),
    "gpt2-xl": (1600, 48, 25),
}
PRESETS = tuple(SHAPES)
