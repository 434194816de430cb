"""Hand-written fakes for the autoscaler's tests: pods that count observations, ready-made windows."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import threading
import time
from bisect import bisect_left
from pathlib import Path

import httpx
import kmock
import yaml
from external_tools import PROMETHEUS, require
from fake_apiserver import deployment
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client import Histogram as PromHistogram

from autoscaler.aggregate import Histogram, LatencyStats, PodSample, WindowStats
from autoscaler.kube import new_client
from triton_backend.buckets import LATENCY_BUCKETS, TOKEN_BUCKETS

BOUNDS = {
    "request": LATENCY_BUCKETS, "ttft": LATENCY_BUCKETS, "pertoken": TOKEN_BUCKETS, "itl": TOKEN_BUCKETS,
}  # fmt: skip


class FakePod:
    """Counts observations the way a Triton pod's histograms do; ``sample()`` is one scrape."""

    def __init__(self) -> None:
        self.counts = {name: [0.0] * (len(b) + 1) for name, b in BOUNDS.items()}
        self.sums = dict.fromkeys(BOUNDS, 0.0)
        self.gauges: dict[str, float] = {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0}

    def observe(self, name: str, seconds: float, n: int = 1) -> FakePod:
        self.counts[name][bisect_left(BOUNDS[name], seconds)] += n
        self.sums[name] += seconds * n
        return self

    def restart(self) -> FakePod:
        """A restarted pod: every counter back to zero."""
        self.__init__()  # type: ignore[misc]
        return self

    def sample(self) -> PodSample:
        histograms = {}
        for name, bounds in BOUNDS.items():
            cumulative, acc = [], 0.0
            for le, c in zip((*bounds, math.inf), self.counts[name], strict=True):
                acc += c
                cumulative.append((float(le), acc))
            histograms[name] = Histogram(tuple(cumulative), self.sums[name], acc)
        return PodSample(histograms=histograms, gauges=dict(self.gauges))


def stats(ms: float, count: float = 10) -> LatencyStats:
    s = ms / 1000.0
    return LatencyStats(count=count, mean=s, p50=s, p90=s, p99=s)


def window(
    pertoken_ms: float | None = None,
    request_ms: float | None = None,
    *,
    ttft_ms: float | None = None,
    pods: int = 1,
    running: float = 1,
    waiting: float = 0,
    kv_usage: float | None = None,
    span: float = 60.0,
) -> WindowStats:
    """A window with the given means (None = nothing finished) and gauges."""
    latencies = {}
    for name, ms in (("pertoken", pertoken_ms), ("request", request_ms), ("ttft", ttft_ms)):
        if ms is not None:
            latencies[name] = stats(ms)
    gauges = {"running": running, "waiting": waiting}
    if kv_usage is not None:
        gauges["kv_usage"] = kv_usage
    return WindowStats(latencies=latencies, gauges=gauges, pods=pods, span=span)


NO_DATA = WindowStats.empty()
IDLE = WindowStats(latencies={}, gauges={"running": 0.0, "waiting": 0.0}, pods=1, span=60.0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeClock:
    """The control loop's clock in tests: moves only when told."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class PodMetrics:
    """A Triton pod's ``/metrics`` as a real HTTP server: docs/metrics.md's families, fed by the test.

    Uses prometheus-client's own instruments and exposition, so what the autoscaler parses is the
    format a real exporter writes. ``stop()``/``start()`` simulate the pod (or its port) going away.
    """

    def __init__(self, model: str = "gpt2", port: int | None = None) -> None:
        self.port = port or free_port()
        self.registry = CollectorRegistry()
        labels = ["model", "version"]
        families = {
            "request": ("nlg_request_latency_seconds", LATENCY_BUCKETS),
            "ttft": ("nlg_time_to_first_token_seconds", LATENCY_BUCKETS),
            "pertoken": ("nlg_time_per_output_token_seconds", TOKEN_BUCKETS),
            "itl": ("nlg_inter_token_latency_seconds", TOKEN_BUCKETS),
        }
        reg = self.registry
        self.histograms = {
            short: PromHistogram(name, short, labels, buckets=bounds, registry=reg).labels(model, "1")
            for short, (name, bounds) in families.items()
        }
        self.running = Gauge("nlg_requests_running", "running", labels, registry=reg).labels(model, "1")
        self.waiting = Gauge("nlg_requests_waiting", "waiting", labels, registry=reg).labels(model, "1")
        self.kv = Gauge("nlg_kv_cache_usage_ratio", "kv", labels, registry=reg).labels(model, "1")
        self.prompt_tokens = Counter("nlg_prompt_tokens", "prompt", labels, registry=reg).labels(model, "1")
        self.generation_tokens = Counter("nlg_generation_tokens", "gen", labels, registry=reg).labels(model, "1")
        finished = Counter("nlg_requests_finished", "finished", [*labels, "finish_reason"], registry=reg)
        self.finished = {r: finished.labels(model, "1", r) for r in ("stop", "length")}
        self._server = None
        self.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve(self, pertoken_s: float, n: int = 10, request_s: float = 1.0) -> None:
        """``n`` requests finished with this per-token latency."""
        for _ in range(n):
            self.histograms["pertoken"].observe(pertoken_s)
            self.histograms["request"].observe(request_s)

    def serve_requests(
        self, n: int, *, prompt: int, output: int, ttft_s: float, pertoken_s: float, reason: str = "length"
    ) -> None:
        """``n`` one-choice requests finished, counted as a Triton pod counts them."""
        for _ in range(n):
            self.histograms["ttft"].observe(ttft_s)
            self.histograms["pertoken"].observe(pertoken_s)
            self.histograms["request"].observe(ttft_s + pertoken_s * output)
        self.prompt_tokens.inc(n * prompt)
        self.generation_tokens.inc(n * output)
        self.finished[reason].inc(n)

    def start(self) -> None:
        self._server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class KubeEmulator:
    """kmock's KubernetesEmulator on a loopback port, in its own thread and event loop.

    The autoscaler uses the synchronous official client, so the emulator cannot share the test's
    thread. ``client()`` gives an ApiClient pointed at it; ``objects`` is kmock's object store.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self.url = ""

    def __enter__(self) -> KubeEmulator:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kmock did not start in 10 s")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def objects(self):
        return self.emulator.objects

    def client(self) -> k8s.ApiClient:
        return k8s.ApiClient(k8s.Configuration(host=self.url))

    def autoscaler_client(self, url: str | None = None) -> k8s.ApiClient:
        """A client made the way the autoscaler makes its own (no retries, its User-Agent)."""
        return new_client(k8s.Configuration(host=url or self.url))

    def add_deployment(self, name: str, replicas: int, namespace: str = "default") -> None:
        self.objects["apps/v1/deployments", namespace, name] = {
            **deployment(name, replicas),
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        }

    def replicas(self, name: str, namespace: str = "default") -> int:
        return int(self.objects["apps/v1/deployments", namespace, name]["spec"]["replicas"])

    def set_replicas(self, name: str, replicas: int, namespace: str = "default") -> None:
        """A person running ``kubectl scale``."""
        self.objects["apps/v1/deployments", namespace, name].patch({"spec": {"replicas": replicas}})


class PrometheusServer:
    """The Debian ``prometheus`` binary on a loopback port, scraping ``targets`` every second."""

    def __init__(self, targets: list[str], tmp: Path, scrape_interval: str = "1s") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": "triton", "static_configs": [{"targets": targets}]}],
        }
        self._config = tmp / "prometheus.yml"
        self._config.write_text(yaml.safe_dump(config))
        self._data = tmp / "tsdb"
        self._log = tmp / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        binary = require(PROMETHEUS)
        with open(self._log, "wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={self._config}", f"--storage.tsdb.path={self._data}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            wait_http(f"{self.url}/-/ready", 30, self.process)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def wait_for_samples(self, query: str, timeout: float = 30) -> None:
        """Until ``query`` returns a non-empty vector (Prometheus has scraped enough)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = httpx.get(f"{self.url}/api/v1/query", params={"query": query}).json()
            if body["data"]["result"]:
                return
            time.sleep(0.5)
        log = self._log.read_text()[-2000:]
        raise TimeoutError(f"prometheus has no samples for {query!r} after {timeout}s: {log}")


def wait_http(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready in {timeout}s")


class SilentServer:
    """Accepts TCP connections on a loopback port and never answers: a hung server, or one whose
    process died while an orphan still holds its socket."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() alone would not
        self._sock.close()
        for conn in self._held:
            conn.close()
        self._thread.join(5)

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Partition:
    """A TCP proxy to ``upstream`` (``host:port``) that a test can cut and heal.

    Cut, it still accepts connections but passes no byte either way, as a network partition
    looks to a client: calls end only by their timeouts.
    """

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.cut = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name="partition", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._sock.accept()
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                continue
            self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self.cut.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stopped.set()
        self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in self._conns:
            conn.close()


class FakeTriton:
    """Triton's model-control and metrics endpoints for one model, as a real HTTP server of the test.

    ``count`` is the model's instance count. A load request waits for ``load_gate`` (set by default)
    before it takes effect and answers; ``hang`` makes every request wait unanswered while it is set
    (the server died and an orphan holds its socket); ``busy`` does so for reads only (a server busy
    loading instances, its load still under way). ``refuse`` makes a load answer 400.
    ``loads`` counts the load requests.
    """

    def __init__(self, model: str = "gpt2", count: int = 1) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.model, self.count, self.loads, self.refuse = model, count, 0, False
        self.load_gate = threading.Event()
        self.load_gate.set()
        self.hang = threading.Event()
        self.busy = threading.Event()
        self._stopped = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _wait_while_hung(self) -> bool:
                while fake.hang.is_set():
                    if fake._stopped.wait(0.05):
                        return False
                return True

            def do_GET(self) -> None:
                while fake.busy.is_set() and not fake._stopped.wait(0.05):
                    pass
                if not self._wait_while_hung():
                    return
                if self.path == f"/v2/models/{fake.model}/config":
                    config = {"name": fake.model, "instance_group": [{"kind": "KIND_CPU", "count": fake.count}]}
                    self._send(200, json.dumps(config).encode())
                elif self.path == "/metrics":
                    text = "".join(
                        f'# TYPE {name} gauge\n{name}{{model="{fake.model}",version="1"}} 0\n'
                        for name in ("nlg_requests_running", "nlg_requests_waiting")
                    )
                    self._send(200, text.encode(), "text/plain; version=0.0.4")
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self._wait_while_hung():
                    return
                fake.loads += 1
                while not fake.load_gate.wait(0.05):
                    if fake._stopped.is_set() or fake.hang.is_set():
                        return  # died mid-load: no answer ever comes
                if fake.refuse:
                    self._send(400, b'{"error": "failed to load \'gpt2\'"}')
                    return
                config = json.loads(body["parameters"]["config"])
                fake.count = int(config["instance_group"][0]["count"])
                self._send(200, b"{}")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.metrics_url = f"{self.url}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-triton", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeTriton:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_profile(path: Path, *, max_batch: int = 16, startup_s: float = 5.0) -> Path:
    """An engine profile file as ``python -m nlgsim profile`` writes one: decode 10 ms + 1 ms per
    sequence, prefill 20 ms + 1 ms per prompt token."""
    profile = {
        "hardware": "test", "preset": "test", "dtype": "n/a", "source": "synthetic",
        "max_batch": max_batch, "max_context": 1024, "prefill_chunk_tokens": 256, "startup_s": startup_s,
        "decode_batch": [1, max_batch], "decode_context": [1, 1024],
        "decode_s": [[0.011, 0.011], [0.010 + 0.001 * max_batch] * 2],
        "prefill_tokens": [1, 1024], "prefill_s": [0.021, 0.020 + 0.001 * 1024],
    }  # fmt: skip
    path.write_text(json.dumps(profile))
    return path
