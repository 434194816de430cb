"""The autoscaler's own metrics: prometheus-client instruments on a registry the caller passes in.

This module owns the mapping from loop events to instruments and nothing else (stats are data;
Prometheus is an adapter). Names follow Prometheus conventions: ``_total`` counters, ``_seconds``
durations. Signal values and targets keep the config's units (ms for latencies, requests for
``waiting_per_replica``, a ratio for ``kv_usage``) so that they read against the configured
thresholds; the ``signal`` label names which one.

============================================  =========  ==============================
name                                          type       labels
============================================  =========  ==============================
nlg_autoscaler_desired_replicas               gauge      model
nlg_autoscaler_current_replicas               gauge      model
nlg_autoscaler_signal_value                   gauge      model, signal
nlg_autoscaler_signal_target                  gauge      model, signal
nlg_autoscaler_decisions_total                counter    model, direction (up/down/hold/no_data)
nlg_autoscaler_scrape_errors_total            counter    model, source (direct/prometheus)
nlg_autoscaler_actuation_errors_total         counter    model
nlg_autoscaler_external_changes_total         counter    model
nlg_autoscaler_deferred_total                 counter    model
nlg_autoscaler_idle_pods                      gauge      model
nlg_autoscaler_loop_duration_seconds          histogram
nlg_autoscaler_round_overruns_total           counter
nlg_autoscaler_lease_errors_total             counter
nlg_autoscaler_is_leader                      gauge
nlg_autoscaler_target_store_errors_total      counter
nlg_autoscaler_targets_stale                  gauge
============================================  =========  ==============================

``targets_stale`` is 1 while the stored targets cannot be read: the loop scales the ones read last.
``idle_pods`` counts the pods the last decision found the load did not reach while a target was
missed (:mod:`autoscaler.imbalance`); 0 otherwise.

A deleted target's series are removed (:meth:`Telemetry.forget`), not left at their last values.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler.decide import Decision

_LOOP_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60)


def direction(decision: Decision) -> str:
    if not decision.valid:
        return "no_data"
    if decision.desired > decision.current:
        return "up"
    if decision.desired < decision.current:
        return "down"
    return "hold"


class Telemetry:
    """All instruments, registered on ``registry`` (a fresh one per test, the default one in the CLI)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.desired = Gauge(
            "nlg_autoscaler_desired_replicas", "Replicas the last decision asked for", ["model"],
            registry=registry,
        )  # fmt: skip
        self.current = Gauge(
            "nlg_autoscaler_current_replicas", "Replicas observed on the scale target", ["model"],
            registry=registry,
        )  # fmt: skip
        self.signal_value = Gauge(
            "nlg_autoscaler_signal_value",
            "Value of a signal the last decision used (ms for latencies, as the thresholds)",
            ["model", "signal"],
            registry=registry,
        )
        self.signal_target = Gauge(
            "nlg_autoscaler_signal_target", "Configured target of a signal", ["model", "signal"],
            registry=registry,
        )  # fmt: skip
        self.decisions = Counter(
            "nlg_autoscaler_decisions", "Decisions by direction", ["model", "direction"], registry=registry
        )
        self.scrape_errors = Counter(
            "nlg_autoscaler_scrape_errors", "Failed metric reads", ["model", "source"], registry=registry
        )
        self.actuation_errors = Counter(
            "nlg_autoscaler_actuation_errors", "Failed reads or writes of the scale target", ["model"],
            registry=registry,
        )  # fmt: skip
        self.external_changes = Counter(
            "nlg_autoscaler_external_changes", "Replica changes made outside the autoscaler", ["model"],
            registry=registry,
        )  # fmt: skip
        self.deferred = Counter(
            "nlg_autoscaler_deferred", "Changes the actuator put off (in-place scale-in of a busy model)",
            ["model"], registry=registry,
        )  # fmt: skip
        self.idle_pods = Gauge(
            "nlg_autoscaler_idle_pods",
            "Pods that served no request for a whole window while the others missed a target (last decision)",
            ["model"], registry=registry,
        )  # fmt: skip
        self.loop_duration = Histogram(
            "nlg_autoscaler_loop_duration_seconds", "One collect-decide-actuate round over all targets",
            buckets=_LOOP_BUCKETS, registry=registry,
        )  # fmt: skip
        self.round_overruns = Counter(
            "nlg_autoscaler_round_overruns", "Rounds that took longer than loop.interval",
            registry=registry,
        )  # fmt: skip
        self.lease_errors = Counter(
            "nlg_autoscaler_lease_errors", "Lease reads or writes that failed (not lost races)",
            registry=registry,
        )  # fmt: skip
        self.is_leader = Gauge(
            "nlg_autoscaler_is_leader", "1 while this replica holds the leader Lease (or election is off)",
            registry=registry,
        )  # fmt: skip
        self.target_store_errors = Counter(
            "nlg_autoscaler_target_store_errors", "Rounds whose read of the stored targets failed",
            registry=registry,
        )  # fmt: skip
        self.targets_stale = Gauge(
            "nlg_autoscaler_targets_stale", "1 while the stored targets cannot be read (the last ones read are used)",
            registry=registry,
        )  # fmt: skip

    def bind(self, model: str, source: str, targets: Mapping[str, float]) -> None:
        """Creates a model's series up front, so that a zero reads as zero rather than absent."""
        for name in ("up", "down", "hold", "no_data"):
            self.decisions.labels(model, name)
        self.scrape_errors.labels(model, source)
        self.actuation_errors.labels(model)
        self.external_changes.labels(model)
        self.deferred.labels(model)
        self.idle_pods.labels(model)
        for signal, target in targets.items():
            self.signal_target.labels(model, signal).set(target)

    def forget_signals(self, model: str) -> None:
        """Removes a target's signal series (its policy changed: some signals may be gone)."""
        for metric in (self.signal_value, self.signal_target):
            metric.remove_by_labels({"model": model})

    def forget(self, model: str) -> None:
        """Removes every series of a deleted target."""
        for metric in (
            self.desired, self.current, self.signal_value, self.signal_target, self.decisions,
            self.scrape_errors, self.actuation_errors, self.external_changes, self.deferred, self.idle_pods,
        ):  # fmt: skip
            metric.remove_by_labels({"model": model})

    def decided(self, model: str, decision: Decision) -> None:
        self.desired.labels(model).set(decision.desired)
        self.idle_pods.labels(model).set(len(decision.idle_pods))
        self.decisions.labels(model, direction(decision)).inc()
        for signal, value in decision.values.items():
            self.signal_value.labels(model, signal).set(value)

    def observed(self, model: str, replicas: int, external: bool) -> None:
        self.current.labels(model).set(replicas)
        if external:
            self.external_changes.labels(model).inc()
