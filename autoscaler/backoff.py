"""Retrying a write the Kubernetes API refused with 409 Conflict: exponential waits with jitter, within
the time budget of the request that writes.

This module owns how long to wait before each retry and when to stop; the caller reads, writes and
sleeps. Each wait grows from :attr:`Backoff.initial` by :attr:`Backoff.factor` up to :attr:`Backoff.cap`
and is stretched by a random share up to :attr:`Backoff.jitter` (client-go's ``wait.Backoff``), so
that writers who collided do not collide again in step. The retries stop when the next, after its
wait, could not take as long as the last attempt took before the budget ends: the caller then
answers as it does for any failure (the REST API: 503 with ``Retry-After``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

#: The least time a call is given, even right at the end of a budget.
MIN_CALL = 0.05


@dataclass(frozen=True)
class Backoff:
    """The waits between retries, in seconds."""

    initial: float = 0.01
    factor: float = 2.0
    cap: float = 0.1
    jitter: float = 1.0

    def delay(self, retry: int, draw: float) -> float:
        """The wait before retry number ``retry`` (1 for the first); ``draw`` in [0, 1) picks the jitter."""
        return min(self.cap, self.initial * self.factor ** (retry - 1)) * (1 + self.jitter * draw)


#: The waits the autoscaler's writes use: 10 ms, 20, 40, 80, then 100 ms, each stretched up to twice as long.
CONFLICT_BACKOFF = Backoff()


class Retries:
    """The conflict retries of one request with ``budget`` seconds from its start (``clock()`` now).

    ``clock`` and ``draw`` are injectable so tests can drive them; the caller sleeps the waits.
    """

    def __init__(
        self,
        budget: float,
        backoff: Backoff = CONFLICT_BACKOFF,
        *,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.backoff = backoff
        self._clock = clock
        self._draw = draw
        self.started = self._attempt = clock()
        self.deadline = self.started + budget
        #: Retries granted so far.
        self.retries = 0

    def call_timeout(self, most: float) -> float:
        """A call's timeout: at most ``most``, and no later than the budget's end (but :data:`MIN_CALL`)."""
        return max(MIN_CALL, min(most, self.deadline - self._clock()))

    def next_wait(self) -> float | None:
        """The wait before the next retry, or None: the budget has no room for it and an attempt as
        long as the last (at least :data:`MIN_CALL`)."""
        now = self._clock()
        wait = self.backoff.delay(self.retries + 1, self._draw())
        if now + wait + max(MIN_CALL, now - self._attempt) > self.deadline:
            return None
        self.retries += 1
        self._attempt = now + wait
        return wait

    def elapsed(self) -> float:
        return self._clock() - self.started
