"""The autoscaler's configuration: frozen, typed objects parsed from YAML, every problem reported at once.

This module owns the schema written down in ``docs/autoscaler-config.md`` (the contract with the Helm
chart) and nothing else: no I/O besides reading the file in :func:`load_config` and the engine profile
a planner names (so that ``--check`` and a reload refuse a missing or bad one).

Public API (imported by the Helm chart's tests and the simulator; keep stable):

- :class:`AutoscalerConfig` with :class:`ScalerSpec`, :class:`PlannerSpec`, :class:`RateLimit`, :class:`Signal`,
  :class:`SourceSpec`, :class:`ActuatorSpec`, :class:`LoopSpec`, :class:`LeaderElectionSpec`,
  :class:`ApiSpec`, :class:`MetricsSpec`, :class:`TargetStoreSpec`; each has ``validate(path) -> list[str]``.
- :class:`Registration`: the thesis's Listing 6.1 body of ``POST /deployment/``.
- :func:`parse_config` ``(data: Mapping) -> AutoscalerConfig``, :func:`load_config` ``(path)``,
  :func:`parse_scaler` ``(data, path="scaler") -> ScalerSpec``,
  :func:`parse_registration` ``(data) -> Registration``; all raise :class:`ConfigError`, whose
  ``errors`` list names each bad key path (``scaler.threshold``) with its value and how to fix it.
- :func:`to_dict` turns any of these objects back into plain YAML-able data (defaults included), so
  the chart's ``values.yaml`` can be compared with the code's defaults.
- :data:`SIGNAL_METRICS`: the names allowed in ``scaler.signals[].metric``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

import yaml

from autoscaler import _schema as s
from autoscaler.collect.backends import BACKEND_NAMES
from autoscaler.profile import load_profile
from autoscaler.safe_parse import load_yaml

PolicyType = Literal["request", "pertoken", "planner"]
#: ``scaler.type`` values; ``planner`` needs ``scaler.planner.profile``.
POLICY_TYPES: Final[tuple[str, ...]] = ("request", "pertoken", "planner")
SourceKind = Literal["direct", "prometheus"]
ActuatorKind = Literal["kubernetes", "triton", "none"]
ApiAuth = Literal["token", "none"]
TargetStoreKind = Literal["memory", "configmap"]
Select = Literal["max", "min"]

#: Upper bounds of every number (documented in docs/autoscaler-config.md).
MAX_REPLICAS: Final = 1000
MAX_PERCENT: Final = 10_000.0
MAX_DURATION: Final = 86_400.0  # s: windows and periods
MAX_INTERVAL: Final = 3600.0  # s: loop interval, lease duration, source timeout
MAX_TARGET: Final = 3_600_000.0  # ms for latencies, requests for waiting_per_replica
MAX_TOKENS: Final = 1_000_000.0
#: ConfigError lists at most this many problems (then says how many more).
MAX_ERRORS: Final = 50
MAX_FILE_BYTES: Final = 1 << 20

#: Signals a scaler may combine; latencies in ms, ``waiting_per_replica`` in requests, ``kv_usage`` 0..1.
SIGNAL_METRICS: Final[tuple[str, ...]] = (
    "request_mean", "request_p50", "request_p90", "request_p99",
    "pertoken_mean", "pertoken_p50", "pertoken_p90", "pertoken_p99",
    "ttft_mean", "ttft_p99", "itl_mean", "itl_p99",
    "waiting_per_replica", "kv_usage", "queue_mean",
)  # fmt: skip


class ConfigError(ValueError):
    """Raised with every problem found; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        more = len(errors) - MAX_ERRORS
        self.errors = list(errors[:MAX_ERRORS]) + ([f"... and {more} more problems"] if more > 0 else [])
        super().__init__("invalid autoscaler configuration:\n  - " + "\n  - ".join(self.errors))


@dataclass(frozen=True)
class RateLimit:
    """Replicas added or removed per ``period`` s: ``max_pods`` or ``max_percent``% of the replicas at
    the period start, the larger (``select: max``) or the smaller (``select: min``) of the two.

    HPA's ``selectPolicy``. With ``max`` both limits 0 disables the direction; with ``min`` either does.
    """

    max_pods: int
    max_percent: float
    period: float
    select: Select = "max"

    def validate(self, path: str) -> list[str]:
        return [
            *s.between(f"{path}.max_pods", self.max_pods, 0, MAX_REPLICAS),
            *s.between(f"{path}.max_percent", self.max_percent, 0, MAX_PERCENT),
            *s.positive(f"{path}.period", self.period, MAX_DURATION),
            *s.one_of(f"{path}.select", self.select, ("max", "min")),
        ]


@dataclass(frozen=True)
class Signal:
    """A further signal combined with the primary one: desired replicas = max over signals."""

    metric: str
    target: float

    def validate(self, path: str) -> list[str]:
        errors = s.one_of(f"{path}.metric", self.metric, SIGNAL_METRICS)
        errors += s.positive(f"{path}.target", self.target, MAX_TARGET)
        if self.metric == "kv_usage" and self.target > 1:
            errors.append(f"{path}.target = {self.target!r}: kv_usage is a ratio, use a value in (0, 1]")
        return errors


@dataclass(frozen=True)
class PlannerSpec:
    """The planner's inputs (``scaler.type: planner``): an engine profile, the SLO, the start-up time, and
    the one choice between cost and risk, ``headroom``: the share of the capacity the pods have shown that
    each replica is planned to carry. Latency limits in ms, durations in s; ``startup: 0`` takes the
    profile's ``startup_s``. Everything else the planner learns from the pods (docs/autoscaler.md).
    """

    profile: str = ""
    per_token_slo: float = 50.0
    ttft_slo: float = 2000.0
    slo_percentile: float = 0.99
    startup: float = 0.0
    headroom: float = 0.85

    #: Keys the planner had before it learned capacity from the pods, and what replaced each.
    RETIRED_KEYS: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(
            ("plan_fraction", "trend_window", "burst_lookback", "burst_quantile", "kv_usage_high"),
            "the planner learns what a replica carries from the SLO's attainment (docs/autoscaler.md, 'The planner')",
        ),
        "drain_time": "requests waiting are drained over one start-up",
        "prompt_tokens": "the pods' counters measure the mix",
        "output_tokens": "the pods' counters measure the mix",
    }

    def validate(self, path: str = "scaler.planner") -> list[str]:
        """Checks the numbers and reads the profile file, naming what is missing or bad in it."""
        errors = s.positive(f"{path}.per_token_slo", self.per_token_slo, MAX_TARGET)
        errors += s.positive(f"{path}.ttft_slo", self.ttft_slo, MAX_TARGET)
        errors += s.between(f"{path}.startup", self.startup, 0, MAX_DURATION)
        for key in ("slo_percentile", "headroom"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                errors.append(f"{path}.{key} = {s.show(value)}: must be in (0, 1]")
        if not self.profile.strip():
            errors.append(
                f"{path}.profile = {s.show(self.profile)}: required, the engine profile JSON that "
                "`python -m nlgsim profile` writes (benchmarks/profiles/ holds some)"
            )
        else:
            try:
                load_profile(self.profile)
            except ValueError as e:
                errors.append(f"{path}.profile: {e}")
        return errors


@dataclass(frozen=True)
class ScalerSpec:
    """The thesis's Listing 6.1 ``scaler`` plus HPA's knobs. Thresholds in ms, durations in s."""

    type: PolicyType = "pertoken"
    min_deployment_count: int = 1
    max_deployment_count: int = 4
    time_window: float = 60.0
    threshold: float = 25.0
    tolerance: float = 0.1
    stabilization_window: float = 300.0
    scale_up: RateLimit = RateLimit(max_pods=4, max_percent=100.0, period=15.0)
    # Removes one pod a minute: a scale-down that overshoots costs more than one that is slow.
    scale_down: RateLimit = RateLimit(max_pods=1, max_percent=100.0, period=60.0, select="min")
    signals: tuple[Signal, ...] = ()
    planner: PlannerSpec = PlannerSpec()

    def validate(self, path: str = "scaler") -> list[str]:
        errors = s.one_of(f"{path}.type", self.type, POLICY_TYPES)
        if self.type == "planner":
            errors += self.planner.validate(f"{path}.planner")
        if self.min_deployment_count == 0:
            errors.append(
                f"{path}.min_deployment_count = 0: must be >= 1: this autoscaler cannot scale up from zero "
                "(with no pod there is no metric to read); scale to zero with KEDA (the chart's "
                "scaling.mode=keda), whose activation starts the first replica on a Prometheus query"
            )
        else:
            errors += s.between(f"{path}.min_deployment_count", self.min_deployment_count, 1, MAX_REPLICAS)
        errors += s.between(f"{path}.max_deployment_count", self.max_deployment_count, 1, MAX_REPLICAS)
        if self.max_deployment_count < self.min_deployment_count <= MAX_REPLICAS:
            errors.append(
                f"{path}.max_deployment_count = {self.max_deployment_count}: must be >= "
                f"{path}.min_deployment_count ({self.min_deployment_count})"
            )
        errors += s.positive(f"{path}.time_window", self.time_window, MAX_DURATION)
        errors += s.positive(f"{path}.threshold", self.threshold, MAX_TARGET)
        if not 0 <= self.tolerance < 1:
            errors.append(f"{path}.tolerance = {self.tolerance!r}: must be in [0, 1), e.g. 0.1 for 10%")
        errors += s.between(f"{path}.stabilization_window", self.stabilization_window, 0, MAX_DURATION)
        errors += self.scale_up.validate(f"{path}.scale_up")
        errors += self.scale_down.validate(f"{path}.scale_down")
        seen: set[str] = set()
        for i, signal in enumerate(self.signals):
            errors += signal.validate(f"{path}.signals[{i}]")
            if signal.metric in seen:
                errors.append(f"{path}.signals[{i}].metric = {s.show(signal.metric)}: listed twice, keep one")
            seen.add(signal.metric)
        return errors


@dataclass(frozen=True)
class SourceSpec:
    """Where metrics come from: Triton pods scraped directly, or a Prometheus server."""

    kind: SourceKind = "direct"
    static_targets: tuple[str, ...] = ()
    service: str = "triton"
    namespace: str = "default"
    port_name: str = "metrics"
    prometheus_url: str = "http://prometheus:9090"
    timeout: float = 2.0

    def validate(self, path: str = "source") -> list[str]:
        errors = s.one_of(f"{path}.kind", self.kind, ("direct", "prometheus"))
        for i, target in enumerate(self.static_targets):
            errors += s.host_port(f"{path}.static_targets[{i}]", target)
        errors += s.k8s_name(f"{path}.service", self.service)
        errors += s.k8s_name(f"{path}.namespace", self.namespace)
        errors += s.non_empty(f"{path}.port_name", self.port_name)
        errors += s.printable(f"{path}.port_name", self.port_name, 15)
        errors += s.http_url(f"{path}.prometheus_url", self.prometheus_url)
        errors += s.positive(f"{path}.timeout", self.timeout, MAX_INTERVAL)
        return errors


@dataclass(frozen=True)
class ActuatorSpec:
    """What is scaled: a Deployment's replicas, Triton's instance count, or nothing (dry run)."""

    kind: ActuatorKind = "kubernetes"
    deployment: str = "triton"
    namespace: str = "default"
    triton_url: str = "http://127.0.0.1:8000"
    # The same server's metrics: a scale-in waits until the model has no request in flight there.
    triton_metrics_url: str = "http://127.0.0.1:8002/metrics"

    def validate(self, path: str = "actuator") -> list[str]:
        errors = s.one_of(f"{path}.kind", self.kind, ("kubernetes", "triton", "none"))
        errors += s.k8s_name(f"{path}.deployment", self.deployment)
        errors += s.k8s_name(f"{path}.namespace", self.namespace)
        errors += s.http_url(f"{path}.triton_url", self.triton_url)
        errors += s.http_url(f"{path}.triton_metrics_url", self.triton_metrics_url)
        return errors


@dataclass(frozen=True)
class LoopSpec:
    """One collect -> aggregate -> decide -> actuate round every ``interval`` seconds."""

    interval: float = 5.0

    def validate(self, path: str = "loop") -> list[str]:
        return s.positive(f"{path}.interval", self.interval, MAX_INTERVAL)


@dataclass(frozen=True)
class LeaderElectionSpec:
    """A coordination.k8s.io Lease that only one autoscaler replica holds at a time."""

    enabled: bool = False
    lease_name: str = "nlg-autoscaler"
    namespace: str = "default"
    lease_duration: float = 15.0

    def validate(self, path: str = "leader_election") -> list[str]:
        errors = s.k8s_name(f"{path}.lease_name", self.lease_name)
        errors += s.k8s_name(f"{path}.namespace", self.namespace)
        errors += s.positive(f"{path}.lease_duration", self.lease_duration, MAX_INTERVAL)
        return errors


@dataclass(frozen=True)
class TargetStoreSpec:
    """Where the REST API's targets are kept: this process's memory (lost on a restart), or a ConfigMap
    that every replica reads (``configmap``, in ``namespace``; the chart creates it)."""

    kind: TargetStoreKind = "memory"
    configmap: str = "nlg-autoscaler-targets"
    namespace: str = "default"

    def validate(self, path: str = "target_store") -> list[str]:
        errors = s.one_of(f"{path}.kind", self.kind, ("memory", "configmap"))
        errors += s.k8s_name(f"{path}.configmap", self.configmap)
        errors += s.k8s_name(f"{path}.namespace", self.namespace)
        return errors


@dataclass(frozen=True)
class ApiSpec:
    """The management REST API; ``port: 0`` turns it off.

    With ``token_file`` every ``/deployment`` call needs its bearer token, on any ``host``. Without
    one the API listens on loopback only; it answers reads, and writes only with ``auth: none``.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    auth: ApiAuth = "token"
    token_file: str = ""
    #: The Deployments a target registered through the API may scale; empty: any (what the autoscaler's
    #: RBAC allows). The chart lists exactly the ones its Role lets it scale, so a target it could
    #: never scale is refused when it is written, not with a 403 every round.
    deployments: tuple[str, ...] = ()

    def validate(self, path: str = "api") -> list[str]:
        errors = [*s.non_empty(f"{path}.host", self.host), *s.printable(f"{path}.host", self.host, 253)]
        errors += s.port(f"{path}.port", self.port)
        for i, name in enumerate(self.deployments):
            errors += s.k8s_name(f"{path}.deployments[{i}]", name)
        errors += s.one_of(f"{path}.auth", self.auth, ("token", "none"))
        if self.auth == "none" and self.token_file:
            errors.append(
                f"{path}.auth = 'none': contradicts {path}.token_file = {s.show(self.token_file)}; "
                "remove one (auth: none without a token_file is an API open to loopback)"
            )
        elif self.port and not self.token_file and not s.is_loopback(self.host):
            errors.append(
                f"{path}.host = {s.show(self.host)}: without {path}.token_file the API listens on "
                f"loopback only (127.0.0.1, ::1, localhost); set {path}.token_file to listen "
                f"on {s.show(self.host)}, or {path}.port: 0 to turn the API off"
            )
        return errors


@dataclass(frozen=True)
class MetricsSpec:
    """The autoscaler's own ``/metrics``; ``port: 0`` turns it off. Its own ``host``, apart from the
    API's: a read-only endpoint that Prometheus scrapes from elsewhere may listen beyond loopback
    (the chart sets 0.0.0.0) while the API stays on it."""

    host: str = "127.0.0.1"
    port: int = 9100
    #: Whose metric names the Triton pods carry (docs/backends.md); ``auto`` detects them.
    backend: str = "auto"

    def validate(self, path: str = "metrics") -> list[str]:
        errors = [*s.non_empty(f"{path}.host", self.host), *s.printable(f"{path}.host", self.host, 253)]
        errors += s.one_of(f"{path}.backend", self.backend, BACKEND_NAMES)
        return errors + s.port(f"{path}.port", self.port)


@dataclass(frozen=True)
class AutoscalerConfig:
    """The whole file. ``model_id`` is the Triton model (metric label ``model``) that is scaled."""

    model_id: str = "gpt2"
    scaler: ScalerSpec = ScalerSpec()
    source: SourceSpec = SourceSpec()
    actuator: ActuatorSpec = ActuatorSpec()
    loop: LoopSpec = LoopSpec()
    leader_election: LeaderElectionSpec = LeaderElectionSpec()
    api: ApiSpec = ApiSpec()
    metrics: MetricsSpec = MetricsSpec()
    target_store: TargetStoreSpec = TargetStoreSpec()

    def validate(self) -> list[str]:
        cross: list[str] = []
        election = self.leader_election
        if election.enabled and self.api.port and self.target_store.kind == "memory":
            cross.append(
                "target_store.kind = 'memory': with leader_election.enabled and the API on, a target "
                "registered on one replica is unknown to the others; set target_store.kind: configmap"
            )
        if election.enabled and election.lease_duration <= self.loop.interval:
            cross.append(
                f"leader_election.lease_duration = {election.lease_duration!r}: must be greater than "
                f"loop.interval ({self.loop.interval}), or the lease expires between renewals"
            )
        return [
            *cross,
            *s.model_name("model_id", self.model_id),
            *self.scaler.validate("scaler"),
            *self.source.validate("source"),
            *self.actuator.validate("actuator"),
            *self.loop.validate("loop"),
            *self.leader_election.validate("leader_election"),
            *self.api.validate("api"),
            *self.metrics.validate("metrics"),
            *self.target_store.validate("target_store"),
        ]


@dataclass(frozen=True)
class Registration:
    """Body of ``POST /deployment/`` (thesis Listing 6.1); ``deployment`` defaults to ``model_id``."""

    model_id: str
    scaler: ScalerSpec = field(default_factory=ScalerSpec)
    instance_type: str = ""
    engine_type: str = "triton"
    deployment: str = ""

    def validate(self) -> list[str]:
        errors = [*s.model_name("model_id", self.model_id), *self.scaler.validate("scaler")]
        if self.scaler.type == "planner":
            # Its profile is a file on the autoscaler's disk: the API neither reads nor names such paths.
            errors = [e for e in errors if not e.startswith("scaler.planner.")]
            errors.append("scaler.type = 'planner': set it in the config file, not through the API")
        errors += s.printable("instance_type", self.instance_type, 128)
        errors += s.one_of("engine_type", self.engine_type, ("triton",))
        if self.deployment:
            errors += s.k8s_name("deployment", self.deployment)
        return errors

    @property
    def target_name(self) -> str:
        """The Deployment (kubernetes actuator) scaled for this model."""
        return self.deployment or self.model_id


def _build(cls: type[Any], data: Any, path: str, errors: list[str]) -> Any:
    """Reads a dataclass from a mapping: unknown keys and wrong types become errors, defaults fill gaps.

    Nested dataclass fields recurse; ``RateLimit`` fields take their defaults from the parent's default
    instance, so ``scale_down: {period: 30}`` keeps ``max_pods: 1``.
    """
    nested = (RateLimit, Signal, PlannerSpec, ScalerSpec, SourceSpec, ActuatorSpec, LoopSpec, LeaderElectionSpec,
              ApiSpec, MetricsSpec, TargetStoreSpec)  # fmt: skip
    return s.build(cls, data, path, errors, nested)


def _finish(obj: Any, type_errors: list[str]) -> Any:
    errors = type_errors + [e for e in obj.validate() if not s.already_reported(e, type_errors)]
    if errors:
        raise ConfigError(errors)
    return obj


def parse_config(data: Mapping[str, Any] | None) -> AutoscalerConfig:
    """Parses the YAML document (already loaded); ``None`` (an empty file) gives all defaults."""
    errors: list[str] = []
    config: AutoscalerConfig = _build(AutoscalerConfig, {} if data is None else data, "", errors)
    return _finish(config, errors)  # type: ignore[no-any-return]


def parse_scaler(data: Mapping[str, Any] | None, path: str = "scaler") -> ScalerSpec:
    """Parses a ``scaler`` object alone (the simulator's and the REST API's entry point)."""
    errors: list[str] = []
    spec: ScalerSpec = _build(ScalerSpec, {} if data is None else data, path, errors)
    type_errors = list(errors)
    errors += [e for e in spec.validate(path) if not s.already_reported(e, type_errors)]
    if errors:
        raise ConfigError(errors)
    return spec


def parse_registration(data: Mapping[str, Any]) -> Registration:
    """Parses a Listing 6.1 body; ``model_id`` is required."""
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise ConfigError([f"body = {s.show(data)}: must be a JSON object with model_id and scaler"])
    if "model_id" not in data:
        errors.append("model_id: required, the Triton model to scale (e.g. 'gpt2')")
    registration: Registration = _build(Registration, {"model_id": "", **data}, "", errors)
    return _finish(registration, errors)  # type: ignore[no-any-return]


def load_config(path: str | os.PathLike[str]) -> AutoscalerConfig:
    """Reads and parses a YAML file; whatever is wrong with the file is a :class:`ConfigError` too."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError([f"{name}: cannot read the config file: {e.strerror or e}"]) from e
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError([f"{name}: larger than {MAX_FILE_BYTES} bytes; a config file is a few kB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 1].hex()
        raise ConfigError([f"{name}: not UTF-8 (byte 0x{bad} at offset {e.start}); save it as UTF-8"]) from e
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"{name}: not valid YAML: {e}"]) from e
    except RecursionError as e:
        raise ConfigError([f"{name}: nested too deeply to be a config file"]) from e
    except ValueError as e:  # e.g. a date that does not exist (2024-02-30)
        raise ConfigError([f"{name}: a value cannot be read: {e}"]) from e
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError([f"{name}: top level is {type(data).__name__}, must be a mapping"])
    return parse_config(data)


def read_api_token(spec: ApiSpec, path: str = "api") -> str | None:
    """The bearer token in ``spec.token_file``; None without one or with the API off.

    Not part of ``validate()``: the file is a mounted Secret that only the pod has, while the
    chart's tests parse the rendered config elsewhere. ``--check`` and the start call it.
    """
    if not spec.port or not spec.token_file:
        return None
    key = f"{path}.token_file = {spec.token_file!r}"  # the whole path: the user looks for that file
    try:
        with open(spec.token_file, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError([f"{key}: cannot read it ({e.strerror or e}); put the bearer token in that file, "
                           f"or leave {path}.token_file empty for an API without writes"]) from e  # fmt: skip
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise ConfigError([f"{key}: not UTF-8; put the bearer token in it as text"]) from e
    if not token or len(raw) > MAX_FILE_BYTES:
        raise ConfigError([f"{key}: {'empty' if not token else 'larger than 1 MiB'}; put the bearer token in it"])
    return token


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain data (tuples as lists) of any config object, defaults included; parses back unchanged."""
    return s.plain(dataclasses.asdict(obj))  # type: ignore[no-any-return]
