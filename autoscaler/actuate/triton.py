"""In-place scaling: a model's instance count through Triton's model-control API (one node, no Kubernetes).

This module owns reading ``GET /v2/models/<model>/config`` and reloading the model with
``POST /v2/repository/models/<model>/load`` whose ``parameters.config`` is that configuration with a
new ``instance_group`` count. The server must run with ``--model-control-mode=explicit``. Triton loads
the new instances before it retires the old ones.

Scale-in waits for an idle model. Triton picks which instance to retire, cannot stop routing to it
first, and tritonserver 2.51's Python backend segfaults (``TRITONBACKEND_ModelInstanceFinalize``)
when it retires an instance whose decoupled streams are still open: the whole server, every stream
with it. So a scale-in is carried out only when the model's ``nlg_requests_running`` and
``nlg_requests_waiting`` gauges (summed over its instances) and Triton's own
``nv_inference_pending_request_count`` (requests queued before the model's execute() took them), all
read from Triton's metrics endpoint, are zero in two reads ``confirm_idle`` seconds apart (the model
counts a request from execute() on and publishes every 0.1 s, so one accepted just before the first
read shows in the second); otherwise
:class:`~autoscaler.actuate.Deferred` and the next round asks again. Under unbroken traffic the
model keeps its instances: an extra instance costs memory, a crash costs every stream. A request
still in Triton's gRPC front end at the second read, or arriving between it and the reload, is the
remaining window. Scale-out never waits.

A reload is started, not awaited: Triton answers the load request only once the new instances are
loaded (minutes for a large model), and a server that dies meanwhile may never answer it at all. So
the request runs on a thread of its own, bounded by ``load_timeout``; :meth:`scale` waits for it at
most ``load_wait`` seconds (well under the loop interval) and otherwise defers, saying that the
reload is under way. Each later round's :meth:`observe` reads the model's config (every call bounded
by ``timeout``) and collects the outcome: a failed reload is an
:class:`~autoscaler.actuate.ActuationError` once. Triton may answer nothing else while it loads
instances, so a config read that fails while a reload is pending reports the reload as in progress,
with the time it has left; only once ``load_timeout`` has passed since it started is the reload
abandoned (what Triton has loaded shows when it answers again). The deadline is read from
``clock`` (the loop's, a fake one in tests).

"Replicas" here are the model's instances: the count of its single ``instance_group`` (a model with
several groups is refused, since which group to grow would be a guess).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from autoscaler.actuate import ActuationError, Deferred, LastSet, Observed
from autoscaler.collect.exposition import ExpositionError, gauge_totals

log = logging.getLogger(__name__)

RUNNING = "nlg_requests_running"
#: The gauges whose sum over the model's instances is its requests in flight: the model's running and
#: waiting, and Triton's requests queued in its scheduler, not yet given to an instance.
IN_FLIGHT_GAUGES = (RUNNING, "nlg_requests_waiting", "nv_inference_pending_request_count")


@dataclass
class _Reload:
    """One ``load`` request on its own thread; ``error`` is "" after a success."""

    model: str
    replicas: int
    previous: int
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    error: str = ""

    def run(self, url: str, body: dict[str, Any], timeout: float) -> None:
        try:
            with httpx.Client(timeout=timeout) as http:
                response = http.post(url, json=body)
            if response.status_code != 200:
                self.error = (
                    f"Triton refused to reload {self.model!r} with {self.replicas} instances: HTTP "
                    f"{response.status_code} {_error(response)} (is the server in --model-control-mode=explicit?)"
                )
        except httpx.HTTPError as e:
            self.error = f"reloading model {self.model!r} with {self.replicas} instances failed: {_why(e)}"
        finally:
            self.done.set()


class TritonInstanceScaler:
    """Scales models of the Triton server at ``base_url`` (its HTTP port); ``target`` is the model.

    ``metrics_url`` is the same server's metrics endpoint, read before a scale-in. ``timeout`` bounds
    each read; ``load_timeout`` a reload (on ``clock``); ``load_wait`` (default ``timeout``) how long
    :meth:`scale` waits for a reload before deferring.
    """

    def __init__(
        self,
        base_url: str,
        metrics_url: str,
        timeout: float = 10.0,
        load_timeout: float = 300.0,
        confirm_idle: float = 0.25,
        load_wait: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._metrics_url = metrics_url
        self._confirm_idle = confirm_idle
        self._timeout = timeout
        self._http = httpx.Client(timeout=timeout)
        self._load_timeout = load_timeout
        self._load_wait = timeout if load_wait is None else load_wait
        self._clock = clock
        self._last = LastSet()
        self._reloads: dict[str, _Reload] = {}

    def _config(self, model: str) -> dict[str, Any]:
        url = f"{self._base}/v2/models/{model}/config"
        try:
            response = self._http.get(url)
        except httpx.HTTPError as e:
            message = f"cannot reach Triton at {self._base}: {_why(e)}"
            reload = self._reloads.get(model)
            if reload is not None:  # _settle() has abandoned it if its deadline passed
                left = max(0.0, reload.deadline - self._clock())
                message += (
                    f"; the reload of model {model!r} to {reload.replicas} instances is in progress "
                    f"(Triton answers it once the instances are loaded; abandoned if not done in {left:.0f} s)"
                )
            raise ActuationError(message) from e
        if response.status_code != 200:
            raise ActuationError(
                f"cannot read the config of model {model!r} ({url}): HTTP {response.status_code} "
                f"{_error(response)}; is it loaded?"
            )
        config: dict[str, Any] = response.json()
        return config

    @staticmethod
    def _group(model: str, config: dict[str, Any]) -> dict[str, Any]:
        groups = config.get("instance_group") or []
        if len(groups) != 1:
            raise ActuationError(
                f"model {model!r} has {len(groups)} instance groups; in-place scaling needs exactly one"
            )
        group: dict[str, Any] = groups[0]
        return group

    def _abandoned(self, reload: _Reload) -> str:
        return (
            f"the reload of model {reload.model!r} to {reload.replicas} instances is abandoned: not done "
            f"within load_timeout ({self._load_timeout:g} s); what Triton has loaded shows when it answers"
        )

    def _settle(self, model: str) -> None:
        """Collects a finished reload: remembered on success, an error (once) on failure or past its deadline."""
        reload = self._reloads.get(model)
        if reload is None:
            return
        if not reload.done.is_set():
            if self._clock() >= reload.deadline:
                del self._reloads[model]
                raise ActuationError(self._abandoned(reload))
            return
        del self._reloads[model]
        if reload.error:
            raise ActuationError(reload.error)
        self._last.remember(model, reload.replicas)
        log.info("model %r instances %d -> %d", model, reload.previous, reload.replicas)

    def observe(self, target: str) -> Observed:
        self._settle(target)
        count = int(self._group(target, self._config(target)).get("count", 1))
        reload = self._reloads.get(target)
        if reload is not None and count in (reload.previous, reload.replicas):
            self._last.remember(target, count)  # the reload under way, not a person's change
        observed = self._last.check(target, count)
        if observed.external:
            log.warning(
                "model %r was changed outside the autoscaler: %d instances, the autoscaler last set %d; "
                "taking %d as current",
                target, count, observed.previous, count,
            )  # fmt: skip
        return observed

    def scale(self, target: str, replicas: int, expected: int) -> int:
        if replicas < 1:
            raise ActuationError(f"model {target!r}: Triton needs at least 1 instance, not {replicas}")
        self._settle(target)
        pending = self._reloads.get(target)
        if pending is not None:
            raise Deferred(f"Triton is still loading model {target!r} with {pending.replicas} instances")
        config = self._config(target)
        group = self._group(target, config)
        current = int(group.get("count", 1))
        if current != expected:
            log.warning(
                "model %r has %d instances, not the %d the decision started from; not writing %d",
                target, current, expected, replicas,
            )  # fmt: skip
            self._last.remember(target, current)
            return current
        if replicas < current:
            busy = self._in_flight(target)
            if not busy:
                time.sleep(self._confirm_idle)
                busy = self._in_flight(target)
            if busy:
                raise Deferred(
                    f"scale-in of model {target!r} to {replicas} waits: {busy:g} requests in flight "
                    f"(Triton cannot retire an instance with open streams safely)"
                )
        group["count"] = replicas
        url = f"{self._base}/v2/repository/models/{target}/load"
        body = {"parameters": {"config": json.dumps(config)}}
        reload = self._reloads[target] = _Reload(target, replicas, current, self._clock() + self._load_timeout)
        threading.Thread(
            target=reload.run, args=(url, body, self._load_timeout), name=f"triton-load-{target}", daemon=True
        ).start()
        if reload.done.wait(self._load_wait):
            self._settle(target)
            return replicas
        raise Deferred(
            f"Triton is loading model {target!r} with {replicas} instances (not done within "
            f"{self._load_wait:g} s); the next rounds check on it"
        )

    def _in_flight(self, model: str) -> float:
        try:
            response = self._http.get(self._metrics_url)
            response.raise_for_status()
            totals = gauge_totals(response.text, model, IN_FLIGHT_GAUGES)
        except (httpx.HTTPError, ExpositionError) as e:
            why = _why(e) if isinstance(e, httpx.HTTPError) else str(e)
            raise ActuationError(
                f"cannot tell whether model {model!r} is idle before a scale-in ({self._metrics_url}): {why}"
            ) from e
        if RUNNING not in totals:
            raise ActuationError(
                f"{self._metrics_url} has no nlg_requests_running series for model {model!r}; "
                f"scale-in needs it to know the model is idle"
            )
        return sum(totals.values())

    def close(self) -> None:
        """Forgets reloads under way (their threads end within ``load_timeout``)."""
        self._reloads.clear()
        self._http.close()


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))
    except ValueError:
        return response.text[:200]


def _why(e: httpx.HTTPError) -> str:
    if isinstance(e, httpx.TimeoutException):
        return f"no answer in time ({type(e).__name__})"
    return f"{type(e).__name__}: {e}"
