"""The control loop: collect -> aggregate -> decide -> actuate for every scaling target, each round.

This module is the only code that reads the clock (``clock``, ``time.time`` by default, injectable so
tests drive it). It owns the scaling targets (the config file's one, and those registered through
the REST API), their policy state and their recent decisions, behind one lock shared with the API.

A round, per target: observe the replicas (a change made by someone else is logged and taken as
current), read the window (a source that fails gives an empty window: the policy holds, the error is
counted), decide, and if the decision differs from what was observed, actuate. A failed actuation is
counted and the policy state keeps the observed replicas, so the next round decides again. A
follower (another replica holds the Lease) does nothing but try for the Lease; a leader past its
renew deadline stops before its next target. Each target's policy (:mod:`autoscaler.policy`, picked
by ``scaler.type``) is built when the target is set and kept while its ``scaler`` is unchanged.
Every call the parts make is bounded, so a round ends;
one longer than the interval is logged and counted, and :meth:`Controller.run_once` returns what
failed in it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from autoscaler.actuate import ActuationError, Actuator, Deferred
from autoscaler.aggregate import WindowStats
from autoscaler.collect import SourceError, WindowSource
from autoscaler.config import Registration, ScalerSpec, to_dict
from autoscaler.decide import Decision
from autoscaler.leader import LeaseElector
from autoscaler.policy import Policy, build_policy
from autoscaler.telemetry import Telemetry, direction

log = logging.getLogger(__name__)

Origin = Literal["config", "api"]


class TargetConflict(ValueError):
    """The request would change a target it may not change (the config file owns it)."""


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


class Controller:
    """Runs rounds over the targets; the API registers and removes targets concurrently."""

    def __init__(
        self,
        source: WindowSource,
        actuator: Actuator,
        telemetry: Telemetry,
        *,
        source_kind: str,
        clock: Callable[[], float] = time.time,
        elector: LeaseElector | None = None,
        target_name: Callable[[Registration], str] = lambda r: r.target_name,
        policies: Callable[[ScalerSpec], Policy] = build_policy,
    ) -> None:
        """``target_name`` maps a registration to what the actuator scales (its model, for Triton);
        ``policies`` builds a target's policy from its ``scaler`` (``scaler.type`` picks it)."""
        self.source = source
        self.policies = policies
        self.target_name = target_name
        self.actuator = actuator
        self.telemetry = telemetry
        self.source_kind = source_kind
        self.elector = elector
        self._clock = clock
        self._lock = threading.RLock()
        self._targets: dict[str, Target] = {}
        telemetry.is_leader.set(0 if elector else 1)

    # -- targets -------------------------------------------------------------------------------

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

    def register(self, registration: Registration, *, replace: bool = True) -> dict[str, Any]:
        """Adds an API target, or replaces one when ``replace``; one scale target has one owner."""
        with self._lock:
            existing = self._targets.get(registration.model_id)
            if existing is not None and existing.origin == "config":
                raise TargetConflict(
                    f"model {registration.model_id!r} is scaled by the config file; change the file instead"
                )
            if existing is not None and not replace:
                raise TargetConflict(f"model {registration.model_id!r} is already registered")
            name = self.target_name(registration)
            for other in self._targets.values():
                if other.scale_target == name and other.model_id != registration.model_id:
                    raise TargetConflict(
                        f"{name!r} is already scaled for model {other.model_id!r} ({other.origin}); "
                        "two targets would undo each other's replicas"
                    )
            policy = self._policy(registration.model_id, registration.scaler)
            target = Target(registration.model_id, registration.scaler, name, "api", policy, registration)
            self._add(target)
            return self._targets[registration.model_id].view()

    def unregister(self, model_id: str) -> bool:
        with self._lock:
            target = self._targets.get(model_id)
            if target is None:
                return False
            if target.origin == "config":
                raise TargetConflict(f"model {model_id!r} is scaled by the config file; remove it there")
            self._remove(model_id)
            return True

    def _policy(self, model_id: str, spec: ScalerSpec) -> Policy:
        """The target's policy as it is, when its spec did not change (a planner keeps its profile)."""
        old = self._targets.get(model_id)
        return old.policy if old is not None and old.spec == spec else self.policies(spec)

    def _remove(self, model_id: str) -> None:
        self._targets.pop(model_id)
        self.telemetry.forget(model_id)
        forget = getattr(self.source, "forget", None)
        if forget is not None:
            forget(model_id)

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

    # -- rounds --------------------------------------------------------------------------------

    def run_once(self) -> list[str]:
        """One round over all targets at ``now = clock()``; what failed in it, one line each."""
        started = time.perf_counter()
        now = self._clock()
        if self.elector is not None:
            leading = self.elector.tick(now)
            self.telemetry.is_leader.set(1 if leading else 0)
            if self.elector.error:
                self.telemetry.lease_errors.inc()
            if not leading:
                return [f"leader election: {self.elector.error}"] if self.elector.error else []
        with self._lock:
            targets = list(self._targets.values())
        # The lock is not held over the network calls, so the API answers while a round waits on one;
        # a target removed meanwhile finishes this round unseen.
        errors: list[str] = []
        for target in targets:
            if not self._may_act():
                break
            self._round(target, now)
            if target.last_error:
                errors.append(f"{target.model_id}: {target.last_error}")
        self.telemetry.loop_duration.observe(time.perf_counter() - started)
        return errors

    def _may_act(self) -> bool:
        """A leader whose renew deadline passed during this round stops before the next target."""
        if self.elector is None or self.elector.check(self._clock()):
            return True
        self.telemetry.is_leader.set(0)
        return False

    def _round(self, target: Target, now: float) -> None:
        model = target.model_id
        try:
            observed = self.actuator.observe(target.scale_target)
        except ActuationError as e:
            self.telemetry.actuation_errors.labels(model).inc()
            target.last_error = str(e)
            log.warning("%s: %s; skipping this round", model, e)
            return
        self.telemetry.observed(model, observed.replicas, observed.external)
        target.replicas = observed.replicas
        policy = target.policy
        state = (target.state or policy.initial(observed.replicas)).with_replicas(observed.replicas)
        note = ""
        try:
            window = self.source.read(now, model, target.spec.time_window)
            target.last_error = None
        except SourceError as e:
            self.telemetry.scrape_errors.labels(model, self.source_kind).inc()
            target.last_error = f"metric source: {e}"
            note = "metric source failed; "
            window = WindowStats.empty()
        decision, new_state = policy.decide(window, target.spec, state, now)
        if note:
            decision = replace(decision, reason=note + decision.reason)
        if decision.desired != observed.replicas:
            actual, deferred = self._actuate(target, decision, observed.replicas)
            if deferred:
                decision = replace(decision, reason=f"{decision.reason}; deferred: {deferred}")
            if actual != decision.desired:
                new_state = replace(new_state, replicas=actual, events=state.events)
            target.replicas = actual
            log.info("%s: %s", model, decision.reason)
        else:
            log.debug("%s: %s", model, decision.reason)
        target.state = new_state
        target.history.append((now, decision))
        self.telemetry.decided(model, decision)

    def _actuate(self, target: Target, decision: Decision, observed: int) -> tuple[int, str]:
        """The replicas the target has after acting, and why the actuator put the change off ("" if not)."""
        try:
            return self.actuator.scale(target.scale_target, decision.desired, expected=observed), ""
        except Deferred as e:
            self.telemetry.deferred.labels(target.model_id).inc()
            return observed, str(e)
        except ActuationError as e:
            self.telemetry.actuation_errors.labels(target.model_id).inc()
            target.last_error = str(e)
            log.warning("%s: %s", target.model_id, e)
            return observed, ""

    def run(
        self, stop: threading.Event, interval: Callable[[], float], before_round: Callable[[], None]
    ) -> None:
        """Rounds every ``interval()`` seconds until ``stop`` is set; exceptions are logged, not fatal.

        A round that takes longer than the interval is logged and counted; the next starts at once.
        """
        while not stop.is_set():
            started = time.monotonic()
            try:
                before_round()
                self.run_once()
            except Exception:  # a bug in one round must not stop scaling for good
                log.exception("control loop round failed")
            took, every = time.monotonic() - started, interval()
            if took > every:
                self.telemetry.round_overruns.inc()
                log.warning("control loop round took %.1f s, longer than loop.interval (%g s)", took, every)
            stop.wait(max(0.0, every - took))

    def close(self) -> None:
        if self.elector is not None:
            self.elector.release()
            self.telemetry.is_leader.set(0)
