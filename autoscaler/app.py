"""Wiring: builds the source, actuator, elector, loop, API and metrics server from one configuration.

This module owns the lifecycle (start, apply a reloaded config, stop) and nothing else. A reload
rebuilds only what changed: a new ``source`` or ``loop.interval`` gets a new metric source, a new
``actuator`` a new actuator, a new ``leader_election`` a new elector, a new ``target_store`` a new
store of the API's targets (read at the next round); the scaler changes in place, keeping the
policy state. ``api`` and ``metrics`` changes need a restart (their ports are bound).

Every network call the loop makes is bounded by :func:`call_timeout`, half the loop interval (at
most 10 s), so a round ends however the Kubernetes API, Triton or a pod fails. Both ports are bound
before anything starts: one that cannot be bound is a :class:`StartupError` naming it.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, start_http_server

from autoscaler.actuate import Actuator, RecordingActuator
from autoscaler.actuate.kubernetes import DeploymentScaler
from autoscaler.actuate.triton import TritonInstanceScaler
from autoscaler.aggregate import stale_after
from autoscaler.api import create_app
from autoscaler.collect import WindowSource
from autoscaler.collect.direct import DirectSource, EndpointSliceTargets, StaticTargets
from autoscaler.collect.promql import PrometheusSource
from autoscaler.config import AutoscalerConfig, ConfigError, Registration, read_api_token
from autoscaler.kube import api_client, new_client
from autoscaler.leader import LeaseElector
from autoscaler.loop import Controller
from autoscaler.reload import ConfigWatcher
from autoscaler.target_store import ConfigMapStore, MemoryStore, TargetStore
from autoscaler.telemetry import Telemetry

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The service cannot start (a port it cannot bind); the message is one line saying which."""


def call_timeout(config: AutoscalerConfig) -> float:
    """The bound on one call to the Kubernetes API or Triton: half the loop interval, at most 10 s."""
    return min(10.0, config.loop.interval / 2)


def default_identity() -> str:
    """The pod name in Kubernetes (``POD_NAME`` from the downward API), else host and pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class App:
    """The whole autoscaler; ``kube`` is an ApiClient to use instead of in-cluster/kubeconfig discovery."""

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        watcher: ConfigWatcher | None = None,
        registry: CollectorRegistry | None = None,
        kube: k8s.ApiClient | None = None,
        kubeconfig: str | None = None,
        clock: Callable[[], float] = time.time,
        identity: str | None = None,
    ) -> None:
        self.config = config
        self.watcher = watcher
        self.registry = registry if registry is not None else CollectorRegistry()
        self.telemetry = Telemetry(self.registry)
        self.identity = identity or default_identity()
        # A client handed in gets this module's settings too (no retries, the User-Agent).
        self._kube = new_client(copy.deepcopy(kube.configuration)) if kube is not None else None
        self._kubeconfig = kubeconfig
        self.controller = Controller(
            self._source(config),
            self._actuator(config),
            self.telemetry,
            source_kind=config.source.kind,
            clock=clock,
            elector=self._elector(config),
            target_name=self._target_name(config),
            store=self._store(config),
            identity=self.identity,
        )
        self.controller.targets.set_config_target(config.model_id, config.scaler, self._config_target(config))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._api_server: uvicorn.Server | None = None
        self._metrics_server: Any = None

    # -- building ------------------------------------------------------------------------------

    def kube(self) -> k8s.ApiClient:
        if self._kube is None:
            self._kube = api_client(self._kubeconfig)
        return self._kube

    def _on_scrape_error(self, target: str, message: str) -> None:
        log.warning("metric source: %s", message)

    def _source(self, config: AutoscalerConfig) -> WindowSource:
        spec = config.source
        if spec.kind == "prometheus":
            return PrometheusSource(
                spec.prometheus_url, spec.timeout, on_error=self._on_scrape_error, backend=config.metrics.backend
            )
        lister: StaticTargets | EndpointSliceTargets
        if spec.static_targets:
            lister = StaticTargets(spec.static_targets)
        else:
            api = k8s.DiscoveryV1Api(self.kube())
            timeout = min(spec.timeout, call_timeout(config))
            lister = EndpointSliceTargets(api, spec.service, spec.namespace, spec.port_name, timeout)
        # A pod missing for two and a half rounds is gone: its gauges stop counting.
        stale = stale_after(config.loop.interval, spec.timeout)
        return DirectSource(lister, spec.timeout, stale, on_error=self._on_scrape_error, backend=config.metrics.backend)

    def _actuator(self, config: AutoscalerConfig) -> Actuator:
        spec = config.actuator
        timeout = call_timeout(config)
        if spec.kind == "kubernetes":
            return DeploymentScaler(k8s.AppsV1Api(self.kube()), spec.namespace, timeout=timeout)
        if spec.kind == "triton":
            return TritonInstanceScaler(spec.triton_url, spec.triton_metrics_url, timeout=timeout)
        return RecordingActuator(initial=max(1, config.scaler.min_deployment_count))

    def _elector(self, config: AutoscalerConfig) -> LeaseElector | None:
        spec = config.leader_election
        if not spec.enabled:
            return None
        api = k8s.CoordinationV1Api(self.kube())
        return LeaseElector(
            api, spec.lease_name, spec.namespace, self.identity, spec.lease_duration,
            retry_period=config.loop.interval, timeout=call_timeout(config),
        )  # fmt: skip

    def _store(self, config: AutoscalerConfig) -> TargetStore:
        spec = config.target_store
        if spec.kind == "memory":
            return MemoryStore()
        api = k8s.CoreV1Api(self.kube())
        # A write through the API may retry conflicts for one loop interval, what its 503's Retry-After says.
        return ConfigMapStore(api, spec.configmap, spec.namespace, timeout=call_timeout(config),
                              budget=config.loop.interval)  # fmt: skip

    @staticmethod
    def _config_target(config: AutoscalerConfig) -> str:
        return config.actuator.deployment if config.actuator.kind == "kubernetes" else config.model_id

    @staticmethod
    def _target_name(config: AutoscalerConfig) -> Callable[[Registration], str]:
        if config.actuator.kind == "kubernetes":
            return lambda r: r.target_name
        return lambda r: r.model_id

    # -- reload ----------------------------------------------------------------------------------

    def apply(self, new: AutoscalerConfig) -> None:
        """Applies a reloaded configuration between two rounds (called from the loop thread); one whose
        target an API target already scales is refused whole, and the running one stays."""
        old, controller = self.config, self.controller
        targets = controller.targets
        conflict = targets.config_target_conflict(new.model_id, self._config_target(new))
        if conflict is not None:
            if self.watcher is not None:
                self.watcher.refuse(conflict)
            else:
                log.error("configuration not applied: %s", conflict)
            return
        rebuild = (new.source, new.loop.interval, new.metrics.backend)
        if rebuild != (old.source, old.loop.interval, old.metrics.backend):
            controller.source.close()
            controller.source = self._source(new)
            targets.source_kind = new.source.kind
        interval_changed = new.loop.interval != old.loop.interval
        if new.actuator != old.actuator or interval_changed:
            controller.actuator.close()
            controller.actuator = self._actuator(new)
            targets.target_name = self._target_name(new)
        if new.leader_election != old.leader_election or interval_changed:
            controller.close()
            controller.elector = self._elector(new)
        if new.target_store != old.target_store or interval_changed:
            targets.store = self._store(new)
        targets.set_config_target(new.model_id, new.scaler, self._config_target(new))
        if new.api != old.api or new.metrics != old.metrics:
            log.warning("api and metrics settings changed: they take effect after a restart")
        self.config = new

    def _before_round(self) -> None:
        if self.watcher is not None:
            new = self.watcher.poll()
            if new is not None:
                self.apply(new)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> App:
        """Binds both ports, then starts the metrics server, the API and the loop, each on its own thread.

        Raises :class:`StartupError` (nothing left running) when a port cannot be bound.
        """
        try:
            token = read_api_token(self.config.api)
        except ConfigError as e:
            raise SystemExit("; ".join(e.errors)) from e
        api_socket = None
        if self.config.api.port:
            api_socket = _bind(self.config.api.host, self.config.api.port, "api.port", "the management API")
        if self.config.metrics.port:
            try:
                self._metrics_server, _ = start_http_server(
                    self.config.metrics.port, addr=self.config.metrics.host, registry=self.registry
                )
            except OSError as e:
                if api_socket is not None:
                    api_socket.close()
                raise _bind_error(self.config.metrics.host, self.config.metrics.port, "metrics.port",
                                  "the autoscaler's /metrics", e) from e  # fmt: skip
        if api_socket is not None:
            app = create_app(self.controller, token, auth=self.config.api.auth, retry_after=self.config.loop.interval,
                             deployments=self.config.api.deployments)
            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            server = self._api_server = uvicorn.Server(config)
            self._spawn("api", lambda: server.run(sockets=[api_socket]))
            deadline = time.monotonic() + 10
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.02)
        self._spawn("loop", lambda: self.controller.run(self._stop, self._interval, self._before_round))
        return self

    def _interval(self) -> float:
        return self.config.loop.interval

    def _spawn(self, name: str, target: Callable[[], object]) -> None:
        thread = threading.Thread(target=target, name=f"autoscaler-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stops the loop after its round, releases the Lease, stops the servers; safe to call twice."""
        self._stop.set()
        if self._api_server is not None:
            self._api_server.should_exit = True
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()
        self.controller.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        self.controller.source.close()
        self.controller.actuator.close()

    def request_stop(self) -> None:
        """Makes :meth:`wait` return (safe from a signal handler); :meth:`stop` does the stopping."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until a stop is requested (True) or ``timeout`` passes (False)."""
        return self._stop.wait(timeout)

    def __enter__(self) -> App:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int, key: str, purpose: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise _bind_error(host, port, key, purpose, e) from e
    return sock


def _bind_error(host: str, port: int, key: str, purpose: str, e: OSError) -> StartupError:
    return StartupError(
        f"{key} = {port} ({purpose}): cannot listen on {host}:{port}: {e.strerror or e}; "
        f"stop what uses it or choose another port"
    )
