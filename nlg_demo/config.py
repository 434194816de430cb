"""The autoscaler configuration the demo runs: one model's instances on the local tritonserver.

This module owns turning the demo's options into an :class:`~autoscaler.config.AutoscalerConfig`:
the direct scrape of Triton's metrics port, the Triton in-place actuator, the control loop's timing,
and the policy ``--policy`` names (``pertoken`` on a threshold, or ``planner`` on an engine profile
with the threshold as its per-token SLO).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Protocol

from autoscaler.config import (
    ActuatorSpec,
    ApiSpec,
    AutoscalerConfig,
    LoopSpec,
    MetricsSpec,
    PlannerSpec,
    RateLimit,
    ScalerSpec,
    SourceSpec,
)

MODEL = "gpt2"
class Server(Protocol):
    """What the configuration needs of the running tritonserver."""

    @property
    def http_url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...


def planner_spec(threshold: float, profile: Path) -> PlannerSpec:
    """The planner's inputs: ``profile`` and the threshold as the per-token SLO."""
    return PlannerSpec(profile=str(profile), per_token_slo=threshold)


def demo_config(
    args: argparse.Namespace, server: Server, threshold: float, profile: Path | None = None
) -> AutoscalerConfig:
    """The configuration for ``args.policy``; the planner needs ``profile`` (the served instance's)."""
    metrics_target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    planner = PlannerSpec()
    if args.policy == "planner":
        if profile is None:
            raise SystemExit("nlg-demo: --policy planner needs an engine profile")
        planner = planner_spec(threshold, profile)
    config = AutoscalerConfig(
        model_id=MODEL,
        scaler=ScalerSpec(
            type=args.policy,
            min_deployment_count=1,
            max_deployment_count=args.max_instances,
            time_window=args.window,
            threshold=threshold,
            stabilization_window=args.stabilization,
            # One instance at a time: each reload of a Python-backend model takes seconds on a CPU.
            scale_up=RateLimit(max_pods=1, max_percent=0, period=args.interval),
            scale_down=RateLimit(max_pods=1, max_percent=0, period=args.interval),
            planner=planner,
        ),
        source=SourceSpec(kind="direct", static_targets=(metrics_target,), timeout=2.0),
        actuator=ActuatorSpec(
            kind="triton", triton_url=f"http://{server.http_url}", triton_metrics_url=server.metrics_url
        ),
        loop=LoopSpec(interval=args.interval),
        api=ApiSpec(port=0),
        metrics=MetricsSpec(port=0),
    )
    errors = config.validate()
    if errors:
        raise SystemExit("nlg-demo: " + "; ".join(errors))
    return config
