"""``nlg-demo``: the whole system on one machine, no Kubernetes, bounded in time, ending in a PNG.

This module owns the demo's timeline: start tritonserver (explicit model control) with the gpt2
model, measure the idle per-token latency to pick a threshold the load will cross (unless
``--threshold`` is given), run the autoscaler in-process (direct scrape of Triton's metrics port,
the Triton in-place actuator), drive a Poisson load of Table 4.2 queries for the first part of
``--duration``, then let the load stop so that the scale-in shows too. Every round prints one line;
the end prints a summary and writes the plot.

On a small CPU-only machine the extra instances share the same cores, so latency may not fall as
instances are added; what the demo shows is the policy at work on real measurements.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoscaler.app import App
from autoscaler.config import (
    ActuatorSpec,
    ApiSpec,
    AutoscalerConfig,
    LoopSpec,
    MetricsSpec,
    RateLimit,
    ScalerSpec,
    SourceSpec,
)
from autoscaler.demo.load import SIMPLE, PoissonLoad
from autoscaler.demo.plot import Round, plot_run
from triton_backend.launch import TritonServer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nlg-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds in all (default 180)")
    parser.add_argument("--load-share", type=float, default=0.5, help="share of the duration with load on")
    parser.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second (default 2)")
    parser.add_argument("--complex", type=float, default=0.5, help="share of complex queries (default 0.5)")
    parser.add_argument("--threshold", type=float, help="per-token latency target in ms (default: measured)")
    parser.add_argument("--max-instances", type=int, default=3)
    parser.add_argument("--interval", type=float, default=2.0, help="control loop interval, s")
    parser.add_argument("--window", type=float, default=10.0, help="time_window, s")
    parser.add_argument("--stabilization", type=float, default=20.0, help="stabilization_window, s")
    parser.add_argument("--preset", default="tiny", help="NLG_PRESET of the model (default tiny)")
    # The tiny model's step costs about the same at any batch on a CPU, so its per-token latency would
    # hardly move with the load. A bounded batch per instance, as a GPU replica has, makes the load
    # queue (per-token latency counts from arrival) until more instances add room.
    parser.add_argument(
        "--max-num-seqs", type=int, default=4, help="sequences one instance runs at once (default 4)"
    )
    parser.add_argument("--out", type=Path, default=Path("nlg-demo.png"), help="PNG to write")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def demo_config(args: argparse.Namespace, server: TritonServer, threshold: float) -> AutoscalerConfig:
    metrics_target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    config = AutoscalerConfig(
        model_id="gpt2",
        scaler=ScalerSpec(
            type="pertoken",
            min_deployment_count=1,
            max_deployment_count=args.max_instances,
            time_window=args.window,
            threshold=threshold,
            stabilization_window=args.stabilization,
            # One instance at a time: each reload of a Python-backend model takes seconds on a CPU.
            scale_up=RateLimit(max_pods=1, max_percent=0, period=args.interval),
            scale_down=RateLimit(max_pods=1, max_percent=0, period=args.interval),
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


def calibrate(load: PoissonLoad) -> float:
    """Twice the idle per-token latency of simple queries, in ms: the load will push past it."""
    samples = [load.send(SIMPLE).per_token_ms for _ in range(3)]
    measured = [s for s in samples if s is not None]
    if not measured:
        raise SystemExit("nlg-demo: the calibration requests failed; is the model serving?")
    return round(2 * statistics.median(measured), 1)


def _report(view: dict[str, Any], start: float, end: float, in_flight: int) -> Round:
    """Prints one round's line; returns it for the plot."""
    last = view["decisions"][0]
    value = view["metrics"].get("pertoken_mean")
    shown = "  no data" if value is None else "     idle" if value == 0 else f"{value:7.1f} ms"
    print(f"[{start:6.1f}s] instances {last['current']} -> {last['desired']} | per-token {shown} | "
          f"in flight {in_flight:2d} | {last['direction']}", flush=True)  # fmt: skip
    return Round(start, end, view["replicas"]["current"], last["desired"], value)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(f"nlg-demo: starting tritonserver (preset {args.preset}, explicit model control) ...", flush=True)
    extra = ["--model-control-mode=explicit", "--load-model=gpt2"]
    env = {"NLG_PRESET": args.preset, "NLG_MAX_NUM_SEQS": str(args.max_num_seqs)}
    with TritonServer(env=env, extra_args=extra) as server:
        print(f"  ready: gRPC {server.grpc_url}, metrics {server.metrics_url}", flush=True)
        load = PoissonLoad(server.grpc_url, args.rate, args.complex, seed=args.seed)
        threshold = args.threshold if args.threshold is not None else calibrate(load)
        config = demo_config(args, server, threshold)
        print(f"  policy: pertoken, threshold {threshold} ms, window {args.window:g} s, "
              f"instances 1..{args.max_instances}, stabilization {args.stabilization:g} s",
              flush=True)  # fmt: skip
        app = App(config)
        rounds: list[Round] = []
        t0 = time.monotonic()
        load_stops = t0 + args.duration * args.load_share
        load_stopped_at: float | None = None
        load.start()
        print(f"  load: Poisson {args.rate:g}/s, {args.complex:.0%} complex, for {load_stops - t0:.0f} s\n")
        try:
            while time.monotonic() - t0 < args.duration:
                started = time.monotonic()
                if load_stopped_at is None and started >= load_stops:
                    load.stop_arrivals()
                    load_stopped_at = started - t0
                    print(f"[{load_stopped_at:6.1f}s] load stops; requests in flight finish", flush=True)
                app.controller.run_once()
                view = app.controller.view("gpt2")
                if view and view["decisions"]:
                    rounds.append(_report(view, started - t0, time.monotonic() - t0, load.in_flight))
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        finally:
            load.join()
            app.stop()
    records = load.records
    done = [r for r in records if r.complete]
    cut = [r for r in records if r.end is not None and not r.complete]
    path = plot_run(args.out, rounds, records, t0, threshold, load_stopped_at)
    print(f"\n{len(records)} requests: {len(done)} complete, {len(cut)} failed or cut; "
          f"most instances {max((r.current for r in rounds), default=1)}; plot: {path}")  # fmt: skip
    for record in cut[:5]:
        print(f"  {record.kind}: {record.error}", file=sys.stderr)
    return 0 if not cut else 1
