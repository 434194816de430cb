"""How requests reach the ready pods: per request, or per connection as a Kubernetes Service does.

A Service (kube-proxy) balances connections: a connection goes to the pod kube-proxy picks when it
opens, and every request sent over it goes there. A tritonclient gRPC client keeps one HTTP/2
connection for as long as the application keeps the client, so what the pods get depends on how many
connections there are and how long they live. A routing is named by one of:

- ``round-robin``: each request to the next ready pod in turn: a Service whose clients open a
  connection per request (kube-proxy's IPVS round-robin). The simulator's default.
- ``least-loaded``: each request to the ready pod with the fewest requests in flight (ties to the
  oldest): a per-request balancer in front of the pods, as the chart's HAProxy (leastconn, which
  counts streams in flight).
- ``per-connection:N`` and ``per-connection:N:K``: the requests come over N client connections,
  request ``id`` over connection ``id mod N``. A connection is pinned to the pod it reached when it
  opened, picked round-robin over the ready pods as kube-proxy's IPVS mode picks per connection
  (iptables mode picks at random, which spreads the same on average). It opens again at its next
  request once its pod has left the Service, and, with K, after every K requests: short-lived
  clients. Without K a connection is kept for the run: an application's kept channels.

A router also says, for the simulator's look-ahead, how many arrivals pass before a pod can get one
(:meth:`Router.arrivals_before`; 0 when the next might).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from nlgsim.workload import Request

ROUTING_FORMS = "round-robin, least-loaded, per-connection:N or per-connection:N:K"


class Endpoint(Protocol):
    """What routing reads of a pod (:class:`nlgsim.cluster.Pod`)."""

    ready: bool
    deleted: float | None
    ready_at: float

    @property
    def index(self) -> int: ...

    @property
    def outstanding(self) -> int: ...


E = TypeVar("E", bound=Endpoint)


@dataclass(frozen=True)
class Routing:
    """A parsed routing name: ``kind``, and for ``per-connection`` its connections and the requests
    each carries before it opens again (0: kept)."""

    kind: str
    connections: int = 0
    requests_per_connection: int = 0


def parse_routing(text: str) -> Routing:
    """The routing ``text`` names; ValueError naming the forms allowed."""
    kind, _, rest = text.partition(":")
    if kind in ("round-robin", "least-loaded") and not rest:
        return Routing(kind)
    if kind == "per-connection" and rest:
        parts = rest.split(":")
        if len(parts) <= 2 and all(p.isdigit() and int(p) >= 1 for p in parts):
            return Routing(kind, int(parts[0]), int(parts[1]) if len(parts) == 2 else 0)
    raise ValueError(f"routing = {text!r}: must be {ROUTING_FORMS} (N, K whole numbers >= 1)")


class Router(Protocol[E]):
    def route(self, ready: Sequence[E], request: Request) -> E:
        """The pod of ``ready`` (not empty) that gets ``request``."""

    def arrivals_before(self, pod: E, ready: Sequence[E]) -> int:
        """Arrivals that go elsewhere before ``pod`` (ready) can get one; 0 when the next might."""


class RoundRobin(Generic[E]):
    def __init__(self) -> None:
        self.last = 0  # the last ready pod picked: route() advances it, then picks

    def route(self, ready: Sequence[E], request: Request) -> E:
        self.last = (self.last + 1) % len(ready)
        return ready[self.last]

    def arrivals_before(self, pod: E, ready: Sequence[E]) -> int:
        return (list(ready).index(pod) - self.last - 1) % len(ready)


class LeastLoaded(Generic[E]):
    def route(self, ready: Sequence[E], request: Request) -> E:
        return min(ready, key=lambda p: (p.outstanding, p.ready_at, p.index))

    def arrivals_before(self, pod: E, ready: Sequence[E]) -> int:
        return 0


class PerConnection(Generic[E]):
    def __init__(self, connections: int, requests_per_connection: int) -> None:
        self.connections = connections
        self.lifetime = requests_per_connection
        self.opening: RoundRobin[E] = RoundRobin()  # kube-proxy's pick as each connection opens
        self.pinned: dict[int, E] = {}
        self.sent: dict[int, int] = {}  # requests over each connection since it opened

    def route(self, ready: Sequence[E], request: Request) -> E:
        connection = request.id % self.connections
        pod = self.pinned.get(connection)
        expired = self.lifetime and self.sent.get(connection, 0) >= self.lifetime
        if pod is None or not pod.ready or pod.deleted is not None or expired:
            pod = self.opening.route(ready, request)
            self.pinned[connection] = pod
            self.sent[connection] = 0
        self.sent[connection] += 1
        return pod

    def arrivals_before(self, pod: E, ready: Sequence[E]) -> int:
        return 0


def make_router(text: str) -> Router[E]:
    """The router ``text`` names (:func:`parse_routing`), for pods of type ``E``."""
    routing = parse_routing(text)
    if routing.kind == "round-robin":
        return RoundRobin()
    if routing.kind == "least-loaded":
        return LeastLoaded()
    return PerConnection(routing.connections, routing.requests_per_connection)
