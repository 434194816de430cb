"""A Poisson load of the thesis's Table 4.2 queries, streamed to Triton over gRPC with tritonclient.

This module owns generating requests and recording what each one saw; it knows nothing of scaling.

Each request asks for ``max_tokens`` drawn by :meth:`nlgsim.workload.QueryType.draw_max_tokens` (one
length for all its choices), with ``ignore_eos`` so that a model with
random weights generates exactly that many. A request whose stream ends without its final response,
or with a finish reason other than ``length``, was cut: :attr:`LoadRecord.complete` is False.

The rate is constant (a step from nothing), or rises linearly from nothing to ``rate`` over the
first ``ramp`` seconds, so that a policy that forecasts has a trend to follow.

Every arrival is sent: the load is open, and a request's latency counts from its arrival. At most
``max_in_flight`` streams are open at once; arrivals beyond that wait in the client for one to end
(their wait counts in their latency, though the server does not see it). The cap is well above what
the server holds in a steady peak, so that the server's own queue, which the autoscaler reads, is
where the load waits; it matters only while a reload stalls the server (a CPU reloading instances
serves little for seconds, and a peak's arrivals pile up meanwhile). A load made with ``shed=True``
drops the arrivals beyond the cap instead, and counts them (``dropped``): an overload whose backlog
stays bounded, for a test that waits for it to drain.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from nlgsim.workload import COMPLEX, SIMPLE, QueryType
from triton_backend.cli.client import stream_generate
from triton_backend.cli.requests import prompt_of


@dataclass(frozen=True)
class Mix:
    """What the load asks for on average: prompt tokens of a request, tokens of a choice, choices."""

    prompt_tokens: float
    output_tokens: float
    choices: float


def mix_of(complex_fraction: float) -> Mix:
    """The mean mix of a load with ``complex_fraction`` complex queries (tokens of a choice weighted by
    choices, as the pods' counters measure them)."""
    shares = ((SIMPLE, 1.0 - complex_fraction), (COMPLEX, complex_fraction))
    choices = sum(q.choices * share for q, share in shares)
    prompt = sum(q.prompt_tokens * share for q, share in shares)
    tokens = sum(q.mean_tokens() * share for q, share in shares) / choices
    return Mix(prompt, tokens, choices)


@dataclass
class LoadRecord:
    """One request. Times are ``time.monotonic()`` seconds."""

    kind: str
    start: float
    max_tokens: int
    choices: int
    end: float | None = None
    first: float | None = None
    """When the first response arrived (its first token)."""
    prompt_tokens: int = 0
    complete: bool = False
    finish_reasons: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def per_token_ms(self) -> float | None:
        """The thesis's per-token latency as the client sees it: request latency / tokens per choice."""
        if self.end is None or not self.complete:
            return None
        return (self.end - self.start) / self.max_tokens * 1000.0


#: Streams a load keeps open at once (each holds a thread and a gRPC channel); arrivals beyond wait.
MAX_IN_FLIGHT = 128


class PoissonLoad:
    """Arrivals at ``rate`` per second (reached after ``ramp`` seconds); a ``complex_fraction`` of them
    complex; at most ``max_in_flight`` streams open, the arrivals beyond queued in the client (or,
    with ``shed``, dropped)."""

    def __init__(
        self,
        grpc_url: str,
        rate: float,
        complex_fraction: float = 0.5,
        seed: int = 0,
        max_in_flight: int = MAX_IN_FLIGHT,
        model: str = "gpt2",
        ramp: float = 0.0,
        shed: bool = False,
    ) -> None:
        self.grpc_url = grpc_url
        self.rate = rate
        self.ramp = ramp
        self.complex_fraction = complex_fraction
        self.model = model
        self.records: list[LoadRecord] = []
        self.max_in_flight = max_in_flight
        self.shed = shed
        self.dropped = 0
        """Arrivals not sent because ``shed`` was set and ``max_in_flight`` streams were open (no record)."""
        self._open = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # The pool's queue holds the arrivals beyond the cap until a stream ends.
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="load")
        self._thread = threading.Thread(target=self._arrivals, name="poisson-load", daemon=True)

    def start(self) -> PoissonLoad:
        self._thread.start()
        return self

    def set_rate(self, rate: float) -> None:
        """Arrivals at ``rate`` per second from the next one on (a phase of the load)."""
        self.rate = rate

    def rate_at(self, elapsed: float) -> float:
        """Arrivals per second ``elapsed`` seconds after the load started."""
        return self.rate if self.ramp <= 0 else self.rate * min(1.0, max(elapsed, 0.0) / self.ramp)

    def _arrivals(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self._rng.expovariate(self.rate)):
            # Thinning: candidates at the full rate, each kept with the share the rate has reached.
            if self.ramp > 0 and self._rng.random() * self.rate > self.rate_at(time.monotonic() - started):
                continue
            if self.shed and self.in_flight >= self.max_in_flight:
                self.dropped += 1
                continue
            query = COMPLEX if self._rng.random() < self.complex_fraction else SIMPLE
            record = LoadRecord(
                query.name, time.monotonic(), query.draw_max_tokens(self._rng), query.choices,
                prompt_tokens=query.prompt_tokens,
            )  # fmt: skip
            prompt = prompt_of(query.prompt_tokens, self._rng)
            with self._lock:
                self.records.append(record)
                self._open += 1
            self._pool.submit(self._send, record, prompt)

    def send(self, query: QueryType, max_tokens: int | None = None) -> LoadRecord:
        """One request outside the Poisson process, waited for (calibration, tests)."""
        record = LoadRecord(
            query.name, time.monotonic(), max_tokens or query.gen_max, query.choices,
            prompt_tokens=query.prompt_tokens,
        )  # fmt: skip
        with self._lock:
            self.records.append(record)
            self._open += 1
        self._send(record, prompt_of(query.prompt_tokens, self._rng))
        return record

    def _send(self, record: LoadRecord, prompt: str) -> None:
        sampling = {"max_tokens": record.max_tokens, "n": record.choices, "ignore_eos": True, "seed": 0}
        reasons: dict[int, str] = {}  # choice index -> its finish reason, once it has one
        try:
            for delta in stream_generate(self.grpc_url, prompt, sampling, self.model):
                record.first = record.first or time.monotonic()
                reasons.update((i, r) for i, r in enumerate(delta.finish_reasons) if r)
            record.finish_reasons = [reasons[i] for i in sorted(reasons)]
            record.complete = len(reasons) == record.choices and all(r == "length" for r in reasons.values())
            if not record.complete:
                record.error = f"stream ended with finish reasons {record.finish_reasons}"
        except Exception as e:  # a failed stream is a result to report, not a crash of the load
            record.error = f"{type(e).__name__}: {e}"
        finally:
            record.end = time.monotonic()
            with self._lock:
                self._open -= 1

    @property
    def in_flight(self) -> int:
        """Requests arrived and not ended: streams open and arrivals waiting for one."""
        with self._lock:
            return self._open

    def stop_arrivals(self) -> None:
        """No new requests; those in flight go on."""
        self._stop.set()

    def join(self, timeout: float = 300.0) -> None:
        """Stops arrivals and waits for every request in flight."""
        self.stop_arrivals()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        self._pool.shutdown(wait=True)
