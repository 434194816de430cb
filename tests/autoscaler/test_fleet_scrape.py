"""Scraping a fleet: a round counts the pods that answered, whatever the others do (never answer,
answer byte by byte, answer an error), ends by its deadline, and does not pile scrapes on a hung pod."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from autoscaler_testkit import PodMetrics, SilentServer

from autoscaler.collect import SourceError
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.collect.scrape import Scraper


class TricklingServer:
    """Answers 200 with a body that arrives ``chunk`` bytes every ``every`` seconds and never ends
    (``first_after``: seconds before the headers and the first chunk)."""

    def __init__(self, every: float = 0.05, first_after: float = 0.0, chunk: bytes = b"#") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.target = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._every, self._first_after, self._chunk = every, first_after, chunk
        self._stopped = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, name="trickle", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self._stopped.wait(self._first_after):
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n")
            while not self._stopped.is_set():
                conn.sendall(self._chunk)
                self._stopped.wait(self._every)
        except OSError:
            pass

    def close(self) -> None:
        self._stopped.set()
        self._sock.close()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> TricklingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def pods():
    started = [PodMetrics(), PodMetrics()]
    yield started
    for pod in started:
        pod.stop()


def read_twice(source: DirectSource, serve) -> tuple:
    """A baseline round, traffic, a second round: the second round's window."""
    source.read(100.0, "gpt2", 60)
    serve()
    return source.read(105.0, "gpt2", 60)


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize("slow", ["silent", "trickling"])
def test_a_pod_that_never_finishes_answering_is_left_out_and_the_others_count(pods, slow):
    errors: dict[str, str] = {}
    server = SilentServer() if slow == "silent" else TricklingServer()
    target = f"127.0.0.1:{server.port}" if slow == "silent" else server.target
    lister = StaticTargets([pods[0].target, target, pods[1].target])
    source = DirectSource(lister, 2.0, 10.0, on_error=lambda t, m: errors.__setitem__(t, m))
    try:

        def serve() -> None:
            pods[0].serve(0.030, n=3)
            pods[1].serve(0.010, n=1)

        window = read_twice(source, serve)
    finally:
        source.close()
        server.close()
    assert window.pods == 2
    assert window.latency("pertoken").count == 4
    assert window.latency("pertoken").mean == pytest.approx(0.025)
    assert list(errors) == [target]


class LoopbackServer:
    """A test's own HTTP server on a free loopback port, served from a thread until the block ends."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.target = f"127.0.0.1:{self._server.server_address[1]}"
        self.url = f"http://{self.target}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class ErrorServer(LoopbackServer):
    """Answers every request with 503, as an overloaded pod's proxy might."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(503)
                self.send_header("Content-Length", "10")
                self.end_headers()
                self.wfile.write(b"overloaded")

        super().__init__(Handler)


@pytest.mark.integration
def test_a_pod_answering_an_error_is_left_out(pods):
    errors: dict[str, str] = {}
    with ErrorServer() as failing:
        lister = StaticTargets([pods[0].target, failing.target])
        source = DirectSource(lister, 1.0, 10.0, on_error=lambda t, m: errors.__setitem__(t, m))
        try:
            window = read_twice(source, lambda: pods[0].serve(0.020, n=2))
        finally:
            source.close()
    assert (window.pods, window.latency("pertoken").count) == (1, 2)
    assert errors[failing.target].endswith("failed: HTTP 503 Service Unavailable")


@pytest.mark.integration
def test_every_pod_failing_is_a_source_error():
    with SilentServer() as silent:
        source = DirectSource(StaticTargets([f"127.0.0.1:{silent.port}"]), 0.3, 10.0)
        try:
            with pytest.raises(SourceError, match=r"no answer within 0.3 s"):
                source.read(1.0, "gpt2", 60)
        finally:
            source.close()


class CountingServer(LoopbackServer):
    """A pod's metrics page over HTTP/1.1 keep-alive that counts connections and requests."""

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def do_GET(self) -> None:
                server.requests += 1
                body = b'# TYPE nlg_requests_running gauge\nnlg_requests_running{model="gpt2"} 1\n'
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.connections = self.requests = 0
        super().__init__(Handler)


@pytest.mark.integration
def test_one_round_scrapes_each_pod_once_for_all_models():
    with CountingServer() as pod:
        source = DirectSource(StaticTargets([pod.target]), 2.0, 10.0)
        try:
            source.read(1.0, "gpt2", 60)
            source.read(1.0, "other-model", 60)
            assert pod.requests == 1
            assert source.read(2.0, "gpt2", 60).gauges == {"running": 1.0}
        finally:
            source.close()
    assert (pod.requests, pod.connections) == (2, 1)  # one connection, kept between rounds


@pytest.mark.integration
def test_a_target_that_leaves_the_list_is_disconnected_and_reconnected_when_back():
    with CountingServer() as a, CountingServer() as b:
        scraper = Scraper(2.0)
        try:
            both = {"a": a.url, "b": b.url}
            assert set(scraper.scrape(both).texts) == {"a", "b"}
            assert set(scraper.scrape({"a": a.url}).texts) == {"a"}
            assert set(scraper.scrape(both).texts) == {"a", "b"}
            assert set(scraper.scrape({"a": a.url, "b": a.url}).texts) == {"a", "b"}  # b moved to a's address
        finally:
            scraper.close()
    assert (a.connections, a.requests) == (2, 5)
    assert (b.connections, b.requests) == (2, 2)


def test_a_target_that_is_not_an_http_url_is_reported_not_raised():
    scraper = Scraper(1.0)
    try:
        result = scraper.scrape({"x": "ftp://pod:21/metrics"})
    finally:
        scraper.close()
    assert result.errors == {"x": "scrape of ftp://pod:21/metrics failed: 'ftp://pod:21/metrics': not an http(s) URL"}


def test_bad_construction_is_refused():
    with pytest.raises(ValueError, match="concurrency"):
        Scraper(1.0, concurrency=0)


@pytest.mark.e2e
@pytest.mark.integration
def test_a_round_ends_by_its_deadline_whatever_the_slow_pods_do(pods):
    """Timing: the round returns within its timeout plus scheduling slack, with one pod silent and
    one sending its first byte half way to the deadline and then nothing."""
    with SilentServer() as silent, TricklingServer(every=30.0, first_after=1.0) as slow:
        urls = {p.target: f"http://{p.target}/metrics" for p in pods}
        urls |= {"silent": f"{silent.url}/metrics", "slow": f"http://{slow.target}/"}
        scraper = Scraper(2.0)
        try:
            started = time.monotonic()
            result = scraper.scrape(urls)
            took = time.monotonic() - started
        finally:
            scraper.close()
    assert took < 2.5
    assert set(result.texts) == {p.target for p in pods}
    assert set(result.errors) == {"silent", "slow"}


@pytest.mark.e2e
@pytest.mark.integration
def test_a_pod_whose_last_scrape_still_runs_is_not_asked_again():
    """A scrape thread that outlives the round (here its clock lags 5 s behind the round's, as a
    thread stuck in a name lookup never looks at one) keeps its pod out of the next round."""

    def clock() -> float:
        lag = 5.0 if threading.current_thread().name.startswith("scrape") else 0.0
        return time.monotonic() - lag

    with SilentServer() as silent:
        scraper = Scraper(0.5, clock=clock)
        try:
            first = scraper.scrape({"hung": silent.url})
            second = scraper.scrape({"hung": silent.url})
        finally:
            scraper.close()
    assert "no answer within 0.5 s" in first.errors["hung"]
    assert "still running" in second.errors["hung"]


@pytest.mark.integration
def test_an_https_target_that_answers_plain_http_fails_as_a_tls_error():
    with CountingServer() as pod:
        scraper = Scraper(2.0)
        try:
            result = scraper.scrape({"tls": f"https://{pod.target}/metrics"})
        finally:
            scraper.close()
    assert result.texts == {}
    assert "SSLError" in result.errors["tls"]
