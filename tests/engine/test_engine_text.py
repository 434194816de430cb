"""Text: the real GPT-2 tokenizer, UTF-8-safe deltas, and stop strings split across tokens."""

from __future__ import annotations

import random

import pytest

from triton_backend.detokenizer import TextStream
from triton_backend.tokenizer import load_tokenizer, token_bytes


def test_tokenizer_is_gpt2s_byte_level_bpe():
    tokenizer = load_tokenizer()
    assert tokenizer.get_vocab_size() == 50257
    assert tokenizer.encode("Hello world").ids == [15496, 995]
    assert tokenizer.decode(tokenizer.encode(" héllo 日本 🙂").ids) == " héllo 日本 🙂"


def test_multibyte_characters_are_never_split():
    ids = load_tokenizer().encode("日本🙂!").ids
    assert len(ids) > 3  # several tokens per character: a naive decode would emit broken text
    stream = TextStream(token_bytes(), ())
    deltas = [stream.push(i) for i in ids] + [stream.finish()]
    assert "".join(deltas) == "日本🙂!"
    assert all("\ufffd" not in d for d in deltas)


@pytest.mark.parametrize(
    ("text", "stop", "want"),
    [
        ("Hello world, hello moon", ("hello",), "Hello world, "),
        ("one two three", ("two three", "four"), "one "),
        ("abcabc", ("zz",), "abcabc"),
        ("stop at the start", ("stop",), ""),
    ],
    ids=["single", "across-tokens", "absent", "at-start"],
)
def test_stop_strings_end_the_text_before_them(text, stop, want):
    stream = TextStream(token_bytes(), stop)
    out = ""
    for token in load_tokenizer().encode(text).ids:
        out += stream.push(token)
        if stream.stopped:
            break
    out += stream.finish()
    assert out == want
    assert stream.stopped == (want != text)


def test_eos_adds_no_text():
    stream = TextStream(token_bytes(), ())
    assert stream.push(50256) == ""
    assert stream.push(15496) + stream.finish() == "Hello"


def test_deltas_join_to_the_whole_decode_up_to_the_stop_string():
    # Single-byte tokens (ids below 256) split characters anywhere and make invalid UTF-8, which is replaced.
    rng = random.Random(0)
    table = token_bytes()
    words = load_tokenizer().encode(" héllo 日本 🙂 world").ids
    for _ in range(300):
        ids = [rng.choice(words) if rng.random() < 0.5 else rng.randrange(256) for _ in range(rng.randrange(1, 24))]
        whole = b"".join(table[i] for i in ids).decode("utf-8", errors="replace")
        start = rng.randrange(len(whole)) if whole else 0
        stop = whole[start : start + rng.randint(1, 4)]
        cases = [((), whole)] + ([((stop,), whole[: whole.find(stop)])] if stop else [])
        for stops, want in cases:
            stream = TextStream(table, stops)
            got = "".join(stream.push(i) for i in ids) + stream.finish()
            assert got == want, (ids, stops)
