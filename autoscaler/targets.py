"""The registry of scaling targets: the config file's one and those registered through the REST API.

This module owns which targets exist, their policies, policy state and recent decisions, behind one
lock shared by the API and the loop; the round that acts on them is :mod:`autoscaler.loop`.

The API's targets are kept in a :class:`~autoscaler.target_store.TargetStore`: a change is checked
against the stored set as the store hands it over (so two replicas cannot both accept two targets
for one Deployment) and applied here once stored. :meth:`Targets.sync`, each round, makes this
replica's targets the stored set again: what another replica registered or removed, or what this
one stored before a restart. When the store cannot be read, the targets read last stay, and
:attr:`Targets.stale` says why until a read succeeds.

The config file's target is this replica's own (every replica reads the same file) and never
stored; a stored target that would take its model or what it scales is left out here, with a
warning. A target's policy (:mod:`autoscaler.policy`, picked by ``scaler.type``) is built when the
target is set and kept, with its state and history, while its ``scaler`` is unchanged.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from autoscaler.config import Registration, ScalerSpec, to_dict
from autoscaler.decide import Decision
from autoscaler.policy import Policy, build_policy
from autoscaler.target_store import MemoryStore, Stored, StoreUnavailable, TargetStore
from autoscaler.telemetry import Telemetry, direction

log = logging.getLogger(__name__)

Origin = Literal["config", "api"]


class TargetConflict(ValueError):
    """The request would change a target it may not change (the config file or another target owns it)."""


@dataclass
class Target:
    """One model being scaled. ``scale_target``: the Deployment (kubernetes) or model (triton)."""

    model_id: str
    spec: ScalerSpec
    scale_target: str
    origin: Origin
    policy: Policy
    registration: Registration | None = None
    state: Any = None
    replicas: int | None = None
    last_error: str | None = None
    history: deque[tuple[float, Decision]] = field(default_factory=lambda: deque(maxlen=50))

    def signals(self) -> dict[str, float]:
        return dict(self.policy.targets)

    def view(self) -> dict[str, Any]:
        """What ``GET /deployment/{model_id}/`` returns."""
        history = list(self.history)  # one copy: the loop thread appends concurrently
        last = history[-1][1] if history else None
        return {
            "model_id": self.model_id,
            "origin": self.origin,
            "scale_target": self.scale_target,
            "instance_type": self.registration.instance_type if self.registration else "",
            "engine_type": self.registration.engine_type if self.registration else "triton",
            "scaler": to_dict(self.spec),
            "replicas": {"current": self.replicas, "desired": last.desired if last else None},
            "metrics": dict(last.values) if last else {},
            "targets": self.signals(),
            "last_error": self.last_error,
            "decisions": [
                {"time": t, "current": d.current, "desired": d.desired, "valid": d.valid,
                 "direction": direction(d), "reason": d.reason}
                for t, d in reversed(history)
            ],  # fmt: skip
        }


class Targets:
    """The targets of one replica; the API changes them while the loop runs rounds over them.

    ``target_name`` maps a registration to what the actuator scales (its model, for Triton);
    ``policies`` builds a target's policy from its ``scaler``; ``on_remove`` is told each model
    that stops being scaled (the metric source forgets its pods).
    """

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        store: TargetStore | None = None,
        source_kind: str = "direct",
        target_name: Callable[[Registration], str] = lambda r: r.target_name,
        policies: Callable[[ScalerSpec], Policy] = build_policy,
        on_remove: Callable[[str], None] = lambda model_id: None,
    ) -> None:
        self.telemetry = telemetry
        self.store: TargetStore = store if store is not None else MemoryStore()
        self.source_kind = source_kind
        self.target_name = target_name
        self.policies = policies
        self.on_remove = on_remove
        #: Why the last read of the store failed ("" after a good one): the targets are the ones read before.
        self.stale = ""
        self._lock = threading.RLock()
        # One API write at a time (rare; never held by a round), so that each applies the set it stored.
        self._writing = threading.Lock()
        self._writes = 0  # API writes applied; a read of the store that one overtook is not applied
        self._targets: dict[str, Target] = {}
        self._ignored: dict[str, Registration] = {}  # stored targets left out, each warned about once

    # -- the config file's target --------------------------------------------------------------

    def config_target_conflict(self, model_id: str, scale_target: str) -> str | None:
        """Why the config file may not take this target (an API target holds the model or what it
        scales), or None."""
        with self._lock:
            for other in self._targets.values():
                if other.origin == "api" and (other.model_id == model_id or other.scale_target == scale_target):
                    return (
                        f"{scale_target!r} for model {model_id!r}: already scaled for model {other.model_id!r} "
                        "(api); two targets would undo each other's replicas (DELETE that target first)"
                    )
        return None

    def set_config_target(self, model_id: str, spec: ScalerSpec, scale_target: str) -> None:
        """The config file's target; a reload with another ``model_id`` drops the old one."""
        with self._lock:
            for old in [t for t in self._targets.values() if t.origin == "config" and t.model_id != model_id]:
                self._remove(old.model_id)
            self._add(Target(model_id, spec, scale_target, "config", self._policy(model_id, spec)))

    def _config_target(self) -> Target | None:
        return next((t for t in self._targets.values() if t.origin == "config"), None)

    # -- the API's targets ---------------------------------------------------------------------

    def _check(self, registration: Registration, stored: Stored, *, replace: bool) -> None:
        """Raises :class:`TargetConflict` if ``registration`` may not join ``stored``."""
        model = registration.model_id
        config = self._config_target()
        if config is not None and config.model_id == model:
            raise TargetConflict(f"model {model!r} is scaled by the config file; change the file instead")
        if model in stored and not replace:
            raise TargetConflict(f"model {model!r} is already registered: PUT /deployment/{model}/ replaces it")
        name = self.target_name(registration)
        owners = [(r.model_id, "api") for r in stored.values() if self.target_name(r) == name]
        if config is not None and config.scale_target == name:
            owners.append((config.model_id, "config"))
        for owner, origin in owners:
            if owner != model:
                raise TargetConflict(
                    f"{name!r} is already scaled for model {owner!r} ({origin}); "
                    "two targets would undo each other's replicas"
                )

    def register(self, registration: Registration, *, replace: bool = True) -> tuple[dict[str, Any], bool]:
        """Stores an API target, or replaces one when ``replace``; one scale target has one owner.

        Returns the target's view and whether it is new. Raises :class:`TargetConflict`, or
        :class:`~autoscaler.target_store.StoreUnavailable` (nothing changed).
        """
        created = True

        def change(stored: Stored) -> Stored:
            nonlocal created
            with self._lock:  # the config target may be reloaded meanwhile
                self._check(registration, stored, replace=replace)
            created = registration.model_id not in stored
            if stored.get(registration.model_id) == registration:
                return stored
            return {**stored, registration.model_id: registration}

        with self._writing:
            stored = self.store.update(change)
            with self._lock:
                self._applied_write(stored)
        with self._lock:
            target = self._targets.get(registration.model_id)
            if target is None:  # stored, then refused here: the config file took it meanwhile
                raise TargetConflict(f"model {registration.model_id!r} is scaled by the config file")
            return target.view(), created

    def unregister(self, model_id: str) -> bool:
        """Removes an API target from the store; False if there is none."""
        with self._lock:
            config = self._config_target()
            if config is not None and config.model_id == model_id:
                raise TargetConflict(f"model {model_id!r} is scaled by the config file; remove it there")
        found = False

        def change(stored: Stored) -> Stored:
            nonlocal found
            found = model_id in stored
            return {k: v for k, v in stored.items() if k != model_id} if found else stored

        with self._writing:
            stored = self.store.update(change)
            with self._lock:
                self._applied_write(stored)
        return found

    def _applied_write(self, stored: Stored) -> None:
        self._writes += 1
        self._apply(stored)

    def sync(self) -> bool:
        """Makes this replica's API targets the stored set; False (the old set kept) if it cannot be read."""
        writes = self._writes
        try:
            stored = self.store.read()
        except StoreUnavailable as e:
            if not self.stale:
                log.warning("%s; keeping the %d targets read before until it can be read", e, len(self._targets))
            self.stale = str(e)
            self.telemetry.target_store_errors.inc()
            self.telemetry.targets_stale.set(1)
            return False
        if self.stale:
            log.warning("%s read again: %d API targets", self.store.where, len(stored))
        self.stale = ""
        self.telemetry.targets_stale.set(0)
        with self._lock:
            if self._writes == writes:  # else an API write applied a newer set meanwhile
                self._apply(stored)
        return True

    def _apply(self, stored: Stored) -> None:
        """Adds, replaces and removes API targets so that they are ``stored`` (the lock is held)."""
        for old in [t for t in self._targets.values() if t.origin == "api" and t.model_id not in stored]:
            log.info("%s: no longer registered; not scaling it", old.model_id)
            self._remove(old.model_id)
        config = self._config_target()
        for model_id, registration in stored.items():
            existing = self._targets.get(model_id)
            if existing is not None and existing.registration == registration:
                continue
            name = self.target_name(registration)
            if config is not None and (model_id == config.model_id or config.scale_target == name):
                if self._ignored.get(model_id) != registration:
                    self._ignored[model_id] = registration
                    log.warning("%s: model %r (scaling %r) left out: the config file scales %r for model %r here",
                                self.store.where, model_id, name, config.scale_target, config.model_id)  # fmt: skip
                continue
            self._ignored.pop(model_id, None)
            if existing is None:
                log.info("%s: registered, scaling %r", model_id, name)
            policy = self._policy(model_id, registration.scaler)
            self._add(Target(model_id, registration.scaler, name, "api", policy, registration))

    def _add(self, target: Target) -> None:
        old = self._targets.get(target.model_id)
        if old is not None and old.spec == target.spec and old.scale_target == target.scale_target:
            old.origin, old.registration = target.origin, target.registration
            return  # same policy: keep its state and history
        if old is not None:
            target.state, target.replicas, target.history = old.state, old.replicas, old.history
            self.telemetry.forget_signals(target.model_id)
        self._targets[target.model_id] = target
        self.telemetry.bind(target.model_id, self.source_kind, target.signals())

    def _policy(self, model_id: str, spec: ScalerSpec) -> Policy:
        """The target's policy as it is, when its spec did not change (a planner keeps its profile)."""
        old = self._targets.get(model_id)
        return old.policy if old is not None and old.spec == spec else self.policies(spec)

    def _remove(self, model_id: str) -> None:
        self._targets.pop(model_id)
        self.telemetry.forget(model_id)
        self.on_remove(model_id)

    # -- reading -------------------------------------------------------------------------------

    def all(self) -> list[Target]:
        """The targets now, for one round (a copy: the API may change the set meanwhile)."""
        with self._lock:
            return list(self._targets.values())

    def view(self, model_id: str) -> dict[str, Any] | None:
        with self._lock:
            target = self._targets.get(model_id)
            return target.view() if target else None

    def last_decision(self, model_id: str) -> tuple[float, Decision] | None:
        """The target's latest round: its time and decision (``None`` before its first)."""
        with self._lock:
            target = self._targets.get(model_id)
            return target.history[-1] if target is not None and target.history else None

    def views(self) -> list[dict[str, Any]]:
        with self._lock:
            return [t.view() for t in self._targets.values()]
