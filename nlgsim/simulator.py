"""The discrete-event loop: arrivals, engine steps, pod start-up, scrapes and autoscaler rounds.

Time is a float of seconds from the start of the run, kept by the loop alone; every component
takes it as an argument. Events at the same time run in a fixed order (engine steps end, pods become
ready, requests arrive, idle engines start a step, scrapes, autoscaler rounds) and then in the order
they were scheduled, so a run is a function of its scenario: same scenario and seed, same result, bit
for bit. An idle engine starts its step after every request of that instant has arrived, as the real
engine loop takes everything in its inbox before a step.

The autoscaler is the deployed one: every ``scrape_interval`` seconds each ready pod's metrics are
read into an ``autoscaler.aggregate.PodSample`` (what the collector builds from ``/metrics``); every
``loop_interval`` seconds the service's own control loop, ``autoscaler.loop.Controller``, runs a
round on the simulated clock: it observes the Deployment through :class:`ClusterActuator`, reads the
window from :class:`ScrapedSource` (the real ``WindowAggregator`` over the samples scraped since the
last round), lets the policy decide and scales the Deployment, which creates or deletes pods at
once; new pods become ready ``startup_s`` later. There is no copy of the round here.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from prometheus_client import CollectorRegistry

from autoscaler.actuate import Observed
from autoscaler.aggregate import Histogram, PodSample, Snapshot, WindowAggregator, WindowStats, stale_after
from autoscaler.config import SourceSpec
from autoscaler.loop import Controller
from autoscaler.telemetry import Telemetry
from nlgsim.cluster import Cluster, Pod
from nlgsim.instruments import Histogram as PodHistogram
from nlgsim.instruments import PodInstruments
from nlgsim.policy import Policy
from nlgsim.profile import EngineProfile
from nlgsim.replica import RequestState
from nlgsim.workload import Request

# Event kinds, in the order they run at equal times.
_STEP, _READY, _ARRIVAL, _START, _SCRAPE, _LOOP = range(6)


@dataclass(frozen=True)
class Scenario:
    """Everything one run depends on. ``policy=None`` runs ``initial_replicas`` fixed replicas."""

    profile: EngineProfile
    requests: Sequence[Request]
    policy: Policy | None = None
    initial_replicas: int = 1
    loop_interval: float = 5.0
    scrape_interval: float = 5.0
    startup_s: float | None = None
    """Pod start-up delay; ``None`` takes the profile's time from start to ready."""
    routing: str = "round-robin"
    stale_after: float | None = None
    """Aggregator's ``stale_after``; ``None`` takes what ``autoscaler/app.py`` gives the direct
    source: 2.5 loop intervals plus the default scrape timeout (2 s)."""
    name: str = ""
    control_from: float = 0.0
    """The autoscaler's first round (0: one ``loop_interval`` in). Scrapes run from the start, so a
    round at ``control_from`` sees a full window of what came before: a warm-up that no policy acts
    on, and whose pods (``initial_replicas``) are the only ones alive when the measured window opens."""


@dataclass(frozen=True)
class LoopRecord:
    """One autoscaler round: what the policy saw and decided."""

    time: float
    current: int
    desired: int
    valid: bool
    reason: str
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class RunLog:
    """The raw outcome of a run; ``nlgsim.results`` turns it into the numbers of a report."""

    scenario: Scenario
    states: list[RequestState]
    pod_changes: list[tuple[float, int, int, int]]
    loops: list[LoopRecord]
    end: float
    replica_seconds: float
    stopped: bool = False
    """The run's ``stop`` callback ended it before every request finished."""


#: Called as each request finishes; True ends the run there (a run whose outcome is already known).
StopWhen = Callable[[RequestState], bool]


def pod_sample(m: PodInstruments) -> PodSample:
    """What the collector reads from one pod's ``/metrics``: the histograms, gauges and counters it uses."""

    def hist(h: PodHistogram) -> Histogram:
        return Histogram(buckets=tuple(h.cumulative()), sum=h.total, count=h.count)

    return PodSample(
        histograms={
            "request": hist(m.request_latency),
            "pertoken": hist(m.time_per_output_token),
            "ttft": hist(m.time_to_first_token),
            "itl": hist(m.inter_token_latency),
        },
        gauges={"waiting": m.requests_waiting, "running": m.requests_running, "kv_usage": m.kv_cache_usage},
        counters={
            "prompt_tokens": m.prompt_tokens,
            "generation_tokens": m.generation_tokens,
            "finished": m.requests_finished,
        },
    )


#: The simulated model and Deployment, as the controller names them.
MODEL = "sim"


class ScrapedSource:
    """The controller's metric source: the samples scraped since the last round, in the real aggregator."""

    def __init__(self, aggregator: WindowAggregator) -> None:
        self.aggregator = aggregator
        self.scraped: list[tuple[float, Snapshot]] = []

    def read(self, now: float, model_id: str, time_window: float) -> WindowStats:
        self.aggregator.time_window = time_window
        for t, snapshot in self.scraped:
            self.aggregator.record(t, snapshot)
        self.scraped = []
        return self.aggregator.window(now)

    def close(self) -> None:
        """Nothing to release."""


class ClusterActuator:
    """The controller's actuator: the simulated Deployment, scaled at once (pods start up later)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def observe(self, target: str) -> Observed:
        return Observed(self.sim.cluster.current)

    def scale(self, target: str, replicas: int, expected: int) -> int:
        self.sim.scale_to(replicas)
        return self.sim.cluster.current

    def close(self) -> None:
        """Nothing to release."""


class Simulation:
    def __init__(
        self, scenario: Scenario, stop: StopWhen | None = None, ahead: bool = True, instruments: bool | None = None
    ) -> None:
        """``ahead=False`` puts every engine step through the event queue (the tests' reference for
        ``Replica.run_ahead``, which gives the same run). ``instruments``: whether the pods keep their
        metrics; by default only where an autoscaler scrapes them (a policy)."""
        self.s = scenario
        self._ahead = ahead
        self._stop = stop
        self.stopped = False
        if scenario.initial_replicas < 0:
            raise ValueError(f"initial_replicas = {scenario.initial_replicas}, must be >= 0")
        if scenario.loop_interval <= 0 or scenario.scrape_interval <= 0:
            raise ValueError("loop_interval and scrape_interval must be > 0 seconds")
        if scenario.control_from < 0:
            raise ValueError(f"control_from = {scenario.control_from}, must be >= 0 seconds")
        instruments = scenario.policy is not None if instruments is None else instruments
        self.cluster = Cluster(scenario.profile, scenario.routing, self._done, scenario.startup_s, instruments)
        # The requests in arrival order; each one's state is made as it arrives, so `states` holds those
        # that arrived, in that order (and, once the run is over, every request).
        self._requests = sorted(scenario.requests, key=attrgetter("arrival", "id"))
        self._arrivals = [r.arrival for r in self._requests]
        self.states: list[RequestState] = []
        self.loops: list[LoopRecord] = []
        # Every event but arrivals, which are read off `_arrivals` in turn and run where their place
        # in this order (time, kind, then the order scheduled) would be.
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._left = len(self._requests)
        self.now = 0.0
        # What bounds a replica's steps run ahead of the queue (Replica.run_ahead): the next
        # arrival, scrape and round, and the pods still starting (a pod ready changes the routing).
        self._next_arrival = 0
        self._next_scrape = math.inf
        self._next_loop = math.inf
        self._starting: list[float] = []
        policy = scenario.policy
        self.source: ScrapedSource | None = None
        self.controller: Controller | None = None
        if policy is not None:
            stale = scenario.stale_after or stale_after(scenario.loop_interval, SourceSpec().timeout)
            self.source = ScrapedSource(WindowAggregator(policy.spec.time_window, stale))
            self.controller = Controller(
                self.source, ClusterActuator(self), Telemetry(CollectorRegistry()), source_kind="direct",
                clock=lambda: self.now, policies=lambda spec: policy,
            )  # fmt: skip
            self.controller.targets.set_config_target(MODEL, policy.spec, MODEL)

    def _push(self, t: float, kind: int, payload: Any = None) -> None:
        heapq.heappush(self._events, (t, kind, next(self._seq), payload))

    def run(self, progress: Callable[[float], None] | None = None) -> RunLog:
        # The trace's requests and their states live through the run: frozen, they are out of the
        # collector's passes, which otherwise walk every one of them again and again as the engines'
        # short-lived objects come and go. Without an autoscaler nothing in a run makes reference
        # cycles, so what exists is frozen again every 1,024 arrivals (`_arrive`), the states made
        # since included; an autoscaler's rounds do make cyclic garbage, which must stay collectable.
        # Unfrozen after, so whatever the run left as garbage is collected as usual.
        gc.freeze()
        try:
            return self._run(progress)
        finally:
            gc.unfreeze()

    def _run(self, progress: Callable[[float], None] | None) -> RunLog:
        s = self.s
        for _ in range(s.initial_replicas):
            self.cluster.mark_ready(self.cluster.create(0.0, ready_now=True), 0.0)
        if s.policy is not None:
            self._next_scrape = s.scrape_interval
            self._next_loop = s.control_from or s.loop_interval
            self._push(self._next_scrape, _SCRAPE)
            self._push(self._next_loop, _LOOP)
        arrivals, events = self._arrivals, self._events
        horizon = arrivals[-1] if arrivals else 0.0
        reported = 0.0
        while self._left > 0 and not self.stopped:
            i = self._next_arrival
            if i < len(arrivals) and (
                not events or (t := arrivals[i]) < events[0][0] or (t == events[0][0] and events[0][1] > _ARRIVAL)
            ):
                t = self.now = arrivals[i]
                self._arrive(i)
            elif events:
                t, kind, _, payload = heapq.heappop(events)
                self.now = t
                if kind == _STEP:
                    self._step_done(payload)
                elif kind == _START:
                    self._push(payload.replica.start(t), _STEP, payload)
                elif kind == _READY:
                    self._ready(payload)
                elif kind == _SCRAPE:
                    self._scrape()
                else:
                    self._loop()
            else:
                break
            if progress is not None and horizon > 0 and t - reported >= horizon / 200:
                reported = t
                progress(min(t / horizon, 1.0))
        if self._left > 0 and not self.stopped:
            raise RuntimeError(
                f"{self._left} requests never finished: no pod is ready and none is starting "
                "(min_deployment_count = 0 and initial_replicas = 0?)"
            )
        if progress is not None:
            progress(1.0)
        self.states += [RequestState(r) for r in self._requests[len(self.states) :]]  # those never arrived
        end = max(self.now, horizon)
        return RunLog(
            s, self.states, list(self.cluster.changes), self.loops, end, self.cluster.replica_seconds(end),
            self.stopped,
        )  # fmt: skip

    # -- requests and engines ----------------------------------------------------------------------

    def _arrive(self, i: int) -> None:
        self._next_arrival = i + 1
        if not i & 1023 and self.controller is None:
            gc.freeze()  # `run` says why
        state = RequestState(self._requests[i])
        self.states.append(state)
        pod = self.cluster.route(state.request)
        if pod is None:
            self.cluster.pending.append(state)
            return
        self._submit(pod, state)

    def _submit(self, pod: Pod, state: RequestState) -> None:
        pod.replica.submit(state)
        if not pod.replica.busy:
            pod.replica.busy = True  # a step starts once this instant's arrivals are in
            self._push(self.now, _START, pod)

    def _step_done(self, pod: Pod) -> None:
        replica = pod.replica
        end = replica.step(self.now)
        if end < 0:
            if pod.deleted is not None:
                self.cluster.drained(pod, self.now)
            return
        if self._ahead:
            end = replica.run_ahead(end, self._quiet_until(pod))
        heapq.heappush(self._events, (end, _STEP, next(self._seq), pod))

    def _quiet_until(self, pod: Pod) -> float:
        """Until when nothing but its own steps touches ``pod``'s replica: the next scrape or round, and,
        unless its queue's head waits for a choice to end (``Replica.admits_nobody``: a request arriving
        meanwhile only queues behind it), the next request routed to it (as far as the router can tell:
        round-robin over the ready pods as they are, else the next request) and the next pod to become
        ready (which changes the routing)."""
        quiet = min(self._next_scrape, self._next_loop)
        if pod.replica.admits_nobody:
            return quiet
        starting = self._starting
        while starting and starting[0] < self.now:
            heapq.heappop(starting)
        if starting and starting[0] < quiet:
            quiet = starting[0]
        if pod.deleted is not None or not pod.ready:
            return quiet  # out of the Service: no request reaches it
        i = self._next_arrival + self.cluster.router.arrivals_before(pod, self.cluster.ready)
        return min(quiet, self._arrivals[i]) if i < len(self._arrivals) else quiet

    def _done(self, state: RequestState, t: float) -> None:
        self._left -= 1
        if self._stop is not None and self._stop(state):
            self.stopped = True

    # -- pods and the autoscaler -------------------------------------------------------------------

    def _ready(self, pod: Pod) -> None:
        self.cluster.mark_ready(pod, self.now)
        if not self.cluster.pending or not pod.ready:
            return
        while self.cluster.pending:
            state = self.cluster.pending.popleft()
            target = self.cluster.route(state.request)
            assert target is not None
            self._submit(target, state)

    def _scrape(self) -> None:
        assert self.source is not None
        self._next_scrape = self.now + self.s.scrape_interval
        self._push(self._next_scrape, _SCRAPE)
        snapshot = {f"pod-{p.index}": pod_sample(p.replica.metrics) for p in self.cluster.ready}
        self.source.scraped.append((self.now, snapshot))

    def _loop(self) -> None:
        assert self.controller is not None
        self._next_loop = self.now + self.s.loop_interval
        self._push(self._next_loop, _LOOP)
        self.controller.run_once()
        last = self.controller.targets.last_decision(MODEL)
        if last is not None and last[0] == self.now:
            _, d = last
            self.loops.append(LoopRecord(self.now, d.current, d.desired, d.valid, d.reason, dict(d.values)))

    def scale_to(self, replicas: int) -> None:
        """The Deployment's new replica count: pods created (ready after start-up) or deleted."""
        current = self.cluster.current
        for _ in range(replicas - current):
            pod = self.cluster.create(self.now)
            self._push(pod.ready_at, _READY, pod)
            heapq.heappush(self._starting, pod.ready_at)
        if replicas < current:
            self.cluster.delete(current - replicas, self.now)


def simulate(
    scenario: Scenario, progress: Callable[[float], None] | None = None, stop: StopWhen | None = None
) -> RunLog:
    """Run one scenario to the end of its last request (or until ``stop`` says so)."""
    return Simulation(scenario, stop).run(progress)
