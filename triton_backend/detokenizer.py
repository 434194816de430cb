"""Token ids to text deltas that never split a UTF-8 character and never show a stop string.

GPT-2's tokens are bytes, and one character may span tokens, so bytes go through an incremental
UTF-8 decoder that holds an incomplete character back. With stop strings, the last few characters
are held back too, until it is clear they do not begin a stop string.
"""

from __future__ import annotations

import codecs

from triton_backend.presets import EOS_TOKEN_ID


class TextStream:
    def __init__(self, token_bytes: list[bytes], stop: tuple[str, ...]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = stop
        self._holdback = max((len(s) for s in stop), default=1) - 1
        self._text = ""
        self._emitted = 0
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add one token; returns the text that is now safe to send (may be empty)."""
        if self.stopped:
            return ""
        if token_id != EOS_TOKEN_ID:
            self._text += self._decoder.decode(self._token_bytes[token_id])
        return self._release(final=False)

    def finish(self) -> str:
        """The text still held back, once no more tokens will come."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    @property
    def text(self) -> str:
        return self._text[: self._emitted]

    def _release(self, final: bool) -> str:
        if self._stop:
            # Everything before _emitted was checked already: a new hit cannot start earlier.
            hits = [i for i in (self._text.find(s, self._emitted) for s in self._stop) if i >= 0]
            if hits:
                return self._emit_until(min(hits), stopped=True)
        safe = len(self._text) if final else len(self._text) - self._holdback
        return self._emit_until(max(safe, self._emitted), stopped=False)

    def _emit_until(self, end: int, stopped: bool) -> str:
        delta = self._text[self._emitted : end]
        self._emitted = end
        self.stopped = stopped
        return delta
