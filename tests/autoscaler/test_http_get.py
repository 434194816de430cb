"""The scraper's HTTP client against the test's own servers, answering each request with bytes the test
scripts: the three ways a body ends, kept and dropped connections, and a table of answers that are
not HTTP as the client reads it."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from autoscaler.collect.http_get import Connection, HTTPError, StaleConnection

OK = b"HTTP/1.1 200 OK\r\n"


class ScriptedServer:
    """Answers the n-th request (over all connections) with ``answers[n]``; after an answer it closes
    the connection when ``close_after`` says so. Counts connections and requests."""

    def __init__(self, answers: list[bytes], close_after: bool = False) -> None:
        self.answers, self.close_after = list(answers), close_after
        self.connections = self.requests = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                _, _, buffer = buffer.partition(b"\r\n\r\n")
                answer = self.answers[min(self.requests, len(self.answers) - 1)]
                self.requests += 1
                conn.sendall(answer)
                if self.close_after:
                    conn.close()
                    return
        except OSError:
            return

    def close(self) -> None:
        self._sock.close()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def within(seconds: float):
    deadline = time.monotonic() + seconds

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        return remaining

    return left


def get(server: ScriptedServer, connection: Connection | None = None):
    connection = connection or Connection("127.0.0.1", server.port)
    return connection.get("/metrics", f"127.0.0.1:{server.port}", within(5.0)), connection


LENGTH = OK + b"Content-Type: text/plain; version=0.0.4\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n"
UNTIL_CLOSE = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello until close"
CLOSING = OK + b"Connection: close\r\nContent-Length: 2\r\n\r\nhi"


@pytest.mark.parametrize(
    ("answer", "closes", "body", "connections"),
    [(LENGTH, False, b"hello", 1), (CHUNKED, False, b"hello, world", 1),
     (UNTIL_CLOSE, True, b"hello until close", 2), (CLOSING, True, b"hi", 2),
     (b"HTTP/1.1 204 No Content\r\n\r\n", False, b"", 1)],
    ids=["content-length", "chunked", "until-close", "connection-close", "no-content"],
)  # fmt: skip
def test_a_body_ends_as_the_answer_says_and_the_connection_is_kept_when_it_may_be(answer, closes, body, connections):
    with ScriptedServer([answer], close_after=closes) as server:
        first, connection = get(server)
        second, _ = get(server, connection)
        connection.close()
    assert first.body == second.body == body
    assert (server.requests, server.connections) == (2, connections)


def test_a_kept_connection_the_server_closed_is_stale_and_a_new_one_works():
    with ScriptedServer([LENGTH], close_after=True) as server:
        _, connection = get(server)
        with pytest.raises(StaleConnection):
            get(server, connection)
        again, _ = get(server, connection)
        connection.close()
    assert again.body == b"hello"
    assert server.connections == 2


def test_the_charset_of_the_content_type_decodes_the_text():
    latin = OK + b"Content-Type: text/plain; charset=latin-1\r\nContent-Length: 4\r\n\r\ncaf\xe9"
    unknown = OK + b"Content-Type: text/plain; charset=nope\r\nContent-Length: 2\r\n\r\nok"
    with ScriptedServer([latin, LENGTH, unknown]) as server:
        connection = Connection("127.0.0.1", server.port)
        texts = [connection.get("/", "x", within(5.0)).text() for _ in range(3)]
        connection.close()
    assert texts == ["café", "hello", "ok"]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (OK + b"no colon here\r\n\r\n", "bad header line"),
        (OK + b"Content-Length: lots\r\n\r\n", "bad Content-Length"),
        (OK + b"Content-Length: 999999999999\r\n\r\n", r"must be in \[0, 67108864\]"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhiXX0\r\n\r\n", "does not end with CRLF"),
        (OK + b"Content-Length: 10\r\n\r\nshort", "closed the connection 5 bytes short"),
        (OK + b"X-Big: " + b"x" * 70_000 + b"\r\n\r\n", "within 65536 bytes"),
    ],
    ids=["http2", "status-code", "not-http", "header", "length", "length-too-big", "chunk-size",
         "chunk-end", "short-body", "huge-head"],
)  # fmt: skip
def test_an_answer_that_is_not_http_as_read_here_is_an_error(answer, message):
    with ScriptedServer([answer], close_after=True) as server:
        connection = Connection("127.0.0.1", server.port)
        with pytest.raises(HTTPError, match=message):
            connection.get("/metrics", "x", within(5.0))
        connection.close()


def test_a_trickling_answer_is_cut_at_the_deadline():
    class Trickle(ScriptedServer):
        def _serve(self, conn: socket.socket) -> None:
            conn.recv(65536)
            conn.sendall(OK + b"Content-Length: 1000\r\n\r\n")
            for _ in range(100):
                time.sleep(0.05)
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    with Trickle([b""]) as server:
        connection = Connection("127.0.0.1", server.port)
        with pytest.raises(TimeoutError):
            connection.get("/metrics", "x", within(0.3))
        connection.close()
