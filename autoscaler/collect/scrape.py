"""Fetches many pods' metrics pages in one round: bounded concurrency, one deadline for the round.

This module owns the HTTP side of the direct source and nothing else (no parsing, no windows):

- At most ``concurrency`` scrapes run at once (a thread pool; the rest wait their turn).
- The round's deadline is its start plus ``timeout``. Every step of a scrape (connecting, sending,
  each read of the body) may only wait for the time left, so a pod that trickles its answer is cut
  like one that never answers. The round returns at the deadline whatever is still running or
  waiting; those targets are reported as timed out and left out of the round.
- A target whose scrape from an earlier round is still running (a name lookup, which no socket
  timeout bounds, can outlive the deadline) is not asked again; it is reported as still busy.
- Each target keeps one HTTP/1.1 connection open between rounds; any failure closes it and the next
  round connects afresh.

The HTTP is :mod:`autoscaler.collect.http_get`'s, not httpx's as elsewhere in the autoscaler: at
fleet scale the round's cost is the client's CPU per request (that module says why, and
``benchmarks/fleet_round.md`` measures the clients). Nothing here needs what httpx adds: no
redirects, no proxies (a pod's address is not meant to go through one), no HTTP/2.

:meth:`Scraper.scrape` returns what answered and one message per target that did not. The deadline
is read from ``clock`` (``time.monotonic``): a timeout of the I/O, not a policy's time.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from autoscaler.collect.http_get import Connection, HTTPError, StaleConnection

#: Scrapes in flight at most: enough to hide a few slow pods behind the others; more threads only
#: contend for the interpreter, which parses the answers too.
CONCURRENCY: Final = 32


class ScrapeError(Exception):
    """One target's scrape failed; the message says how."""


class ScrapeTimeout(ScrapeError):
    """The target had not answered in full by the round's deadline."""


@dataclass
class ScrapeResult:
    """One round: ``texts`` by target, and why each other target is missing, by target."""

    texts: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class _Target:
    """One target's URL and its kept-alive connection."""

    def __init__(self, url: str, tls: Callable[[], ssl.SSLContext]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: not an http(s) URL")
        self.url = url
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        self._connection = Connection(parts.hostname, port, tls() if https else None)
        self._host_header = parts.netloc.rpartition("@")[2]
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def fetch(self, deadline: float, clock: Callable[[], float]) -> str:
        def left() -> float:
            remaining = deadline - clock()
            if remaining <= 0:
                raise ScrapeTimeout("no answer in time")
            return remaining

        try:
            try:
                response = self._connection.get(self._path, self._host_header, left)
            except StaleConnection:  # the pod closed the kept connection since the last round
                response = self._connection.get(self._path, self._host_header, left)
        except TimeoutError:
            self.close()
            raise ScrapeTimeout("no answer in time") from None
        except (OSError, HTTPError) as e:
            self.close()
            raise ScrapeError(f"{type(e).__name__}: {e}") from None
        except ScrapeError:
            self.close()
            raise
        if response.status != 200:
            raise ScrapeError(f"HTTP {response.status} {response.reason}")
        return response.text()

    def close(self) -> None:
        self._connection.close()


class Scraper:
    """Scrapes ``{target: url}`` each round."""

    def __init__(
        self, timeout: float, concurrency: int = CONCURRENCY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if timeout <= 0 or concurrency < 1:
            raise ValueError(f"timeout ({timeout}) must be > 0 and concurrency ({concurrency}) >= 1")
        self.timeout = timeout
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="scrape")
        self._targets: dict[str, _Target] = {}
        self._running: dict[str, Future[str]] = {}
        self._tls_context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        """One context for every https target: building one reads the CA bundle, milliseconds each."""
        if self._tls_context is None:
            self._tls_context = ssl.create_default_context()
        return self._tls_context

    def scrape(self, targets: Mapping[str, str]) -> ScrapeResult:
        """Every target's page, fetched within one ``timeout`` from now."""
        deadline = self._clock() + self.timeout
        self._forget_all_but(targets)
        result = ScrapeResult()
        futures: dict[str, Future[str]] = {}
        for name, url in targets.items():
            earlier = self._running.get(name)
            if earlier is not None and not earlier.done():
                result.errors[name] = f"scrape of {url} skipped: the previous one is still running"
                continue
            target = self._targets.get(name)
            if target is None or target.url != url:
                if target is not None:
                    target.close()
                try:
                    target = self._targets[name] = _Target(url, self._tls)
                except ValueError as e:
                    result.errors[name] = f"scrape of {url} failed: {e}"
                    continue
            futures[name] = self._running[name] = self._pool.submit(target.fetch, deadline, self._clock)
        wait(futures.values(), timeout=max(0.0, deadline - self._clock()))
        for name, future in futures.items():
            url = targets[name]
            if not future.done():
                future.cancel()  # not started yet: it never will be
                result.errors[name] = f"scrape of {url} failed: no answer within {self.timeout:g} s"
                continue
            self._running.pop(name, None)
            try:
                result.texts[name] = future.result()
            except ScrapeTimeout:
                result.errors[name] = f"scrape of {url} failed: no answer within {self.timeout:g} s"
            except ScrapeError as e:
                result.errors[name] = f"scrape of {url} failed: {e}"
        return result

    def _forget_all_but(self, targets: Mapping[str, str]) -> None:
        """Closes the connections of targets no longer listed (once their last scrape is over)."""
        for name in [t for t in self._targets if t not in targets]:
            running = self._running.get(name)
            if running is None or running.done():
                self._running.pop(name, None)
                self._targets.pop(name).close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for target in self._targets.values():
            target.close()
        self._targets.clear()
