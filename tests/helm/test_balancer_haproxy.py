"""The chart's balancer, run: its haproxy.cfg as `helm template` renders it, by Debian's haproxy, in front
of three tritonservers on loopback addresses of their own (127.0.0.2-4, one set of port numbers, as
three pods), their membership resolved from the headless Service's name by a DNS server of the
test's own. Only values the chart exposes differ from its defaults: the ports (free ones) and the
nameserver (the test's).

One client that keeps its channel has its requests spread over the pods; a pod added to the DNS
answer is used once resolved; a pod that stops being ready, or leaves the DNS answer, gets no new
stream while its open one finishes with its final response.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import tritonclient.grpc as grpcclient
from balancer_testkit import HAProxy, balancer_config, shared_free_port
from dns_responder import DnsResponder
from helm_testkit import NAMESPACE, RELEASE, Helm, Rendered

from tests.serving.serving_testkit import metric, scrape, wait_for
from triton_backend.cli.client import stream_on
from triton_backend.launch import TritonServer, free_port

pytestmark = pytest.mark.integration

PODS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PODS_NAME = f"{RELEASE}-nlg-serving-triton-pods.{NAMESPACE}.svc.cluster.local"
SHORT = {"max_tokens": 2, "ignore_eos": True}
LONG = {"max_tokens": 1000, "ignore_eos": True}  # seconds on the tiny model; 4 + 1000 tokens fit its context


@dataclass
class Fleet:
    balancer: HAProxy
    dns: DnsResponder
    servers: dict[str, TritonServer]
    grpc_url: str
    http_port: int
    stopped: set[str] = field(default_factory=set)  # pods sent SIGTERM

    def resolve(self, *pods: str) -> None:
        self.dns.set(PODS_NAME, pods)

    def slot_of(self, pod: str) -> str:
        """The gRPC backend's server slot HAProxy last gave `pod`'s address."""
        slots = re.findall(rf"triton-grpc/(\S+) changed its IP from \S+ to {re.escape(pod)} ", self.balancer.log())
        assert slots, f"HAProxy never resolved {pod}:\n{self.balancer.log()[-3000:]}"
        return str(slots[-1])

    def served_since(self, count: int, backend: str = "triton-grpc", timeout: float = 10) -> list[str]:
        """The pods of the requests logged after the first `count`, once there are none left to come
        (the log line is written as a request ends, a moment after the client has its response)."""
        settled = time.monotonic() + 0.5
        deadline = time.monotonic() + timeout
        seen = self.balancer.served(backend)
        while time.monotonic() < min(settled, deadline):
            time.sleep(0.1)
            now = self.balancer.served(backend)
            if len(now) != len(seen):
                seen, settled = now, time.monotonic() + 0.5
        return seen[count:]


def render_with(helm: Helm, ports: dict[str, int], balancer_ports: dict[str, int], nameserver: str) -> Rendered:
    sets = [
        *(f"triton.ports.{name}={port}" for name, port in ports.items()),
        *(f"balancer.ports.{name}={port}" for name, port in balancer_ports.items()),
        f"balancer.dns.nameservers={{{nameserver}}}",
    ]
    return Rendered.parse(helm.template(*(arg for s in sets for arg in ("--set", s))))


def start_all(servers: list[TritonServer]) -> None:
    """Starts the servers side by side (each loads its model for seconds); raises the first failure."""
    errors: list[BaseException] = []

    def start(server: TritonServer) -> None:
        try:
            server.start()
        except BaseException as e:  # raised below, once every server had its chance
            errors.append(e)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def fleet(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("balancer")
    ports = {name: shared_free_port(PODS) for name in ("http", "grpc", "metrics")}
    balancer_ports = {name: free_port() for name in ("http", "grpc", "metrics")}
    with DnsResponder() as dns:
        dns.set(PODS_NAME, PODS)
        config = balancer_config(render_with(helm, ports, balancer_ports, dns.address))
        servers = {
            pod: TritonServer(
                env={"NLG_PRESET": "tiny"},
                host=pod,
                ports=(ports["http"], ports["grpc"], ports["metrics"]),
                log_path=workdir / f"triton-{pod}.log",
            )
            for pod in PODS
        }
        try:
            start_all(list(servers.values()))
            with HAProxy(config, workdir) as balancer:
                for pod in PODS:
                    resolved = rf"triton-grpc/\S+ changed its IP from \S+ to {re.escape(pod)} "
                    assert balancer.wait_for_log(resolved, 15), balancer.log()[-3000:]
                yield Fleet(balancer, dns, servers, f"127.0.0.1:{balancer_ports['grpc']}", balancer_ports["http"])
        finally:
            for server in servers.values():
                server.stop()


def generate(client: grpcclient.InferenceServerClient, sampling: dict) -> list[str]:
    """One request on its own stream of the kept channel, to its final response; its finish reasons."""
    reasons: list[str] = []
    for delta in stream_on(client, "the balancer", "Once upon a time", sampling, timeout=120):
        reasons = delta.finish_reasons or reasons
    return reasons


def server_metric(server: TritonServer, *names: str) -> float:
    """The sum of every sample of `names` on one server's metrics endpoint."""
    samples = scrape(server.metrics_url)
    return sum(metric(samples, name) for name in names)


def test_one_kept_channel_spreads_its_requests_over_every_pod(fleet):
    fleet.resolve(*PODS)

    def finished() -> dict[str, float]:
        return {pod: server_metric(s, "nlg_requests_finished_total") for pod, s in fleet.servers.items()}

    before = finished()
    with grpcclient.InferenceServerClient(fleet.grpc_url) as client:
        for _ in range(30):
            assert generate(client, SHORT) == ["length"]
    assert wait_for(lambda: sum(finished().values()) - sum(before.values()) >= 30, 10)
    per_pod = {pod: n - before[pod] for pod, n in finished().items()}
    # Within 10% of even: 10 +- 1 each, counted by the servers themselves.
    assert sum(per_pod.values()) == 30
    assert all(9 <= n <= 11 for n in per_pod.values()), per_pod

    # HTTP/1.1 keep-alive: one connection, each request balanced on its own.
    logged = len(fleet.served_since(0, "triton-http"))
    connection = http.client.HTTPConnection("127.0.0.1", fleet.http_port, timeout=60)
    body = json.dumps({"text_input": "Once upon a time", "sampling_parameters": json.dumps(SHORT)})
    try:
        for _ in range(3):
            connection.request("POST", "/v2/models/gpt2/generate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200
            assert "text_output" in json.loads(response.read())
    finally:
        connection.close()
    assert sorted(fleet.served_since(logged, "triton-http")) == sorted(PODS)


@pytest.mark.e2e
def test_a_pod_added_is_used_within_the_resolvers_interval_and_one_health_check(fleet, chart_values):
    added = PODS[2]
    mark = len(fleet.balancer.log())
    fleet.resolve(*PODS[:2])
    assert fleet.balancer.wait_for_log(rf"triton-grpc/{fleet.slot_of(added)} is going DOWN for maintenance", 10, mark)
    bound = chart_values["balancer"]["dns"]["interval"] + chart_values["balancer"]["healthCheck"]["interval"]
    with grpcclient.InferenceServerClient(fleet.grpc_url) as client:
        generate(client, SHORT)  # the channel is open before the pod is added
        logged = len(fleet.served_since(0))  # that request's log line included
        fleet.resolve(*PODS)
        added_at = time.monotonic()
        sent: list[float] = []
        while added not in fleet.balancer.served("triton-grpc")[logged:] and len(sent) < 200:
            sent.append(time.monotonic() - added_at)
            generate(client, SHORT)
    pods = fleet.served_since(logged)
    assert len(pods) == len(sent) and added in pods, (pods, sent)
    first = sent[pods.index(added)]
    assert first <= bound, f"the added pod's first request was sent {first:.2f} s after it was added (bound {bound} s)"


@dataclass
class LongStream:
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    finished_at: float = 0.0
    thread: threading.Thread | None = None


def open_long_stream(fleet: Fleet, pods: tuple[str, ...]) -> tuple[LongStream, str]:
    """One long stream through the balancer on a client of its own; returns once a pod generates it,
    with that pod."""
    stream = LongStream()

    def run() -> None:
        try:
            with grpcclient.InferenceServerClient(fleet.grpc_url) as client:
                stream.reasons = generate(client, LONG)
        except Exception as e:  # the test reports what the client saw
            stream.error = repr(e)
        stream.finished_at = time.monotonic()

    def generating() -> list[str]:
        return [p for p in pods if server_metric(fleet.servers[p], "nlg_requests_running", "nlg_requests_waiting")]

    stream.thread = threading.Thread(target=run, daemon=True)
    stream.thread.start()
    assert wait_for(lambda: bool(generating()), 30), "the long stream never started"
    [pod] = generating()
    return stream, pod


def drain_and_check(fleet: Fleet, pods: tuple[str, ...], drain: Callable[[str], str]) -> None:
    """Opens a long stream, drains the pod that generates it with `drain(pod)`, which returns the HAProxy
    log line (a regex) that takes the pod out, waits for it, then sends six short requests on a kept
    channel: none may reach the drained pod, and its open stream must end with its final response,
    having run to its length."""
    logged = len(fleet.served_since(0))  # every earlier request's log line included
    stream, drained = open_long_stream(fleet, pods)
    mark = len(fleet.balancer.log())
    drained_at = time.monotonic()
    out = drain(drained)
    assert fleet.balancer.wait_for_log(out, 30, mark), fleet.balancer.log()[-3000:]
    with grpcclient.InferenceServerClient(fleet.grpc_url) as client:
        for _ in range(6):
            assert generate(client, SHORT) == ["length"]
    assert stream.thread is not None
    stream.thread.join(120)
    assert stream.error is None, stream.error
    assert stream.reasons == ["length"], stream.reasons  # ran to max_tokens: never cut
    assert stream.finished_at > drained_at, "the long stream ended before the drain began"
    served = Counter(fleet.served_since(logged))
    # The drained pod served its long stream and nothing else; the others the six.
    assert served[drained] == 1, served
    assert sum(served.values()) == 7, served


def test_a_pod_that_stops_being_ready_gets_no_new_stream_and_finishes_its_open_one(fleet):
    """SIGTERM closes Triton's HTTP endpoint, so its readiness: the health check takes the pod out."""
    fleet.resolve(*PODS)

    def stop(pod: str) -> str:
        process = fleet.servers[pod].process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        fleet.stopped.add(pod)
        return rf"Server triton-grpc/{fleet.slot_of(pod)} is DOWN"

    drain_and_check(fleet, PODS, stop)


def test_a_pod_that_leaves_the_dns_answer_gets_no_new_stream_and_finishes_its_open_one(fleet):
    """A deleted pod leaves the EndpointSlices, so the headless Service's answer, and keeps serving
    through its preStop: HAProxy takes its slot out at the next resolution."""
    ready = tuple(p for p in PODS if p not in fleet.stopped)
    fleet.resolve(*ready)

    def delete(pod: str) -> str:
        fleet.resolve(*(p for p in ready if p != pod))
        return rf"Server triton-grpc/{fleet.slot_of(pod)} is going DOWN for maintenance"

    drain_and_check(fleet, ready, delete)
