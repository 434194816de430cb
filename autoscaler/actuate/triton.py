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

"Replicas" here are the model's instances: the count of its single ``instance_group`` (a model with
several groups is refused, since which group to grow would be a guess).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx

from autoscaler.actuate import ActuationError, Deferred, LastSet, Observed
from autoscaler.collect.exposition import ExpositionError, gauge_totals

log = logging.getLogger(__name__)

RUNNING = "nlg_requests_running"
#: The gauges whose sum over the model's instances is its requests in flight: the model's running and
#: waiting, and Triton's requests queued in its scheduler, not yet given to an instance.
IN_FLIGHT_GAUGES = (RUNNING, "nlg_requests_waiting", "nv_inference_pending_request_count")


class TritonInstanceScaler:
    """Scales models of the Triton server at ``base_url`` (its HTTP port); ``target`` is the model.

    ``metrics_url`` is the same server's metrics endpoint, read before a scale-in.
    """

    def __init__(
        self,
        base_url: str,
        metrics_url: str,
        timeout: float = 10.0,
        load_timeout: float = 300.0,
        confirm_idle: float = 0.25,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._metrics_url = metrics_url
        self._confirm_idle = confirm_idle
        self._http = httpx.Client(timeout=timeout)
        self._load_timeout = load_timeout
        self._last = LastSet()

    def _config(self, model: str) -> dict[str, Any]:
        url = f"{self._base}/v2/models/{model}/config"
        try:
            response = self._http.get(url)
        except httpx.HTTPError as e:
            raise ActuationError(f"cannot reach Triton at {self._base}: {type(e).__name__}: {e}") from e
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

    def observe(self, target: str) -> Observed:
        count = int(self._group(target, self._config(target)).get("count", 1))
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
        try:
            response = self._http.post(url, json=body, timeout=self._load_timeout)
        except httpx.HTTPError as e:
            raise ActuationError(f"reloading model {target!r} failed: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise ActuationError(
                f"Triton refused to reload {target!r} with {replicas} instances: HTTP "
                f"{response.status_code} {_error(response)} (is the server in --model-control-mode=explicit?)"
            )
        self._last.remember(target, replicas)
        log.info("model %r instances %d -> %d", target, current, replicas)
        return replicas

    def _in_flight(self, model: str) -> float:
        try:
            response = self._http.get(self._metrics_url)
            response.raise_for_status()
            totals = gauge_totals(response.text, model, IN_FLIGHT_GAUGES)
        except (httpx.HTTPError, ExpositionError) as e:
            raise ActuationError(
                f"cannot tell whether model {model!r} is idle before a scale-in ({self._metrics_url}): "
                f"{type(e).__name__}: {e}"
            ) from e
        if RUNNING not in totals:
            raise ActuationError(
                f"{self._metrics_url} has no nlg_requests_running series for model {model!r}; "
                f"scale-in needs it to know the model is idle"
            )
        return sum(totals.values())

    def close(self) -> None:
        self._http.close()


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))
    except ValueError:
        return response.text[:200]
