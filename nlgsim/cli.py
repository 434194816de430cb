"""``python -m nlgsim``: what-if runs of scaling policies on a workload, sweeps, profiles.

  python -m nlgsim run --profile P.json --workload trace:my.csv --map-lengths clip --config autoscaler.yaml \\
      --policy pertoken:25 --policy pertoken:35 --policy planner --oracle --out results/
  python -m nlgsim run --protocol thesis --profile P.json --workload complex:10 --ramp 200
  python -m nlgsim run --protocol trace --profile P.json --workload trace:my.csv --map-lengths scale:0.125
  python -m nlgsim sweep --profile P.json --workload trace:my.csv --thresholds 20,25,30 --windows 30,60
  python -m nlgsim capacity --profile P.json --workload complex:1
  python -m nlgsim profile --preset gpt2 --out my-profile.json

See docs/simulator.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from autoscaler.config import ConfigError, ScalerSpec, parse_config, to_dict
from nlgsim.anchors import ANCHORS
from nlgsim.experiment import Workload, build_policy, parse_workload, planner_config, scaler_spec
from nlgsim.feasibility import feasibility
from nlgsim.oracle import ORACLE_WARMUP_S
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.protocol import PROTOCOLS, Plan, run_plan
from nlgsim.results import SLO, SLO_NAMES, Summary, format_table, summarize
from nlgsim.routing import ROUTING_FORMS, parse_routing
from nlgsim.simulator import RunLog, Scenario, simulate
from nlgsim.trace_rows import TIME_UNITS
from nlgsim.workload import LENGTH_STRATEGIES, SCALE_JITTER_S, DayCurve, FleetScale


def _routing(text: str) -> str:
    try:
        parse_routing(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _map_lengths(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--map-lengths",
        dest="lengths",
        default="refuse",
        help="trace: how requests longer than the model's context are fitted: "
        + "; ".join(f"{k}: {v}" for k, v in LENGTH_STRATEGIES.items()),
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", required=True, help="engine profile JSON (benchmarks/profiles/*.json)")
    p.add_argument(
        "--workload", required=True, help="simple:RATE, complex:RATE (req/s, or like 2.4x), trace:PATH"
    )
    p.add_argument("--count", type=int, help="requests of a Table 4.2 workload (default 2000; thesis 3840)")
    p.add_argument("--duration", type=float, help="seconds of workload (trace: a window of it)")
    p.add_argument("--start", type=float, default=0.0, help="trace: seconds to skip")
    p.add_argument("--speed", type=float, default=1.0, help="trace: replay this many times faster")
    p.add_argument(
        "--time-unit", choices=list(TIME_UNITS), default="s",
        help="trace: what a numeric timestamp counts (Mooncake's traces: ms); ISO dates carry their own",
    )  # fmt: skip
    p.add_argument(
        "--scale", type=int, default=1,
        help="trace: K times its rate, shape and bursts kept: each request replicated K times with a small "
        "arrival jitter (docs/simulator.md, 'Fleet-scale workloads')",
    )  # fmt: skip
    p.add_argument(
        "--scale-jitter", type=float, default=SCALE_JITTER_S,
        help=f"trace with --scale: each copy arrives up to this many s later, uniform (default {SCALE_JITTER_S:g})",
    )  # fmt: skip
    p.add_argument("--scale-seed", type=int, default=0, help="trace with --scale: the jitter's seed (default 0)")
    p.add_argument(
        "--day", metavar="LOW:HIGH",
        help="trace: looped over --day-length s at a rate following a daily curve from LOW times its rate "
        "(night) to HIGH times (noon), copies as --scale makes them (docs/simulator.md, 'Workload shapes')",
    )  # fmt: skip
    p.add_argument(
        "--day-length", type=float, default=86_400.0,
        help="trace with --day: seconds the day lasts (default 86400; less compresses the curve, not the trace)",
    )  # fmt: skip
    p.add_argument(
        "--group", type=float, default=0.0, metavar="S",
        help="trace: arrivals gathered into groups at one instant every S s (default 0: as recorded)",
    )  # fmt: skip
    _map_lengths(p)
    p.add_argument("--seed", type=int, help="synthetic workloads' seed (default 0; thesis protocol: the first)")
    p.add_argument(
        "--ramp", type=float, default=0.0, help="Table 4.2 workloads: rise to RATE over this many s"
    )
    p.add_argument(
        "--config", help="autoscaler YAML (docs/autoscaler-config.md); its scaler and loop are used"
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scaler key")
    p.add_argument(
        "--loop-interval", type=float, help="s between autoscaler rounds (default: config's loop.interval)"
    )
    p.add_argument(
        "--scrape-interval", type=float, help="s between metric scrapes (default: the loop interval)"
    )
    p.add_argument("--startup", type=float, help="pod start-up delay in s (default: the profile's)")
    p.add_argument(
        "--routing", default="round-robin", type=_routing,
        help=f"how requests reach the pods: {ROUTING_FORMS} (docs/simulator.md, 'Routing'; default round-robin)",
    )  # fmt: skip
    p.add_argument("--slo-request-ms", type=float, help="request latency limit (default 2000)")
    p.add_argument("--slo-ttft-ms", type=float, help="TTFT limit (default 2000; trace protocol 1000)")
    p.add_argument("--slo-pertoken-ms", type=float, help="per-token latency limit (default 50)")
    p.add_argument(
        "--attain",
        help=f"SLOs attainment requires, comma-separated: {','.join(SLO_NAMES)} (default request; "
        "trace protocol ttft,pertoken)",
    )
    p.add_argument("--target", type=float, help="share of feasible requests to meet the SLO (default 0.99)")
    p.add_argument("--slo-interval", type=float, help="s; the oracle meets --target in each (default 30)")
    p.add_argument("--out", type=Path, help="folder for summary.json and PNG figures")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nlgsim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="replay a workload under one or more policies")
    _common(run)
    run.add_argument(
        "--policy", action="append",
        help=f"request:MS, pertoken:MS, planner, fixed:N, an anchor: {', '.join(ANCHORS)}, or (--protocol trace) "
        "the reference lagged:S (repeatable)",
    )
    run.add_argument(
        "--oracle", action="store_true", help="also compute the oracle lower bound on GPU-seconds"
    )
    run.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        help="a named protocol (seeds or trace windows, its SLO, bounds and policies; docs/simulator.md): "
        "prints the tables of benchmarks/scaling_policies.md",
    )
    run.add_argument("--seeds", type=int, help="thesis protocol: this many seeds from --seed (default 10)")
    run.add_argument("--windows", type=int, help="trace protocol: consecutive windows of the trace (default 4)")
    run.add_argument(
        "--warmup", type=float, default=0.0, help="thesis protocol: seconds of light load before the step"
    )
    run.add_argument(
        "--warmup-rate", default="0.25x", help="thesis protocol: the light load, req/s or like 0.25x (default)"
    )
    run.add_argument("--workers", type=int, default=1, help="protocol runs in this many processes")
    sw = sub.add_parser("sweep", help="grid of thresholds and windows; prints the Pareto front")
    _common(sw)
    sw.add_argument("--types", default="pertoken", help="comma-separated: request,pertoken")
    sw.add_argument("--thresholds", default="15,20,25,30,35,40,50", help="per-token thresholds, ms")
    sw.add_argument("--request-thresholds", default="1000,1500,2000,3000", help="request thresholds, ms")
    sw.add_argument("--windows", default="15,30,60,120", help="time windows, s")
    sw.add_argument("--workers", type=int, default=1)
    cap = sub.add_parser("capacity", help="one replica's saturation rate for a workload")
    cap.add_argument("--profile", required=True)
    cap.add_argument("--workload", required=True)
    _map_lengths(cap)
    prof = sub.add_parser("profile", help="measure an engine profile on the real engine (minutes)")
    prof.add_argument("--preset", default="gpt2")
    prof.add_argument("--dtype", default="float32")
    prof.add_argument("--device", default="cpu")
    prof.add_argument("--max-num-seqs", type=int, default=64)
    prof.add_argument("--prefill-chunk-tokens", type=int, default=256)
    prof.add_argument("--reps", type=int, default=3)
    prof.add_argument("--startup", type=float, help="skip measuring start-up and use this (s)")
    prof.add_argument("--out", type=Path, required=True)
    return parser


def _slo(args: argparse.Namespace, base: SLO | None = None) -> SLO:
    """The SLO the flags give, each one not given taken from ``base`` (a protocol's, or the default)."""
    base = base or SLO()

    def ms(value: float | None, default: float) -> float:
        return default if value is None else value / 1000

    attain = base.attain if args.attain is None else tuple(a.strip() for a in args.attain.split(",") if a.strip())
    return SLO(
        request_s=ms(args.slo_request_ms, base.request_s),
        ttft_s=ms(args.slo_ttft_ms, base.ttft_s),
        per_token_s=ms(args.slo_pertoken_ms, base.per_token_s),
        attain=attain,
        target=base.target if args.target is None else args.target,
        interval_s=base.interval_s if args.slo_interval is None else args.slo_interval,
    )


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return (yaml.safe_load(Path(args.config).read_text()) or {}) if args.config else {}


def _loop(args: argparse.Namespace, config: dict[str, Any]) -> tuple[float, float]:
    loop = args.loop_interval
    if loop is None:
        loop = parse_config(config).loop.interval if "loop" in config else 5.0
    return loop, args.scrape_interval or loop


def _setup(args: argparse.Namespace) -> tuple[EngineProfile, Workload, ScalerSpec, float, float, SLO]:
    profile = load_profile(args.profile)
    config = _config(args)
    spec = scaler_spec(config, args.set)
    loop, scrape = _loop(args, config)
    workload = parse_workload(
        args.workload,
        profile,
        count=args.count or 2000,
        duration=args.duration,
        seed=args.seed or 0,
        start=args.start,
        speed=args.speed,
        lengths=args.lengths,
        ramp=args.ramp,
        scale=fleet_scale(args),
        time_unit=args.time_unit,
        group_s=args.group,
    )
    return profile, workload, spec, loop, scrape, _slo(args)


def fleet_scale(args: argparse.Namespace) -> FleetScale:
    return FleetScale(args.scale, args.scale_jitter, args.scale_seed, day_curve(args.day, args.day_length))


def day_curve(text: str | None, length_s: float) -> DayCurve | None:
    """``--day LOW:HIGH`` over ``--day-length`` s, or None without ``--day``."""
    if text is None:
        return None
    low, sep, high = text.partition(":")
    try:
        return DayCurve(float(low), float(high), length_s) if sep else None
    except ValueError as e:
        if "--day" in str(e):
            raise
    raise ValueError(f"--day {text!r}: give LOW:HIGH, multiples of the trace's rate, e.g. --day 3:30")


def _bar(desc: str) -> tqdm[Any]:
    return tqdm(
        total=1000,
        desc=desc,
        unit="‰",
        leave=False,
        file=sys.stderr,
        bar_format="{desc}: {percentage:3.0f}%|{bar}|",
    )


def _run_one(scenario: Scenario, desc: str) -> RunLog:
    with _bar(desc) as bar:

        def tick(fraction: float) -> None:
            bar.n = int(fraction * 1000)
            bar.refresh()

        return simulate(scenario, tick)


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The protocol's runs as the flags set them: the protocol's settings, the flags over them."""
    protocol = PROTOCOLS[args.protocol]
    config = _config(args)
    # The protocol's scaler keys over the config's, --set over both.
    spec = scaler_spec({"scaler": {**dict(config.get("scaler") or {}), **protocol.scaler}}, args.set)
    loop, scrape = _loop(args, config)
    wrong = "--windows" if protocol.replicate == "seed" else "--seeds"
    if (args.windows if protocol.replicate == "seed" else args.seeds) is not None:
        raise ValueError(f"{wrong} does not apply to --protocol {args.protocol} (one run per {protocol.replicate})")
    if args.seed is not None and protocol.replicate != "seed":
        raise ValueError(f"--seed does not apply to --protocol {args.protocol}: a trace is replayed as it is")
    if args.warmup and protocol.replicate != "seed":
        raise ValueError(f"--warmup applies to --protocol thesis; the trace protocol warms up {ORACLE_WARMUP_S:g} s")
    return Plan(
        protocol=args.protocol,
        profile=args.profile,
        workload=args.workload,
        policies=tuple(args.policy or protocol.policies),
        slo=_slo(args, protocol.slo),
        scaler=spec,
        replicates=args.seeds or args.windows or protocol.replicates,
        first_seed=args.seed or 0,
        count=args.count or protocol.count,
        ramp=args.ramp,
        warmup_s=args.warmup,
        warmup_rate=args.warmup_rate,
        lengths=args.lengths,
        start=args.start,
        duration=args.duration,
        speed=args.speed,
        time_unit=args.time_unit,
        scale=fleet_scale(args),
        group_s=args.group,
        loop_interval=loop,
        scrape_interval=scrape,
        startup_s=args.startup,
        routing=args.routing,
    )


def cmd_protocol(args: argparse.Namespace) -> int:
    from nlgsim import plots
    from nlgsim.protocol_tables import header, tables

    plan = plan_from_args(args)
    load_profile(plan.profile)  # a missing or bad profile is named before any work
    result = run_plan(plan, args.workers, progress=lambda m: print(m, file=sys.stderr))
    print("\n".join(header(result)))
    for table in tables(result):
        print()
        print(table)
    if args.out:
        out: Path = args.out
        out.mkdir(parents=True, exist_ok=True)
        (out / "protocol.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
        names = plots.protocol_figures(result, out, "")
        print(f"wrote {out}/protocol.json" + "".join(f", {n}" for n in names))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from nlgsim import plots
    from nlgsim.oracle import oracle

    if args.protocol:
        return cmd_protocol(args)
    if args.seeds is not None or args.windows is not None or args.warmup:
        raise ValueError("--seeds, --windows and --warmup go with --protocol thesis|trace")

    profile, workload, spec, loop, scrape, slo = _setup(args)
    print(f"workload: {workload.description}")
    print(f"profile: {profile.preset} {profile.dtype} on {profile.hardware} ({profile.source})")
    print(f"SLO: {slo.statement()}; routing {args.routing}; loop {loop:g} s, scrape {scrape:g} s")
    feasible = feasibility(profile, workload.requests, slo)
    print(f"feasibility: {feasible.describe()}")
    planner = planner_config(profile, workload.requests, slo, loop, args.startup, spec.planner)
    logs: dict[str, RunLog] = {}
    summaries: list[Summary] = []
    for text in args.policy or [f"{spec.type}:{spec.threshold:g}"]:
        policy, initial = build_policy(text, spec, planner)
        scenario = Scenario(
            profile,
            workload.requests,
            policy,
            initial_replicas=initial,
            loop_interval=loop,
            scrape_interval=scrape,
            startup_s=args.startup,
            routing=args.routing,
            name=text,
        )
        logs[text] = _run_one(scenario, text)
        summaries.append(summarize(logs[text], slo, text))
    rows = [s.row() for s in summaries]
    bound = None
    paid = 0.0
    if args.oracle:
        with _bar("oracle") as bar:
            bound = oracle(
                profile,
                workload.requests,
                slo,
                # The bound searches the replicas the policies may use, no more (see nlgsim.oracle).
                min_replicas=max(spec.min_deployment_count, 1),
                max_replicas=spec.max_deployment_count,
                routing=args.routing,
                progress=lambda f: bar.update(int(f * 1000) - bar.n),
            )
        startup = args.startup if args.startup is not None else profile.startup_s
        paid = bound.gpu_seconds_with_startup(startup)
        for row, s in zip(rows, summaries, strict=True):
            row["GPU-s / oracle"] = f"{s.gpu_seconds / bound.gpu_seconds:.2f}"
            row["GPU-s / start-up bound"] = f"{s.gpu_seconds / paid:.2f}"
        print(
            f"oracle ({slo.interval_s:g} s intervals, {slo.target:.4g} of the feasible requests in each): "
            f"{bound.gpu_seconds:.0f} GPU-s; with each pod's {startup:g} s start-up paid: {paid:.0f} GPU-s"
            + (
                f"; {len(bound.unattainable)} of {len(bound.replicas)} intervals unattainable even at "
                f"max_deployment_count = {spec.max_deployment_count} (charged the minimum)"
                if bound.unattainable
                else ""
            )
        )
    print(format_table(rows))
    if args.out:
        out: Path = args.out
        out.mkdir(parents=True, exist_ok=True)
        data = {
            "workload": workload.description,
            "mapping": workload.mapping or None,
            "mapping_changes": asdict(workload.changes) if workload.changes else None,
            "profile": args.profile,
            "slo": asdict(slo),
            "slo_statement": slo.statement(),
            "feasibility": asdict(feasible),
            "scaler": to_dict(spec),
            "oracle_gpu_seconds": bound.gpu_seconds if bound else None,
            "startup_bound_gpu_seconds": paid if bound else None,
            "oracle_replicas": list(bound.replicas) if bound else None,
            "oracle_unattainable_intervals": list(bound.unattainable) if bound else None,
            "runs": [asdict(s) for s in summaries],
        }
        (out / "summary.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
        plots.replicas(logs, out / "replicas.png", f"Replicas over time: {workload.name}", bound)
        plots.latency(logs, out / "latency.png", f"Latency over time: {workload.name}", slo)
        plots.tradeoff(
            [(s.name, s.gpu_seconds, s.violations["request"]) for s in summaries],
            out / "tradeoff.png",
            f"Violations against GPU-seconds: {workload.name}",
            oracle_gpu=bound.gpu_seconds if bound else None,
        )
        print(f"wrote {out}/summary.json, replicas.png, latency.png, tradeoff.png")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from nlgsim import plots
    from nlgsim.sweep import grid, pareto_front, sweep

    profile, workload, spec, loop, scrape, slo = _setup(args)
    print(f"workload: {workload.description}")
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    thresholds = {
        "pertoken": [float(x) for x in args.thresholds.split(",")],
        "request": [float(x) for x in args.request_thresholds.split(",")],
    }
    specs = grid(spec, types, thresholds, [float(w) for w in args.windows.split(",")])
    base = Scenario(
        profile,
        workload.requests,
        None,
        initial_replicas=max(spec.min_deployment_count, 1),
        loop_interval=loop,
        scrape_interval=scrape,
        startup_s=args.startup,
        routing=args.routing,
    )
    with tqdm(total=len(specs), desc="sweep", file=sys.stderr, leave=False) as bar:
        points = sweep(base, specs, slo, workers=args.workers, progress=bar.update)
    front = pareto_front([(p.summary.gpu_seconds, p.missed) for p in points])
    rows = []
    for i, p in enumerate(points):
        row = {"config": p.label, "front": "*" if i in front else ""}
        row.update({k: v for k, v in p.summary.row().items() if k != "policy"})
        rows.append(row)
    print(format_table(rows))
    print(f"\nPareto front (GPU-seconds against SLO misses: {slo.describe()}):")
    print(
        format_table(
            [
                {
                    "config": points[i].label,
                    **{
                        k: v
                        for k, v in points[i].summary.row().items()
                        if k in ("attain %", "feasible attain %", "GPU-s")
                    },
                }
                for i in front
            ]
        )
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        pts = [(p.label, p.summary.gpu_seconds, 100 * p.missed) for p in points]
        plots.tradeoff(
            pts,
            args.out / "sweep.png",
            f"Sweep: {workload.name}",
            front=[pts[i] for i in front],
            ylabel="requests missing the SLO (%)",
        )
        print(f"wrote {args.out}/sweep.png")
    return 0


def cmd_capacity(args: argparse.Namespace) -> int:
    from nlgsim.capacity import saturation_rate

    profile = load_profile(args.profile)
    workload = parse_workload(args.workload, profile, count=400, lengths=args.lengths)
    rate = saturation_rate(profile, workload.requests[:400])
    print(
        f"one replica ({profile.preset} on {profile.hardware}): "
        f"{rate:.3f} req/s of {workload.name} at saturation"
    )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from nlgsim.profiler import measure

    profile = measure(
        args.preset,
        args.dtype,
        args.device,
        args.max_num_seqs,
        args.prefill_chunk_tokens,
        reps=args.reps,
        startup_s=args.startup,
        log=lambda m: print(m, file=sys.stderr),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profile.save(args.out)
    print(f"wrote {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"run": cmd_run, "sweep": cmd_sweep, "capacity": cmd_capacity, "profile": cmd_profile}
    try:
        return commands[args.command](args)
    except (ValueError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
