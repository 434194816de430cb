"""Pods of one Deployment behind a Service: start-up, routing, scale-down and replica-seconds.

* A pod is created ``startup_s`` (the profile's time from start to ready) before it is ready; only
  ready pods are endpoints of the Service, are scraped, and get requests.
* Routing (:mod:`nlgsim.routing`) picks a ready pod per request (``round-robin``, the default;
  ``least-loaded``, a per-request balancer) or per client connection (``per-connection:N[:K]``, a
  Service's kube-proxy). While no pod is ready, requests wait at the Service and go out, oldest
  first, when one is.
* Scaling down deletes pods the way the ReplicaSet controller ranks them: pods not yet ready first
  (newest first), then ready pods with the fewest requests in flight (newest first on ties). A deleted
  ready pod leaves the Service at once and drains: it finishes what it admitted, then is gone.
* A pod costs from creation until it is gone (start-up and draining included): replica-seconds, the
  simulator's GPU-seconds with one GPU a replica.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from nlgsim.profile import EngineProfile
from nlgsim.replica import OnDone, Replica, RequestState
from nlgsim.routing import Router, make_router
from nlgsim.workload import Request


@dataclass(eq=False)  # a pod is itself: found in the Service's list by identity, not by its fields
class Pod:
    replica: Replica
    created: float
    ready_at: float
    ready: bool = False
    deleted: float | None = None
    gone: float | None = None

    @property
    def index(self) -> int:
        return self.replica.index

    @property
    def outstanding(self) -> int:
        return self.replica.outstanding


class Cluster:
    def __init__(
        self,
        profile: EngineProfile,
        routing: str,
        on_done: OnDone,
        startup_s: float | None = None,
        instruments: bool = True,
    ):
        self.router: Router[Pod] = make_router(routing)
        self.profile = profile
        self.routing = routing
        self.on_done = on_done
        self.startup_s = profile.startup_s if startup_s is None else startup_s
        self.instruments = instruments
        """Whether the pods keep their metrics (``Replica``'s ``instruments``)."""
        self.pods: list[Pod] = []
        self.ready: list[Pod] = []  # Service endpoints, in order of readiness
        self.pending: deque[RequestState] = deque()  # requests waiting for a ready pod
        self.changes: list[tuple[float, int, int, int]] = [(0.0, 0, 0, 0)]
        """(time, pods the Deployment counts, ready pods, pods billed) after every change."""

    @property
    def current(self) -> int:
        """Pods the Deployment counts: created and not deleted (the ``replicas`` it converges to)."""
        return sum(1 for p in self.pods if p.deleted is None)

    def create(self, now: float, ready_now: bool = False) -> Pod:
        pod = Pod(
            Replica(len(self.pods), self.profile, self.on_done, self.instruments),
            now,
            now if ready_now else now + self.startup_s,
        )
        self.pods.append(pod)
        self._record(now)
        return pod

    def mark_ready(self, pod: Pod, now: float) -> None:
        if pod.deleted is not None or pod.ready:
            return
        pod.ready = True
        self.ready.append(pod)
        self._record(now)

    def delete(self, count: int, now: float) -> list[Pod]:
        """Delete ``count`` pods (ranked as the ReplicaSet controller does); returns them."""
        alive = [p for p in self.pods if p.deleted is None]
        ranked = sorted(alive, key=lambda p: (p.ready, p.replica.outstanding, -p.created, -p.index))
        victims = ranked[:count]
        for pod in victims:
            pod.deleted = now
            if pod.ready:
                self.ready.remove(pod)
            if not pod.ready or pod.replica.outstanding == 0:
                pod.gone = now
        self._record(now)
        return victims

    def drained(self, pod: Pod, now: float) -> None:
        if pod.deleted is not None and pod.gone is None and pod.replica.outstanding == 0:
            pod.gone = now
            self._record(now)

    def route(self, request: Request) -> Pod | None:
        """The ready pod that gets ``request``, or ``None`` when no pod is ready."""
        if not self.ready:
            return None
        return self.router.route(self.ready, request)

    def replica_seconds(self, until: float) -> float:
        return sum(
            max(0.0, min(p.gone if p.gone is not None else until, until) - p.created) for p in self.pods
        )

    def _record(self, now: float) -> None:
        entry = (now, self.current, len(self.ready), sum(1 for p in self.pods if p.gone is None))
        if self.changes and self.changes[-1][0] == now:
            self.changes[-1] = entry
        else:
            self.changes.append(entry)
