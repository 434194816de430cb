"""Horizontal scaling: a Deployment's ``scale`` subresource through the official ``kubernetes`` client.

This module owns reading and patching ``apps/v1`` ``deployments/scale``. A write is a merge patch that
carries the ``resourceVersion`` just read, so the API server refuses it (409 Conflict) if the
Deployment changed in between; the actuator then reads again and retries, up to ``retries`` times.
If the read shows that the replicas are no longer what the decision started from, someone else
changed them: the actuator logs it and writes nothing (see :mod:`autoscaler.actuate`).

Every call is bounded by ``timeout`` seconds; any failure of the client (see :mod:`autoscaler.kube`)
is an :class:`~autoscaler.actuate.ActuationError`.
"""

from __future__ import annotations

import logging

from kubernetes import client as k8s

from autoscaler.actuate import ActuationError, LastSet, Observed
from autoscaler.kube import KubeError, call

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"


class DeploymentScaler:
    """Scales Deployments of one namespace; ``target`` is the Deployment's name."""

    def __init__(self, api: k8s.AppsV1Api, namespace: str, retries: int = 3, timeout: float = 5.0) -> None:
        self._api = api
        self._namespace = namespace
        self._retries = retries
        self._timeout = timeout
        self._last = LastSet()

    def _where(self, target: str) -> str:
        return f"deployment {self._namespace}/{target}"

    def _read(self, target: str) -> tuple[int, str | None]:
        what = f"cannot read the scale of {self._where(target)}"
        try:
            scale = call(what, self._api.read_namespaced_deployment_scale, target, self._namespace,
                         timeout=self._timeout)  # fmt: skip
        except KubeError as e:
            hint = " (does it exist? check actuator.deployment)" if e.status == 404 else ""
            raise ActuationError(f"{e}{hint}") from e
        replicas = scale.spec.replicas if scale.spec and scale.spec.replicas is not None else 0
        version = scale.metadata.resource_version if scale.metadata else None
        return int(replicas), version

    def observe(self, target: str) -> Observed:
        replicas, _ = self._read(target)
        observed = self._last.check(target, replicas)
        if observed.external:
            log.warning(
                "%s was changed outside the autoscaler: %d replicas, the autoscaler last set %d; "
                "taking %d as current",
                self._where(target), replicas, observed.previous, replicas,
            )  # fmt: skip
        return observed

    def scale(self, target: str, replicas: int, expected: int) -> int:
        for attempt in range(self._retries + 1):
            current, version = self._read(target)
            if current == replicas and attempt > 0:
                self._last.remember(target, replicas)  # another writer made the same change meanwhile
                return replicas
            if current != expected:
                log.warning(
                    "%s has %d replicas, not the %d the decision started from: changed outside the "
                    "autoscaler; not writing %d, deciding again next round",
                    self._where(target), current, expected, replicas,
                )  # fmt: skip
                self._last.remember(target, current)
                return current
            body: dict[str, object] = {"spec": {"replicas": replicas}}
            if version:
                body["metadata"] = {"resourceVersion": version}
            what = f"cannot scale {self._where(target)} to {replicas}"
            try:
                call(what, self._api.patch_namespaced_deployment_scale, target, self._namespace, body,
                     timeout=self._timeout, _content_type=_MERGE_PATCH)  # fmt: skip
            except KubeError as e:
                if e.status == 409 and attempt < self._retries:
                    log.info("%s changed while scaling (409 Conflict); reading it again", self._where(target))
                    continue
                raise ActuationError(str(e)) from e
            self._last.remember(target, replicas)
            log.info("%s scaled %d -> %d", self._where(target), current, replicas)
            return replicas
        where = self._where(target)
        raise ActuationError(f"cannot scale {where}: still conflicting after {self._retries} retries")

    def close(self) -> None:
        """The ApiClient belongs to the caller."""
