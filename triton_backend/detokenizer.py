"""Token ids to text deltas that never split a UTF-8 character and never show a stop string.

GPT-2's tokens are bytes, and one character may span tokens, so bytes go through an incremental
UTF-8 decoder that holds an incomplete character back. With stop strings, the last few characters
are held back too, until it is clear they do not begin a stop string.
"""

from __future__ import annotations

import codecs

from triton_backend.model_shapes import EOS_TOKEN_ID


class TextStream:
    def __init__(self, token_bytes: list[bytes], stop: tuple[str, ...]) -> None:
        self._token_bytes = token_bytes
        self._stop = stop
        self._holdback = max((len(s) for s in stop), default=1) - 1
        self._partial = b""  # the first bytes of a character whose other bytes are still to come
        self._held = ""  # decoded, not yet safe to send
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add one token; returns the text that is now safe to send (may be empty)."""
        if self.stopped:
            return ""
        if token_id == EOS_TOKEN_ID:
            text = ""
        else:
            data = self._partial + self._token_bytes[token_id]
            text, used = codecs.utf_8_decode(data, "replace", False)
            self._partial = data[used:]
        return self._release(text, final=False) if self._stop else text

    def finish(self) -> str:
        """The text still held back, once no more tokens will come."""
        if self.stopped:
            return ""
        text = codecs.utf_8_decode(self._partial, "replace", True)[0]
        self._partial = b""
        return self._release(text, final=True) if self._stop else text

    def _release(self, text: str, final: bool) -> str:
        # What was sent before was checked already: a new hit cannot start earlier.
        held = self._held + text
        hits = [i for i in (held.find(s) for s in self._stop) if i >= 0]
        if hits:
            self.stopped = True
            self._held = ""
            return held[: min(hits)]
        end = len(held) if final else max(len(held) - self._holdback, 0)
        self._held = held[end:]
        return held[:end]
