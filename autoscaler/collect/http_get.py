"""HTTP/1.1 GET over one kept-alive connection: what scraping a metrics page needs of HTTP, no more.

Why not httpx or ``http.client``: at fleet scale the scrape's cost is the client's CPU per request.
``http.client`` parses every response's headers through the ``email`` package and costs several
times a plain read of a Triton page over loopback; httpx costs more still (``benchmarks/fleet_round.md``
measures the three). A metrics page needs one request, the status, two headers and the body, which
ends in one of three ways: after ``Content-Length`` bytes, after the last chunk of the chunked
coding, or when the server closes the connection.

Rules:

- Every socket operation waits at most ``left()`` seconds, the caller's deadline; ``left`` raises
  once the deadline has passed, so a server that trickles is cut there like a silent one.
- The connection is kept for the next request unless the response ends with the connection (no
  length, no chunks), says ``Connection: close``, or is HTTP/1.0 without ``keep-alive``.
- A kept connection the server has closed since (its first read ends, or sending fails) raises
  :class:`StaleConnection`, so the caller may retry once on a new one.
- A status line, header block, chunk size or ``Content-Length`` that is not HTTP, headers over
  64 KiB or a body over 64 MiB raise :class:`HTTPError`; timeouts raise :class:`TimeoutError`.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

_READ: Final = 1 << 16
_MAX_HEAD: Final = 64 << 10
_MAX_BODY: Final = 64 << 20


class HTTPError(Exception):
    """The server's answer is not HTTP as this client reads it, or is too large."""


class StaleConnection(HTTPError):
    """A kept connection turned out closed by the server before it answered."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes

    def text(self) -> str:
        """The body decoded by the ``Content-Type`` charset (UTF-8 when none is named)."""
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = part.strip().partition("=")
            if name.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class Connection:
    """GETs to one ``host:port`` (TLS when ``tls`` is given), one at a time."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._host, self._port, self._tls = host, port, tls
        self._sock: socket.socket | None = None
        self._buffer = bytearray()

    def get(self, path: str, host_header: str, left: Callable[[], float]) -> Response:
        reused = self._sock is not None
        sock = self._sock if self._sock is not None else self._open(left())
        request = f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nAccept: text/plain\r\n\r\n".encode("latin-1")
        try:
            sock.settimeout(left())
            sock.sendall(request)
            head = self._read_until(b"\r\n\r\n", _MAX_HEAD, left, first=reused)
        except (BrokenPipeError, ConnectionResetError) as e:
            self.close()
            if reused:
                raise StaleConnection(f"kept connection closed by the server: {e}") from None
            raise
        status, reason, headers, keep = _parse_head(head)
        if 100 <= status < 200 or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked(left)
        elif "content-length" in headers:
            body = self._read_exact(_content_length(headers["content-length"]), left)
        else:
            body, keep = self._read_to_close(left), False
        if not keep:
            self.close()
        return Response(status, reason, headers, body)

    def _open(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self._host)
        self._sock = sock
        self._buffer.clear()
        return sock

    def _recv(self, left: Callable[[], float]) -> bytes:
        assert self._sock is not None
        self._sock.settimeout(left())
        return self._sock.recv(_READ)

    def _read_until(self, marker: bytes, limit: int, left: Callable[[], float], first: bool = False) -> bytes:
        """Up to and without ``marker``, which is consumed."""
        while True:
            at = self._buffer.find(marker)
            if at > limit or (at < 0 and len(self._buffer) > limit):
                raise HTTPError(f"no {marker!r} within {limit} bytes")
            if at >= 0:
                out = bytes(self._buffer[:at])
                del self._buffer[: at + len(marker)]
                return out
            data = self._recv(left)
            if not data:
                self.close()
                if first:
                    raise StaleConnection("kept connection closed by the server")
                raise HTTPError("the server closed the connection mid-answer")
            first = False
            self._buffer += data

    def _read_exact(self, n: int, left: Callable[[], float]) -> bytes:
        while len(self._buffer) < n:
            data = self._recv(left)
            if not data:
                short = n - len(self._buffer)
                self.close()
                raise HTTPError(f"the server closed the connection {short} bytes short")
            self._buffer += data
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def _read_chunked(self, left: Callable[[], float]) -> bytes:
        chunks: list[bytes] = []
        size_so_far = 0
        while True:
            line = self._read_until(b"\r\n", 1024, left)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HTTPError(f"bad chunk size {line[:40]!r}") from None
            if size < 0 or size_so_far + size > _MAX_BODY:
                raise HTTPError(f"chunk of {size} bytes: the body would pass {_MAX_BODY} bytes")
            if size == 0:
                while self._read_until(b"\r\n", _MAX_HEAD, left):  # trailers, up to the empty line
                    pass
                return b"".join(chunks)
            chunks.append(self._read_exact(size, left))
            size_so_far += size
            if self._read_exact(2, left) != b"\r\n":
                raise HTTPError("a chunk does not end with CRLF")

    def _read_to_close(self, left: Callable[[], float]) -> bytes:
        while True:
            data = self._recv(left)
            if not data:
                out = bytes(self._buffer)
                self._buffer.clear()
                return out
            self._buffer += data
            if len(self._buffer) > _MAX_BODY:
                raise HTTPError(f"body over {_MAX_BODY} bytes")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer.clear()


def _content_length(raw: str) -> int:
    try:
        n = int(raw.strip())
    except ValueError:
        raise HTTPError(f"bad Content-Length {raw[:40]!r}") from None
    if not 0 <= n <= _MAX_BODY:
        raise HTTPError(f"Content-Length {n}: must be in [0, {_MAX_BODY}]")
    return n


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str], bool]:
    """Status, reason, headers and whether the connection may be kept, from the header block."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (code.isdigit() and len(code) == 3):
        raise HTTPError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HTTPError(f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return int(code), reason, headers, keep
