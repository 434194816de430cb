"""Leader election through a ``coordination.k8s.io/v1`` Lease, so two autoscaler replicas never both act.

This module owns the Lease protocol of client-go's ``leaderelection`` package, reduced to one call per
loop round, :meth:`LeaseElector.tick`, which takes the loop's ``now`` (it never reads the clock):

- no Lease: create it holding it (a 409 means another replica created it first: not leader);
- held by us: renew ``renewTime``;
- held by another: wait until the Lease has not changed for ``leaseDurationSeconds`` as measured on
  *our* clock since we last saw it change (client-go's rule: no trust in the other node's clock),
  then take it over;
- released (empty holder): take it over at once.

A change of holder, a released Lease's included, adds one to ``leaseTransitions`` (client-go counts
every acquisition by a replica that was not leading).

Every write is a merge patch carrying the ``resourceVersion`` just read, so of two replicas racing
for the same Lease the API server lets one through and answers the other 409: it is not leader.

The renew deadline (client-go's ``renewDeadline``, here ``2/3`` of the lease unless given) bounds
how long a leader goes on acting without a successful renewal: one whose renewal fails keeps
leading only while its next round (``retry_period`` later) still falls before the deadline, and
:meth:`LeaseElector.check` lets the loop stop it between targets once the deadline has passed. Each
call's timeout is cut to the time left, so the leader has stopped claiming the Lease before a
standby, which waits the whole lease duration from the last change it saw, can take it over: at
most one replica leads.

Any failure of the API (see :mod:`autoscaler.kube`) is one log line and :attr:`LeaseElector.error`
for that round, never an exception. :meth:`LeaseElector.release` empties the holder on shutdown so
a standby takes over at once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from kubernetes import client as k8s

from autoscaler.kube import KubeError, call

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"
#: The renew deadline as a share of the lease duration when none is given (client-go's 10 s of 15 s).
RENEW_SHARE = 2 / 3
#: A call never gets less time than this, even right before the deadline.
_MIN_TIMEOUT = 0.05


def _micro_time(now: float) -> str:
    """Kubernetes MicroTime (RFC 3339 with microseconds)."""
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate; ``identity`` must be unique per replica (the pod name).

    ``timeout`` bounds each API call; ``renew_deadline`` (default ``2/3 * lease_duration``, must be
    shorter than it) is how long a leader may go without a successful renewal; ``retry_period`` is
    the time to the next :meth:`tick` (the loop interval).
    """

    def __init__(
        self,
        api: k8s.CoordinationV1Api,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float,
        *,
        renew_deadline: float | None = None,
        retry_period: float = 0.0,
        timeout: float = 5.0,
    ) -> None:
        deadline = RENEW_SHARE * lease_duration if renew_deadline is None else renew_deadline
        if not 0 < deadline < lease_duration:
            raise ValueError(f"renew_deadline {deadline} must be in (0, lease_duration {lease_duration})")
        self._api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = deadline
        self.retry_period = retry_period
        self.timeout = timeout
        self.leading = False
        #: Why the last tick could not talk to the API server ("" when it could; losing a race is not an error).
        self.error = ""
        #: Who held the Lease at the last read ("" when unknown or released): where a standby sends writers.
        self.holder = ""
        self._renewed_at = 0.0
        self._seen: tuple[Any, ...] | None = None
        self._seen_at = 0.0

    @property
    def _where(self) -> str:
        return f"lease {self.namespace}/{self.name}"

    def _set_leading(self, leading: bool, why: str = "") -> bool:
        if leading != self.leading:
            verb = "acquired" if leading else "lost"
            log.warning("%s %s %s%s", self.identity, verb, self._where, f": {why}" if why else "")
        self.leading = leading
        if not leading and self.holder == self.identity:
            self.holder = ""  # the Lease may still name us, but we no longer act: the next read says who
        return leading

    def _failed(self, e: KubeError) -> bool:
        self.error = str(e)
        self.holder = self.identity if self.leading else ""
        if self.leading:  # the deadline check in tick() decides when a failing leader steps down
            log.warning("%s; leading until the renew deadline", e)
            return True
        log.warning("%s", e)
        return False

    def _create(self, now: float, timeout: float) -> bool:
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
            call(f"cannot create {self._where}", self._api.create_namespaced_lease, self.namespace, body,
                 timeout=timeout)  # fmt: skip
        except KubeError as e:
            return False if e.status == 409 else self._failed(e)
        self.holder = self.identity
        return True

    def _patch(self, version: str | None, spec: dict[str, Any], timeout: float) -> bool:
        body: dict[str, Any] = {"spec": spec}
        if version:
            body["metadata"] = {"resourceVersion": version}
        try:
            call(f"cannot update {self._where}", self._api.patch_namespaced_lease, self.name, self.namespace,
                 body, timeout=timeout, _content_type=_MERGE_PATCH)  # fmt: skip
        except KubeError as e:
            if e.status == 409:  # another replica wrote the Lease since we read it
                self.holder = ""  # the next read says who
                return self._set_leading(False, "another replica changed it (409 Conflict)")
            return self._failed(e)
        self.holder = spec.get("holderIdentity", self.holder) or ""
        return True

    def tick(self, now: float) -> bool:
        """Acquires or renews the Lease; True while this replica may act.

        A leader past its renew deadline steps down and tries again as a candidate next round; one
        whose renewal fails keeps leading only while the next round (``retry_period`` on) still falls
        before the deadline.
        """
        self.error = ""
        if self.leading and not self.check(now):
            return False
        timeout = self.timeout
        if self.leading:
            # Both calls (read, then renew) end before the deadline.
            timeout = max(_MIN_TIMEOUT, min(self.timeout, (self._renewed_at + self.renew_deadline - now) / 2))
        leading = self._try(now, timeout)
        if leading and not self.error:
            self._renewed_at = now
        elif leading and now + self.retry_period >= self._renewed_at + self.renew_deadline:
            deadline = self.renew_deadline
            return self._set_leading(False, f"cannot renew within the {deadline:g} s renew deadline")
        return self._set_leading(leading)

    def check(self, now: float) -> bool:
        """Whether this replica may still act at ``now``; a leader past its renew deadline steps down."""
        if self.leading and not self.leads_at(now):
            deadline = self.renew_deadline
            self._set_leading(False, f"not renewed within the {deadline:g} s renew deadline")
        return self.leading

    def leads_at(self, now: float) -> bool:
        """Whether this replica leads at ``now`` by its own clock (within its renew deadline); changes nothing,
        so another thread (the REST API's) may ask between two rounds."""
        return self.leading and now - self._renewed_at < self.renew_deadline

    def leader_at(self, now: float) -> str:
        """Who leads at ``now`` as far as this replica knows: itself while :meth:`leads_at`, else the
        holder it last read ("" when none is known). Never itself once past its renew deadline: the
        Lease may still name it, but it has stopped acting, and a client sent back to it would wait
        for nothing."""
        if self.leads_at(now):
            return self.identity
        return "" if self.holder == self.identity else self.holder

    def _try(self, now: float, timeout: float) -> bool:
        try:
            lease = call(f"cannot read {self._where}", self._api.read_namespaced_lease, self.name,
                         self.namespace, timeout=timeout)  # fmt: skip
        except KubeError as e:
            if e.status == 404:
                return self._create(now, timeout)
            return self._failed(e)
        spec = lease.spec or k8s.V1LeaseSpec()
        version = lease.metadata.resource_version if lease.metadata else None
        holder = self.holder = spec.holder_identity or ""
        if holder == self.identity:
            return self._patch(version, {"renewTime": _micro_time(now)}, timeout)
        if self.leading:
            return self._set_leading(False, f"now held by {holder!r}" if holder else "released")
        seen = (holder, spec.renew_time, version)
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        duration = spec.lease_duration_seconds or self.lease_duration
        if holder and now - self._seen_at < duration:
            return False
        return self._patch(
            version,
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": (spec.lease_transitions or 0) + 1,
            },
            timeout,
        )

    def release(self) -> None:
        """Gives the Lease up (empty holder) if we hold it; errors are logged, not raised."""
        if not self.leading:
            return
        try:
            lease = call(f"cannot release {self._where}", self._api.read_namespaced_lease, self.name,
                         self.namespace, timeout=self.timeout)  # fmt: skip
            if lease.spec and lease.spec.holder_identity == self.identity:
                version = lease.metadata.resource_version if lease.metadata else None
                self._patch(version, {"holderIdentity": None, "leaseDurationSeconds": 1}, self.timeout)
        except KubeError as e:
            log.warning("%s", e)
        self._set_leading(False, "released")
