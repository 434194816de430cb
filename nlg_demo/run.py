"""``nlg-demo``: the whole system on one machine, no Kubernetes, bounded in time, ending in a PNG.

This module owns the demo's timeline: start tritonserver (explicit model control) with the gpt2
model, time a few lone requests to pick a threshold the load will cross (twice the idle per-token
statistic the policy aims at, unless ``--threshold`` is given), measure what one instance and two
together carry and size the load from it (:mod:`nlg_demo.capacity`; unless ``--rate`` is given),
run the autoscaler in-process (direct scrape of Triton's metrics port, the Triton in-place
actuator), drive a Poisson load of Table 4.2 queries for the first part of ``--duration`` (a base
one instance carries, then a peak it does not), then let the load stop so that the scale-in shows
too. Every round prints one line; the end prints a summary and writes the plot.

``--policy pertoken`` (the default) scales on the window's mean per-token latency against the
threshold. ``--policy planner`` plans instances from an engine profile ahead of demand, with the
threshold as its per-token SLO: the profile shipped for the tiny instance (or ``--profile``, or one
measured first with ``--profile-first``) plus the serving overhead that the lone requests measure on
this server, slowed to the capacity measured with two instances sharing the cores
(:mod:`nlg_demo.served_profile`).

On a small CPU-only machine the extra instances share the same cores, so latency may not fall as
instances are added; what the demo shows is the policy at work on real measurements.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoscaler.actuate import ActuationError, Deferred
from autoscaler.actuate.triton import TritonInstanceScaler
from autoscaler.app import App
from autoscaler.profile import EngineProfile, load_profile
from nlg_demo.capacity import STEP_S, LoadPlan, first_rate, measure, statistic_of
from nlg_demo.config import MODEL, demo_config, planner_spec
from nlg_demo.load import LoadRecord, PoissonLoad, mix_of
from nlg_demo.plot import Round, Signal, plot_run
from nlg_demo.served_profile import (
    SHIPPED,
    Overhead,
    calibrated,
    fit_overhead,
    measure_engine_profile,
    mismatches,
    served_profile,
)
from nlgsim.workload import COMPLEX, SIMPLE
from triton_backend.launch import PROJECT_ROOT, TritonServer

#: Lone requests of each kind timed before the load: the threshold and the serving overhead.
LONE_REQUESTS = 3
#: The per-token statistic each policy aims at (the planner's SLO is on the p99).
STATISTIC = {"pertoken": "mean", "planner": "p99"}
#: Seconds the capacity sweep waits for a reload to two instances and back (a few on a CPU).
LOAD_WAIT_S = 120.0
#: The share of the load's time at the base rate before the peak (when the load is sized here).
BASE_SHARE = 1 / 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nlg-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", choices=("pertoken", "planner"), default="pertoken",
                        help="scaling policy (default pertoken)")  # fmt: skip
    parser.add_argument("--duration", type=float, default=180.0, help="seconds in all (default 180)")
    parser.add_argument("--load-share", type=float, default=0.5, help="share of the duration at the peak")
    parser.add_argument("--rate", type=float,
                        help="Poisson arrivals per second at the peak (default: sized from the capacity measured "
                             "first)")  # fmt: skip
    parser.add_argument(
        "--ramp", type=float, default=0.0,
        help="seconds over which the rate rises from 0 to the peak (default 0: a base, then the peak)",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-step", type=float, default=STEP_S,
        help=f"seconds of arrivals at each rate of the capacity sweep (default {STEP_S:g})",
    )  # fmt: skip
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
    parser.add_argument("--max-num-seqs", type=int, default=4, help="sequences one instance runs at once (default 4)")
    parser.add_argument(
        "--profile", type=Path, help=f"planner: engine profile of the served instance (default {SHIPPED.name}, shipped)"
    )
    parser.add_argument(
        "--profile-first",
        action="store_true",
        help="planner: measure the engine profile on this machine first (python -m nlgsim profile)",
    )
    parser.add_argument("--out", type=Path, default=Path("nlg-demo.png"), help="PNG to write")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def output_path(args: argparse.Namespace, suffix: str) -> Path:
    """A file written beside the PNG: ``nlg-demo.png`` -> ``nlg-demo<suffix>``."""
    out: Path = args.out
    return out.with_name(out.stem + suffix)


def engine_profile(args: argparse.Namespace) -> tuple[EngineProfile, Path] | None:
    """The planner's engine profile and its file (measured first, named, or shipped; it must describe
    the instance the demo serves); None for another policy."""
    if args.policy != "planner":
        if args.profile is not None or args.profile_first:
            raise SystemExit("nlg-demo: --profile and --profile-first are for --policy planner")
        return None
    if args.profile is not None and args.profile_first:
        raise SystemExit("nlg-demo: give --profile or --profile-first, not both")
    path = args.profile or SHIPPED
    if args.profile_first:
        path = output_path(args, ".engine-profile.json")
        print(f"nlg-demo: measuring the engine profile of {args.preset} here into {path} ...", flush=True)
        measure_engine_profile(args.preset, args.max_num_seqs, path, PROJECT_ROOT)
    try:
        profile = load_profile(path)
    except ValueError as e:
        raise SystemExit(f"nlg-demo: {e}") from None
    wrong = mismatches(profile, args.preset, args.max_num_seqs)
    if wrong:
        raise SystemExit(
            f"nlg-demo: engine profile {path} has {'; '.join(wrong)}: pass --profile-first to measure "
            "the instance served here, or --profile with one that matches"
        )
    return profile, path


def lone_requests(load: PoissonLoad) -> list[LoadRecord]:
    """Simple and complex queries one at a time: the idle per-token latency (the threshold), how long
    each kind takes (where the capacity sweep starts), the serving overhead (a complex query runs its
    choices as a batch)."""
    records = [load.send(query) for query in (SIMPLE, COMPLEX) for _ in range(LONE_REQUESTS)]
    if not all(any(r.complete for r in records if r.kind == q.name) for q in (SIMPLE, COMPLEX)):
        raise SystemExit("nlg-demo: the calibration requests failed; is the model serving?")
    return records


def threshold_of(lone: Sequence[LoadRecord], statistic: str) -> float:
    """Twice the idle per-token ``statistic`` (the one the policy aims at: the planner's SLO is on the
    p99) of the lone requests, in ms: a target an idle instance meets and a loaded one crosses."""
    idle = statistic_of(lone, statistic)
    if idle is None:
        raise SystemExit("nlg-demo: no calibration request finished")
    return round(2 * idle, 1)


def measure_load(
    args: argparse.Namespace, server: TritonServer, lone: Sequence[LoadRecord], threshold: float
) -> tuple[LoadPlan, list[LoadRecord], float | None]:
    """The capacity of one instance, then of two together, and the load sized from them
    (:func:`nlg_demo.capacity.measure`); also every request the sweeps sent, and the seconds the reload
    to a second instance took (None if none was timed): what adding an instance in place takes."""
    loads: list[PoissonLoad] = []
    reloads: list[float] = []

    def make_load(rate: float) -> PoissonLoad:
        loads.append(PoissonLoad(server.grpc_url, rate, args.complex, seed=args.seed * 1000 + len(loads) + 1))
        return loads[-1]

    def say(line: str) -> None:
        print(line, flush=True)

    start = first_rate(lone, args.max_num_seqs, args.complex)
    scaler = TritonInstanceScaler(f"http://{server.http_url}", server.metrics_url, load_wait=LOAD_WAIT_S)

    def set_count(count: int) -> None:
        began = time.monotonic()
        set_instances(scaler, count)
        if count > 1 and not reloads:
            reloads.append(time.monotonic() - began)

    try:
        plan = measure(make_load, set_count, start, threshold, STATISTIC[args.policy], say, args.sweep_step)
    finally:
        scaler.close()
    return plan, [r for load in loads for r in load.records], reloads[0] if reloads else None


def set_instances(scaler: TritonInstanceScaler, count: int) -> None:
    """The model's instance count, waited for: a scale-in waits until the model's gauges show the
    sweep's requests gone (they trail the client by a publishing interval), a reload until it is done."""
    deadline = time.monotonic() + LOAD_WAIT_S
    while True:
        try:
            current = scaler.observe(MODEL).replicas
            if current == count:
                return
            scaler.scale(MODEL, count, current)
        except (Deferred, ActuationError) as why:  # a reload under way may leave Triton unanswering
            if time.monotonic() > deadline:
                raise SystemExit(f"nlg-demo: could not set {count} instances to measure capacity: {why}") from None
            time.sleep(0.5)


def signal_of(view: dict[str, Any]) -> Signal:
    """The per-token signal the policy aims at, from its targets (``pertoken_mean``, ``pertoken_p99``)."""
    key, target = next((k, v) for k, v in view["targets"].items() if k.startswith("pertoken_"))
    statistic = key.removeprefix("pertoken_")
    return Signal(key, f"window {statistic} (autoscaler)", target, f"target {target:g} ms ({statistic})")


def round_of(view: dict[str, Any], start: float, end: float, headroom: float) -> Round:
    """The round the view's latest decision made; a planner's gets ``fleet_capacity`` (choices per second its
    instances carry at the headroom) for the plot."""
    last = view["decisions"][0]
    current = view["replicas"]["current"]
    metrics = dict(view["metrics"])
    if "per_replica" in metrics:
        metrics["fleet_capacity"] = metrics["per_replica"] * metrics.get("capacity", 1.0) * headroom * current
    return Round(start, end, current, last["desired"], metrics)


def line_of(view: dict[str, Any], record: Round, signal: Signal, in_flight: int) -> str:
    """One round as the demo prints it."""
    last = view["decisions"][0]
    value = record.metrics.get(signal.key)
    shown = "  no data" if value is None else "     idle" if value == 0 else f"{value:7.1f} ms"
    planned = ""
    if "planned" in record.metrics:
        m = record.metrics
        planned = (f"demand {m['demand']:5.2f}/s planned {m['planned']:5.2f}/s "
                   f"per instance {m['per_replica']:5.2f}/s x {m.get('capacity', 1.0):.2f} | ")  # fmt: skip
    return (f"[{record.t:6.1f}s] instances {last['current']} -> {last['desired']} | {planned}"
            f"per-token {shown} | in flight {in_flight:2d} | {last['direction']}")  # fmt: skip


def plan_profile(
    args: argparse.Namespace,
    engine: tuple[EngineProfile, Path],
    lone: Sequence[LoadRecord],
    startup_s: float,
    per_replica: float | None,
    threshold: float,
) -> tuple[Path, Overhead]:
    """Writes the served instance's profile beside the PNG: the engine's plus what serving adds here,
    and, given the measured ``per_replica`` (choices per second of one of two instances loaded
    together), the step overhead at which the planner counts one replica for that."""
    overhead = fit_overhead(engine[0], lone)
    path = output_path(args, ".served-profile.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    served = served_profile(engine[0], overhead, startup_s, engine[1])
    if per_replica is not None:
        spec = planner_spec(threshold, path)
        served, _ = calibrated(served, per_replica, spec, mix_of(args.complex))
    served.save(path)
    return path, overhead


def describe_policy(args: argparse.Namespace, threshold: float, overhead: Overhead | None, startup_s: float) -> str:
    common = (f"window {args.window:g} s, instances 1..{args.max_instances}, "
              f"stabilization {args.stabilization:g} s")  # fmt: skip
    if overhead is None:
        return f"pertoken, threshold {threshold} ms, {common}"
    return (f"planner, per-token SLO {threshold} ms, {common}; start-up lead {startup_s:.1f} s; serving adds "
            f"{overhead.step_s * 1000:.1f} ms a step + {overhead.per_sequence_s * 1000:.2f} ms a sequence, "
            f"{overhead.first_token_s * 1000:.1f} ms a prompt to the engine profile")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sweep_step <= 0:
        raise SystemExit(f"nlg-demo: --sweep-step must be positive, got {args.sweep_step:g}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    engine = engine_profile(args)
    print(f"nlg-demo: starting tritonserver (preset {args.preset}, explicit model control) ...", flush=True)
    extra = ["--model-control-mode=explicit", f"--load-model={MODEL}"]
    env = {"NLG_PRESET": args.preset, "NLG_MAX_NUM_SEQS": str(args.max_num_seqs)}
    starting = time.monotonic()
    with TritonServer(env=env, extra_args=extra) as server:
        startup_s = time.monotonic() - starting
        print(f"  ready in {startup_s:.1f} s: gRPC {server.grpc_url}, metrics {server.metrics_url}", flush=True)
        lone = lone_requests(PoissonLoad(server.grpc_url, 1.0, args.complex, seed=args.seed))
        threshold = args.threshold if args.threshold is not None else threshold_of(lone, STATISTIC[args.policy])
        calibration = list(lone)
        plan = None
        if args.rate is None:
            plan, swept, reload_s = measure_load(args, server, lone, threshold)
            calibration += swept
            # The actuator adds an instance by reloading the model in place: its lead is that, not a start.
            startup_s = reload_s if reload_s is not None else startup_s
        peak = plan.peak if plan else args.rate
        # A base that one instance carries comes first, unless the rate ramps (or is given).
        base = plan.base if plan and args.ramp <= 0 else None
        # The planner counts one instance for what one of two loaded together carried here.
        per_replica = plan.two / 2 * mix_of(args.complex).choices if plan else None
        served, overhead = (
            plan_profile(args, engine, lone, startup_s, per_replica, threshold) if engine else (None, None)
        )
        config = demo_config(args, server, threshold, served)
        print(f"  policy: {describe_policy(args, threshold, overhead, startup_s)}", flush=True)
        if served is not None:
            print(f"  profile of the served instance: {served}", flush=True)
        app = App(config)
        headroom = config.scaler.planner.headroom
        view = app.controller.targets.view(MODEL)
        assert view is not None  # the config's target is set when the App is built
        signal = signal_of(view)
        rounds: list[Round] = []
        load = PoissonLoad(server.grpc_url, base or peak, args.complex, seed=args.seed, ramp=args.ramp)
        t0 = time.monotonic()
        load_stops = t0 + args.duration * args.load_share
        peak_starts = t0 + (args.duration * args.load_share * BASE_SHARE if base else 0.0)
        load_stopped_at: float | None = None
        in_peak = base is None
        load.start()
        print(f"  load: Poisson, {args.complex:.0%} complex, for {load_stops - t0:.0f} s: "
              f"{phases(base, peak, args.ramp, peak_starts - t0)}\n")  # fmt: skip
        try:
            while time.monotonic() - t0 < args.duration:
                started = time.monotonic()
                if not in_peak and started >= peak_starts:
                    load.set_rate(peak)
                    in_peak = True
                    print(f"[{started - t0:6.1f}s] the peak: {peak:.2f}/s", flush=True)
                if load_stopped_at is None and started >= load_stops:
                    load.stop_arrivals()
                    load_stopped_at = started - t0
                    print(f"[{load_stopped_at:6.1f}s] load stops; requests in flight finish", flush=True)
                app.controller.run_once()
                view = app.controller.targets.view(MODEL)
                if view and view["decisions"]:
                    rounds.append(round_of(view, started - t0, time.monotonic() - t0, headroom))
                    print(line_of(view, rounds[-1], signal, load.in_flight), flush=True)
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        finally:
            load.join()
            app.stop()
    records = calibration + load.records
    cut = [r for r in records if not r.complete]
    title = f"nlg-demo: {args.policy} policy scaling Triton instances in place"
    path = plot_run(args.out, rounds, load.records, t0, signal, load_stopped_at, title, bin_s=args.window)
    print(f"\n{served_of(records, len(calibration))}; {reached(rounds, load_stopped_at)}; plot: {path}")
    for record in cut[:5]:
        print(f"  {record.kind}: {record.error}", file=sys.stderr)
    return 0 if not cut else 1


def phases(base: float | None, peak: float, ramp: float, base_s: float) -> str:
    """The load's phases as the demo announces them."""
    if base:
        return f"{base:.2f}/s for {base_s:.0f} s, then a peak of {peak:.2f}/s"
    return f"{peak:.2f}/s" + (f", rising over {ramp:g} s" if ramp > 0 else "")


def served_of(records: Sequence[LoadRecord], measuring: int) -> str:
    """The requests sent and those served whole (every choice to its length), as the summary says it;
    the first ``measuring`` of ``records`` measured the capacity."""
    served = sum(1 for r in records if r.complete)
    return (f"requests served {served}/{len(records)} ({measuring} of them measuring capacity), "
            f"{len(records) - served} failed or cut")  # fmt: skip


def reached(rounds: Sequence[Round], load_stopped: float | None) -> str:
    """The instances the run reached: the most while the load lasted, and those at the end."""
    if not rounds:
        return "instances reached: no round ran"
    during = [r.current for r in rounds if load_stopped is None or r.t < load_stopped]
    return f"instances reached {max(during, default=rounds[0].current)} under load, {rounds[-1].current} at the end"
