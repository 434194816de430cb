"""Where the targets registered through the REST API are kept: in this process, or in a ConfigMap.

This module owns reading and changing the stored set of registrations and nothing else (the
conflict rules belong to :mod:`autoscaler.targets`, which hands :meth:`TargetStore.update` a
function that checks them against the set it is given).

- :class:`MemoryStore`: a dict behind a lock; one process (Triton's single-node mode, the simulator,
  a single replica that may lose its targets on a restart).
- :class:`ConfigMapStore`: one key per target in a ConfigMap the chart owns, its value the
  registration as JSON (``to_dict`` of :class:`~autoscaler.config.Registration`). Every replica
  reads it; a change is a merge patch of the keys it changes that carries the ``resourceVersion``
  just read, so the API server refuses (409) a write based on a set another writer has changed
  since, and the change is worked out again on the new set after a wait that grows, with jitter
  (:mod:`autoscaler.backoff`), for as long as the update's ``budget`` allows. A key whose value
  does not parse (a hand edit) is logged and left as it is; it scales nothing.

Every failure to reach the stored set is a :class:`StoreUnavailable` with a one-line message: the
REST API answers it with 503, the loop keeps the targets it read last.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from kubernetes import client as k8s

from autoscaler.backoff import CONFLICT_BACKOFF, Backoff, Retries
from autoscaler.config import ConfigError, Registration, parse_registration, to_dict
from autoscaler.kube import KubeError, call
from autoscaler.safe_parse import loads_json

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"

#: The stored set: model_id -> its registration.
Stored = Mapping[str, Registration]
#: Given the stored set, the set to store instead (or the same object: nothing to write).
Change = Callable[[Stored], Stored]


class StoreUnavailable(RuntimeError):
    """The stored targets cannot be read or written now; the message says where and why."""


class Unstorable(ValueError):
    """This store cannot hold the target as named; the message names the key and what is allowed."""


class TargetStore(Protocol):
    #: What the store is, for messages ("configmap default/nlg-autoscaler-targets").
    where: str

    def read(self) -> dict[str, Registration]:
        """The stored set."""
        ...

    def update(self, change: Change) -> dict[str, Registration]:
        """Applies ``change`` to the stored set as it is when written; returns the set now stored.

        ``change`` may be called more than once (on a concurrent write) and may raise to refuse.
        """
        ...


class MemoryStore:
    """The targets of one process."""

    where = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stored: dict[str, Registration] = {}

    def read(self) -> dict[str, Registration]:
        with self._lock:
            return dict(self._stored)

    def update(self, change: Change) -> dict[str, Registration]:
        with self._lock:
            self._stored = dict(change(dict(self._stored)))
            return dict(self._stored)


def encode(registration: Registration) -> str:
    return json.dumps(to_dict(registration), sort_keys=True, separators=(",", ":"))


class ConfigMapStore:
    """The targets in ConfigMap ``namespace/name``, which must exist (the chart creates it).

    ``timeout`` bounds each call; ``budget`` one :meth:`update`, its conflict retries and their waits
    included. ``clock``, ``sleep`` and ``draw`` (the jitter's random numbers) are the retries' own,
    injectable for tests.
    """

    def __init__(
        self,
        api: k8s.CoreV1Api,
        name: str,
        namespace: str,
        *,
        timeout: float = 5.0,
        budget: float = 5.0,
        backoff: Backoff = CONFLICT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._api = api
        self.name = name
        self.namespace = namespace
        self.timeout = timeout
        self.budget = budget
        self.backoff = backoff
        self._clock, self._sleep, self._draw = clock, sleep, draw
        self.where = f"configmap {namespace}/{name}"
        self._bad: dict[str, str] = {}  # key -> the value last logged as unreadable

    def _get(self, timeout: float | None = None) -> k8s.V1ConfigMap:
        try:
            return call(f"cannot read the targets in {self.where}", self._api.read_namespaced_config_map,
                        self.name, self.namespace, timeout=timeout or self.timeout)  # fmt: skip
        except KubeError as e:
            hint = ""
            if e.status == 404:
                create = f"kubectl create configmap {self.name} -n {self.namespace}"
                hint = f" (the chart creates it; without the chart: {create})"
            elif e.status == 403:
                hint = " (the autoscaler's Role must allow get and patch on it)"
            raise StoreUnavailable(f"{e}{hint}") from e

    def _parse(self, data: Mapping[str, str]) -> dict[str, Registration]:
        stored: dict[str, Registration] = {}
        for key, value in data.items():
            try:
                registration = parse_registration(loads_json(value))
            except (ValueError, ConfigError) as e:  # ConfigError is a ValueError; named for the reader
                problem = "; ".join(e.errors) if isinstance(e, ConfigError) else f"not JSON ({e})"
                self._warn_once(key, value, f"{self.where}: key {key!r} skipped: {problem}")
                continue
            if registration.model_id != key:
                self._warn_once(key, value, f"{self.where}: key {key!r} skipped: it holds model_id "
                                            f"{registration.model_id!r}, the key must be the model_id")  # fmt: skip
                continue
            self._bad.pop(key, None)
            stored[key] = registration
        return stored

    def _warn_once(self, key: str, value: str, message: str) -> None:
        if self._bad.get(key) != value:  # once per bad value, not once per round
            self._bad[key] = value
            log.warning("%s", message)

    def read(self) -> dict[str, Registration]:
        return self._parse(self._get().data or {})

    def update(self, change: Change) -> dict[str, Registration]:
        retries = Retries(self.budget, self.backoff, clock=self._clock, draw=self._draw)
        while True:
            config_map = self._get(retries.call_timeout(self.timeout))
            current = self._parse(config_map.data or {})
            wanted = change(current)
            if wanted == current:
                return current
            for key in wanted.keys() - current.keys():
                if key in (".", ".."):  # every other model_id is a valid ConfigMap key
                    raise Unstorable(f"model_id = {key!r}: cannot be a key of {self.where}; "
                                     "use letters, digits, '_', '-' and at least one of them")  # fmt: skip
            # Only the keys that change: one that does not parse stays as it is. null removes a key.
            data: dict[str, str | None] = dict.fromkeys(current.keys() - wanted.keys())
            data.update({k: encode(r) for k, r in wanted.items() if current.get(k) != r})
            version = config_map.metadata.resource_version if config_map.metadata else None
            body = {"metadata": {"resourceVersion": version}, "data": data}
            try:
                call(f"cannot write the targets to {self.where}", self._api.patch_namespaced_config_map,
                     self.name, self.namespace, body, timeout=retries.call_timeout(self.timeout),
                     _content_type=_MERGE_PATCH)  # fmt: skip
            except KubeError as e:
                if e.status != 409:
                    raise StoreUnavailable(str(e)) from e
                wait = retries.next_wait()
                if wait is None:
                    raise StoreUnavailable(
                        f"cannot write the targets to {self.where}: another writer changed it before each of "
                        f"{retries.retries + 1} writes in {retries.elapsed():.1f} s (409 Conflict); try again"
                    ) from e
                log.info("%s changed since it was read (409 Conflict); reading it again in %.0f ms",
                         self.where, wait * 1000)  # fmt: skip
                self._sleep(wait)
                continue
            return dict(wanted)
