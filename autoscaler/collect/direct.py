"""Direct scrape: reads each Triton pod's ``/metrics`` and aggregates the window in-process.

This module owns finding the pods (static ``host:port`` targets, or the ready and serving endpoints
of a Service's EndpointSlices through the official ``kubernetes`` client) and putting the round
together: :mod:`autoscaler.collect.scrape` fetches the pages (bounded concurrency, one deadline),
:mod:`autoscaler.collect.exposition` parses them, :mod:`autoscaler.aggregate` keeps the windows.

Rules: a pod that fails to answer within ``timeout`` is left out of the round (it goes stale in the
aggregator) and reported through ``on_error``; if every pod fails, :class:`~autoscaler.collect.SourceError`
is raised. A Service with no endpoints is no data, not an error (it may be scaled to zero). One
round (one ``now``) scrapes each pod once, however many models are read from it.

Each page is read through a backend's names (:mod:`autoscaler.collect.backends`); with ``auto`` the
first page that has one's marker series for the model picks it (logged once); until then a round
reads nothing for that model (no data: the replicas are held).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from kubernetes import client as k8s

from autoscaler.aggregate import PodSample, WindowAggregator, WindowStats
from autoscaler.collect import ErrorCallback, SourceError, ignore_error
from autoscaler.collect.backends import BACKENDS, Backend, detect
from autoscaler.collect.exposition import ExpositionError, parse_exposition
from autoscaler.collect.scrape import Scraper
from autoscaler.kube import KubeError, call

SERVICE_LABEL = "kubernetes.io/service-name"
log = logging.getLogger(__name__)


class TargetLister(Protocol):
    def targets(self) -> dict[str, str]:
        """Pod id -> metrics URL."""
        ...


def metrics_url(target: str) -> str:
    """``host:port`` -> ``http://host:port/metrics``; a URL without a path gets ``/metrics``."""
    if target.startswith(("http://", "https://")):
        scheme, _, rest = target.partition("://")
        return target if "/" in rest else f"{scheme}://{rest}/metrics"
    return f"http://{target}/metrics"


class StaticTargets:
    """A fixed list from ``source.static_targets``; the pod id is the target as written."""

    def __init__(self, targets: Sequence[str]) -> None:
        self._targets = {t: metrics_url(t) for t in targets}

    def targets(self) -> dict[str, str]:
        return dict(self._targets)


class EndpointSliceTargets:
    """The pods behind a Service, from its EndpointSlices (``discovery.k8s.io/v1``).

    An endpoint counts when it is ready or still serving (a terminating pod finishes its streams and
    its finished requests belong to the window). ``ready: null`` means ready, as the API documents.
    """

    def __init__(
        self, api: k8s.DiscoveryV1Api, service: str, namespace: str, port_name: str, timeout: float = 5.0
    ) -> None:
        self._api = api
        self._timeout = timeout
        self._service = service
        self._namespace = namespace
        self._port_name = port_name

    def targets(self) -> dict[str, str]:
        what = f"cannot list EndpointSlices of service {self._namespace}/{self._service}"
        try:
            slices = call(what, self._api.list_namespaced_endpoint_slice, self._namespace,
                          label_selector=f"{SERVICE_LABEL}={self._service}", timeout=self._timeout)  # fmt: skip
        except KubeError as e:
            raise SourceError(str(e)) from e
        found: dict[str, str] = {}
        for eps in slices.items:
            # The label selector is applied here too: a server that ignores it must not leak pods in.
            labels = (eps.metadata.labels if eps.metadata else None) or {}
            if labels.get(SERVICE_LABEL) != self._service:
                continue
            port = next((p.port for p in eps.ports or [] if p.name == self._port_name), None)
            if port is None:
                continue
            for endpoint in eps.endpoints or []:
                conditions = endpoint.conditions
                ready = conditions is None or conditions.ready is not False or conditions.serving is True
                if not ready or not endpoint.addresses:
                    continue
                address = endpoint.addresses[0]
                host = f"[{address}]" if ":" in address else address
                pod = endpoint.target_ref.name if endpoint.target_ref and endpoint.target_ref.name else host
                found[pod] = f"http://{host}:{port}/metrics"
        return found


class DirectSource:
    """Scrapes the pods each round and answers windows from per-model aggregators."""

    def __init__(
        self,
        lister: TargetLister,
        timeout: float,
        stale_after: float,
        on_error: ErrorCallback = ignore_error,
        scraper: Scraper | None = None,
        backend: str = "nlg",
    ) -> None:
        if backend != "auto" and backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: must be auto or one of {', '.join(BACKENDS)}")
        self._backend = backend
        self._backends: dict[str, Backend] = {}
        self._lister = lister
        self._stale_after = stale_after
        self._on_error = on_error
        self._scraper = scraper or Scraper(timeout)
        self._round: tuple[float, dict[str, str], list[str]] | None = None
        self._aggregators: dict[str, WindowAggregator] = {}

    def _scrape(self, now: float) -> tuple[dict[str, str], list[str]]:
        if self._round is not None and self._round[0] == now:
            return self._round[1], self._round[2]
        result = self._scraper.scrape(self._lister.targets())
        for pod, message in result.errors.items():
            self._on_error(pod, message)
        self._round = (now, result.texts, list(result.errors.values()))
        return result.texts, list(result.errors.values())

    def backend(self, model_id: str) -> Backend | None:
        """The backend ``model_id``'s pages are read with: the configured one, or the one detected
        (None while ``auto`` has found none)."""
        if self._backend != "auto":
            return BACKENDS[self._backend]
        return self._backends.get(model_id)

    def _detect(self, model_id: str, texts: dict[str, str]) -> Backend | None:
        found = self.backend(model_id)
        if found is None:
            for pod, text in texts.items():
                found = detect(text, model_id)
                if found is not None:
                    self._backends[model_id] = found
                    log.info("metrics.backend auto: %s found for model %s on %s", found.name, model_id, pod)
                    break
        return found

    def read(self, now: float, model_id: str, time_window: float) -> WindowStats:
        texts, errors = self._scrape(now)
        backend = self._detect(model_id, texts)
        aggregator = self._aggregators.get(model_id)
        if aggregator is None:
            aggregator = self._aggregators[model_id] = WindowAggregator(time_window, self._stale_after)
        aggregator.time_window = time_window
        samples: dict[str, PodSample] = {}
        if backend is None:
            if errors and not texts:
                raise SourceError("; ".join(errors))
            return aggregator.window(now)
        for pod, text in texts.items():
            try:
                samples[pod] = parse_exposition(text, model_id, backend)
            except ExpositionError as e:
                errors = [*errors, f"{pod}: {e}"]
                self._on_error(pod, str(e))
        aggregator.record(now, samples)
        if errors and not samples:
            raise SourceError("; ".join(errors))
        return backend.derive(aggregator.window(now))

    def forget(self, model_id: str) -> None:
        """Drops a model's history (its target was deleted)."""
        self._aggregators.pop(model_id, None)
        self._backends.pop(model_id, None)

    def close(self) -> None:
        self._scraper.close()
