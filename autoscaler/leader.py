"""Leader election through a ``coordination.k8s.io/v1`` Lease, so two autoscaler replicas never both act.

This module owns the Lease protocol of client-go's ``leaderelection`` package, reduced to one call per
loop round, :meth:`LeaseElector.tick`, which takes the loop's ``now`` (it never reads the clock):

- no Lease: create it holding it (a 409 means another replica created it first: not leader);
- held by us: renew ``renewTime``;
- held by another: wait until the Lease has not changed for ``leaseDurationSeconds`` as measured on
  *our* clock since we last saw it change (client-go's rule: no trust in the other node's clock),
  then take it over, incrementing ``leaseTransitions``;
- released (empty holder): take it over at once.

Every write is a merge patch carrying the ``resourceVersion`` just read, so of two replicas racing
for the same Lease the API server lets one through and answers the other 409: it is not leader.
Any API error means "not leader" for this round: acting without a renewed Lease is what must not
happen. :meth:`LeaseElector.release` empties the holder on shutdown so a standby takes over at once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from kubernetes import client as k8s

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"


def _micro_time(now: float) -> str:
    """Kubernetes MicroTime (RFC 3339 with microseconds)."""
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate; ``identity`` must be unique per replica (the pod name)."""

    def __init__(
        self, api: k8s.CoordinationV1Api, name: str, namespace: str, identity: str, lease_duration: float
    ) -> None:
        self._api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.leading = False
        self._seen: tuple[Any, ...] | None = None
        self._seen_at = 0.0

    def _set_leading(self, leading: bool) -> bool:
        if leading != self.leading:
            verb = "acquired" if leading else "lost"
            log.warning("%s %s lease %s/%s", self.identity, verb, self.namespace, self.name)
        self.leading = leading
        return leading

    def _create(self, now: float) -> bool:
        at = datetime.fromtimestamp(now, tz=timezone.utc)
        body = k8s.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=k8s.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=max(1, round(self.lease_duration)),
                acquire_time=at,
                renew_time=at,
                lease_transitions=0,
            ),
        )
        try:
            self._api.create_namespaced_lease(self.namespace, body)
        except k8s.ApiException as e:
            if e.status != 409:
                log.warning("cannot create lease %s/%s: HTTP %s", self.namespace, self.name, e.status)
            return False
        return True

    def _patch(self, version: str | None, spec: dict[str, Any]) -> bool:
        body: dict[str, Any] = {"spec": spec}
        if version:
            body["metadata"] = {"resourceVersion": version}
        try:
            self._api.patch_namespaced_lease(self.name, self.namespace, body, _content_type=_MERGE_PATCH)
        except k8s.ApiException as e:
            if e.status != 409:
                log.warning("cannot update lease %s/%s: HTTP %s", self.namespace, self.name, e.status)
            return False
        return True

    def tick(self, now: float) -> bool:
        """Acquires or renews the Lease; True while this replica may act."""
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except k8s.ApiException as e:
            if e.status == 404:
                return self._set_leading(self._create(now))
            log.warning("cannot read lease %s/%s: HTTP %s", self.namespace, self.name, e.status)
            return self._set_leading(False)
        except OSError as e:
            log.warning("cannot reach the Kubernetes API for lease %s/%s: %s", self.namespace, self.name, e)
            return self._set_leading(False)
        spec = lease.spec or k8s.V1LeaseSpec()
        version = lease.metadata.resource_version if lease.metadata else None
        holder = spec.holder_identity or ""
        if holder == self.identity:
            return self._set_leading(self._patch(version, {"renewTime": _micro_time(now)}))
        seen = (holder, spec.renew_time, version)
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        duration = spec.lease_duration_seconds or self.lease_duration
        if holder and now - self._seen_at < duration:
            return self._set_leading(False)
        taken = self._patch(
            version,
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": (spec.lease_transitions or 0) + (1 if holder else 0),
            },
        )
        return self._set_leading(taken)

    def release(self) -> None:
        """Gives the Lease up (empty holder) if we hold it; errors are logged, not raised."""
        if not self.leading:
            return
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                version = lease.metadata.resource_version if lease.metadata else None
                self._patch(version, {"holderIdentity": None, "leaseDurationSeconds": 1})
        except (k8s.ApiException, OSError) as e:
            log.warning("cannot release lease %s/%s: %s", self.namespace, self.name, e)
        self._set_leading(False)
