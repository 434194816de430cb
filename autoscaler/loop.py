"""The control loop: collect -> aggregate -> decide -> actuate for every scaling target, each round.

This module is the only code that reads the clock (``clock``, ``time.time`` by default, injectable so
tests drive it). It owns the round; the targets, their policy state and recent decisions live in
:class:`autoscaler.targets.Targets` (``Controller.targets``), which the REST API shares.

A round: the elector's tick, then the targets are read again from their store (one that cannot be
read leaves the ones read last, logged and counted); a follower (another replica holds the Lease)
stops there, its API listing what it read. Then, per target: observe the replicas (a change made by someone else is
logged and taken as current), read the window (a source that fails gives an empty window: the
policy holds, the error is counted), decide, and if the decision differs from what was observed,
actuate. A failed actuation is counted and the policy state keeps the observed replicas, so the
next round decides again. A leader past its renew deadline stops before its next target.
Every call the parts make is bounded, so a round ends;
one longer than the interval is logged and counted, and :meth:`Controller.run_once` returns what
failed in it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from autoscaler.actuate import ActuationError, Actuator, Deferred
from autoscaler.aggregate import WindowStats
from autoscaler.collect import SourceError, WindowSource
from autoscaler.config import Registration, ScalerSpec
from autoscaler.decide import Decision
from autoscaler.leader import LeaseElector
from autoscaler.policy import Policy, build_policy
from autoscaler.target_store import TargetStore
from autoscaler.targets import Target, Targets
from autoscaler.telemetry import Telemetry

log = logging.getLogger(__name__)


class Controller:
    """Runs rounds over ``targets``; the API registers and removes targets concurrently."""

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
        store: TargetStore | None = None,
        identity: str = "",
    ) -> None:
        """``target_name`` maps a registration to what the actuator scales (its model, for Triton);
        ``policies`` builds a target's policy from its ``scaler`` (``scaler.type`` picks it);
        ``store`` keeps the API's targets (in memory when not given); ``identity`` names this
        replica (the pod) where no elector does."""
        self.source = source
        self.identity = identity
        self.actuator = actuator
        self.telemetry = telemetry
        self.elector = elector
        self._clock = clock
        self.targets = Targets(
            telemetry, store=store, source_kind=source_kind, target_name=target_name, policies=policies,
            on_remove=self._forget,
        )  # fmt: skip
        telemetry.is_leader.set(0 if elector else 1)

    def leader(self) -> str:
        """Who leads now, by this replica's clock: its own name while it may act, else the replica it
        last read in the Lease ("" when none is known). Without leader election, this replica."""
        if self.elector is None:
            return self.identity
        return self.elector.leader_at(self._clock())

    def _forget(self, model_id: str) -> None:
        forget = getattr(self.source, "forget", None)
        if forget is not None:
            forget(model_id)

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
                # A standby reads the targets too, so that its API shows them.
                self.targets.sync()
                return [f"leader election: {self.elector.error}"] if self.elector.error else []
        errors: list[str] = []
        if not self.targets.sync():
            errors.append(f"targets: {self.targets.stale}")
        # The lock is not held over the network calls, so the API answers while a round waits on one;
        # a target removed meanwhile finishes this round unseen.
        targets = self.targets.all()
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
        state = (target.state or policy.initial(observed.replicas, now)).with_replicas(observed.replicas)
        note = ""
        try:
            window = self.source.read(now, model, target.spec.time_window)
            target.last_error = None
        except SourceError as e:
            self.telemetry.scrape_errors.labels(model, self.targets.source_kind).inc()
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
            # The gauge says what the API's view says from now on, not the count before this round acted.
            self.telemetry.observed(model, actual, external=False)
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
