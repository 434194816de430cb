"""Horizontal scaling: a Deployment's replica count through the official ``kubernetes`` client, with what
the autoscaler set recorded on the Deployment itself.

This module owns reading and patching ``apps/v1`` Deployments. A write is one merge patch that sets
``spec.replicas`` and the annotation :data:`REPLICAS_ANNOTATION` to the same count, carrying the
``resourceVersion`` just read, so the API server refuses it (409 Conflict) if the Deployment changed
in between; the actuator then reads again and retries after a growing, jittered wait
(:mod:`autoscaler.backoff`) while its ``budget`` lasts. If the read shows that the replicas are no
longer what the decision started from, someone else changed them: the actuator logs it and writes
nothing (see :mod:`autoscaler.actuate`).

The annotation is what any replica of the autoscaler last set, kept in the cluster: a replica that
has just taken the Lease over reads its predecessor's count there, so a count that differs from it
was changed outside the autoscaler (``kubectl scale``, another controller) and one that matches was
not, whoever of the replicas wrote it. A Deployment no replica has scaled yet has no annotation:
then the count this replica saw last is the reference (:class:`~autoscaler.actuate.LastSet`).

Every call is bounded by ``timeout`` seconds; any failure of the client (see :mod:`autoscaler.kube`)
is an :class:`~autoscaler.actuate.ActuationError`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from autoscaler.actuate import ActuationError, LastSet, Observed
from autoscaler.backoff import Retries
from autoscaler.kube import KubeError, call

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"
#: The replica count the autoscaler last set on a Deployment, as a decimal string.
REPLICAS_ANNOTATION = "nlg-serving/autoscaler-replicas"


class DeploymentScaler:
    """Scales Deployments of one namespace; ``target`` is the Deployment's name.

    ``budget`` bounds one :meth:`scale` with its conflict retries (default ``timeout``); ``clock``,
    ``sleep`` and ``draw`` are the retries' own, injectable for tests.
    """

    def __init__(
        self,
        api: k8s.AppsV1Api,
        namespace: str,
        timeout: float = 5.0,
        *,
        budget: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._timeout = timeout
        self._budget = timeout if budget is None else budget
        self._clock, self._sleep, self._draw = clock, sleep, draw
        # target -> (replicas, recorded) already reported as changed outside: said once, not each round.
        self._reported: dict[str, tuple[int, int]] = {}
        self._seen = LastSet()  # the reference where no annotation records one

    def _where(self, target: str) -> str:
        return f"deployment {self._namespace}/{target}"

    def _read(self, target: str, timeout: float) -> tuple[int, str | None, int | None]:
        """The Deployment's replicas, resourceVersion, and the count the annotation records (None: none)."""
        what = f"cannot read {self._where(target)}"
        try:
            deployment = call(what, self._api.read_namespaced_deployment, target, self._namespace, timeout=timeout)
        except KubeError as e:
            hint = " (does it exist? check actuator.deployment)" if e.status == 404 else ""
            raise ActuationError(f"{e}{hint}") from e
        spec, metadata = deployment.spec, deployment.metadata
        replicas = spec.replicas if spec and spec.replicas is not None else 1  # the API server's default
        annotations = (metadata.annotations if metadata else None) or {}
        return int(replicas), metadata.resource_version if metadata else None, _count(annotations)

    def observe(self, target: str) -> Observed:
        replicas, _, recorded = self._read(target, self._timeout)
        seen = self._seen.check(target, replicas)
        if recorded is None:
            observed, why = seen, "the count seen before"
        elif recorded == replicas or self._reported.get(target) == (replicas, recorded):
            observed, why = Observed(replicas), ""
        else:
            observed, why = Observed(replicas, external=True, previous=recorded), f"annotation {REPLICAS_ANNOTATION}"
        if recorded == replicas:
            self._reported.pop(target, None)
        elif recorded is not None:
            self._reported[target] = (replicas, recorded)
        if observed.external:
            log.warning(
                "%s was changed outside the autoscaler: %d replicas, the autoscaler last set %d (%s); "
                "taking %d as current",
                self._where(target), replicas, observed.previous, why, replicas,
            )  # fmt: skip
        return observed

    def scale(self, target: str, replicas: int, expected: int) -> int:
        where = self._where(target)
        retries = Retries(self._budget, clock=self._clock, draw=self._draw)
        while True:
            current, version, recorded = self._read(target, retries.call_timeout(self._timeout))
            if current == replicas and retries.retries > 0:
                self._seen.remember(target, replicas)
                return replicas  # another writer made the same change meanwhile
            if current != expected:
                by = "by the autoscaler" if recorded == current else "outside the autoscaler"
                log.warning(
                    "%s has %d replicas, not the %d the decision started from: changed %s; not writing "
                    "%d, deciding again next round",
                    where, current, expected, by, replicas,
                )  # fmt: skip
                if recorded is not None and recorded != current:
                    self._reported[target] = (current, recorded)  # said here: observe() need not again
                self._seen.remember(target, current)
                return current
            metadata: dict[str, Any] = {"annotations": {REPLICAS_ANNOTATION: str(replicas)}}
            if version:
                metadata["resourceVersion"] = version
            body = {"metadata": metadata, "spec": {"replicas": replicas}}
            try:
                call(f"cannot scale {where} to {replicas}", self._api.patch_namespaced_deployment, target,
                     self._namespace, body, timeout=retries.call_timeout(self._timeout),
                     _content_type=_MERGE_PATCH)  # fmt: skip
            except KubeError as e:
                wait = retries.next_wait() if e.status == 409 else None
                if wait is None and e.status == 409:
                    raise ActuationError(
                        f"cannot scale {where} to {replicas}: another writer changed it before each of "
                        f"{retries.retries + 1} writes in {retries.elapsed():.1f} s (409 Conflict)"
                    ) from e
                if wait is None:
                    raise ActuationError(str(e)) from e
                log.info("%s changed while scaling (409 Conflict); reading it again in %.0f ms", where, wait * 1000)
                self._sleep(wait)
                continue
            self._reported.pop(target, None)
            self._seen.remember(target, replicas)
            log.info("%s scaled %d -> %d", where, current, replicas)
            return replicas

    def close(self) -> None:
        """The ApiClient belongs to the caller."""


def _count(annotations: dict[str, str]) -> int | None:
    """The count :data:`REPLICAS_ANNOTATION` records; None when absent or not a count (a hand edit)."""
    value = annotations.get(REPLICAS_ANNOTATION, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None
