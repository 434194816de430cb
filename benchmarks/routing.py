"""Per connection against per request: one fleet-scale trace routed as a Service routes it, and as the
chart's balancer does.

    .venv/bin/python -m benchmarks.routing --workers 2 --json benchmarks/results/routing.json \
        --report benchmarks/routing.md

A Kubernetes Service balances connections (kube-proxy): each client connection stays on the pod it
reached when it opened. The simulator's fleet tables route every request round-robin over the ready
pods, which a Service gives only clients that open a connection per request. This replays one trace
at fleet scale under each routing (nlgsim/routing.py): an application's few kept channels, many
short-lived clients, and per request through a balancer (least outstanding, as the chart's HAProxy),
with round-robin per request, the tables' assumption, beside them. Each under the autoscaler's default
policy (the chart's `autoscaler.policy`, up to the trace protocol's 64 replicas) and on a fixed fleet,
both starting from that fleet's pods, to which the clients connect. Deterministic: a re-run on any
machine gives the same figures; the figure (benchmarks/figures/routing_pods.png) shows the pods each
autoscaled run had and the pods that served.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from autoscaler.config import ScalerSpec
from autoscaler.decide import PolicyState, decide
from benchmarks import harness
from benchmarks.scaling.experiments import H100, TRACE_LENGTHS, TRACES
from nlgsim.experiment import parse_workload
from nlgsim.policy import Policy, hpa_policy
from nlgsim.profile import load_profile
from nlgsim.protocol import PROTOCOLS
from nlgsim.results import summarize
from nlgsim.simulator import RunLog, Scenario, Simulation
from nlgsim.workload import FleetScale

TRACE: Final = "azure2023_code"
SCALE: Final = 30
#: The trace's first 20 minutes: its bursts and quiet spells at 30 times the rate, in minutes of a 2-core
#: machine for every run together.
DURATION_S: Final = 1200.0
#: A fixed fleet in the range the scaling report's fixed rows for this trace cover (16 to 28).
FIXED: Final = 24
KEPT: Final = "per-connection:4"
SHORT_LIVED: Final = "per-connection:256:4"
#: (key, routing, what it stands for)
ROUTINGS: Final = (
    ("kept", KEPT, "a Service, 4 client connections kept for the run (an application's kept channels)"),
    ("short-lived", SHORT_LIVED, "a Service, 256 clients at a time, each connection closed after 4 requests"),
    ("balancer", "least-loaded", "per request through a balancer: the ready pod with the fewest in flight"),
    ("round-robin", "round-robin", "per request round-robin: the fleet tables' assumption"),
)
POLICIES: Final = ("autoscaler", f"fixed:{FIXED}")
#: With kept channels only, where it acts: the policy as it decided before the imbalance step.
WITHOUT_STEP: Final = "autoscaler without the imbalance step"
INTERVAL_S: Final = 30.0
#: How a decision's reason names pods the load does not reach (autoscaler/imbalance.py).
FINDING: Final = "served no request for a whole window"
FIGURE: Final = harness.REPO / "benchmarks/figures/routing_pods.png"
SLO = PROTOCOLS["trace"].slo


def default_spec() -> ScalerSpec:
    """The chart's default policy (ScalerSpec's defaults; tests/helm ties them to values.yaml), up to the
    trace protocol's bound."""
    return replace(ScalerSpec(), max_deployment_count=int(PROTOCOLS["trace"].scaler["max_deployment_count"]))


def policy_named(name: str) -> Policy | None:
    spec = default_spec()
    if name == WITHOUT_STEP:
        return Policy(name, spec, decide, PolicyState.initial, {"pertoken_mean": spec.threshold})
    return hpa_policy(spec, name) if name == "autoscaler" else None


def tasks() -> list[tuple[str, str, str]]:
    """(routing key, routing, policy) of every run."""
    every = [(key, routing, policy) for key, routing, _ in ROUTINGS for policy in POLICIES]
    return [*every, ("kept", KEPT, WITHOUT_STEP)]


def run_one(task: tuple[str, str, str]) -> dict[str, Any]:
    key, routing, policy_name = task
    profile = load_profile(str(harness.REPO / H100))
    requests = parse_workload(
        f"trace:{harness.REPO / TRACES}/{TRACE}.csv", profile, duration=DURATION_S, lengths=TRACE_LENGTHS,
        scale=FleetScale(SCALE),
    ).requests  # fmt: skip
    policy = policy_named(policy_name)
    scenario = Scenario(profile, requests, policy, initial_replicas=FIXED, routing=routing, name=policy_name)
    sim = Simulation(scenario)
    log = sim.run()
    summary = summarize(log, SLO, policy_name)
    per_pod = np.bincount([s.replica for s in log.states])
    return {
        "routing": key, "policy": policy_name, "requests": summary.requests,
        "attainment_feasible": summary.attainment_feasible, "gpu_seconds": summary.gpu_seconds,
        "max_pods": summary.max_replicas, "pods_ready": sum(p.ready for p in sim.cluster.pods),
        "pods_served": int(np.count_nonzero(per_pod)), "busiest_share": float(per_pod.max() / per_pod.sum()),
        "ttft_p99_s": summary.ttft_p99_s, "per_token_p99_s": summary.per_token_p99_s,
        "withheld": sum("withheld" in loop.reason for loop in log.loops),
        "first_finding_s": next((loop.time for loop in log.loops if FINDING in loop.reason), None),
        "most_desired_at_s": next((loop.time for loop in log.loops if loop.desired == summary.max_replicas), None),
        "timeline": timeline(log),
    }  # fmt: skip


def timeline(log: RunLog) -> dict[str, list[float]]:
    """Per interval of INTERVAL_S: the ready pods at its end, and the pods that admitted a request in it."""
    end = log.end
    starts = np.arange(0.0, end, INTERVAL_S)
    changes = log.pod_changes
    ready = [next(c[2] for c in reversed(changes) if c[0] <= t + INTERVAL_S) for t in starts]
    serving: list[set[int]] = [set() for _ in starts]
    for s in log.states:
        if s.admitted >= 0:
            serving[min(int(s.admitted // INTERVAL_S), len(starts) - 1)].add(s.replica)
    return {"start_s": starts.tolist(), "ready": ready, "serving": [len(x) for x in serving]}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(run_one, tasks()))
    return {
        "machine": harness.machine(),
        "code": harness.revision("nlgsim", "autoscaler", "benchmarks/routing.py"),
        "date": datetime.date.today().isoformat(),
        "trace": TRACE, "scale": SCALE, "duration_s": DURATION_S, "fixed": FIXED,
        "slo": SLO.statement(), "target": SLO.target, "max_replicas": default_spec().max_deployment_count,
        "routings": [{"key": k, "routing": r, "what": w} for k, r, w in ROUTINGS],
        "runs": runs,
    }  # fmt: skip


def pct(x: float) -> str:
    return f"{x * 100:.2f}%"


def run_of(data: dict[str, Any], routing: str, policy: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in data["runs"] if r["routing"] == routing and r["policy"] == policy)
    return found


def render(data: dict[str, Any]) -> str:
    auto, fixed = POLICIES
    kept, short, balanced, rr = (run_of(data, k, auto) for k, _, _ in ROUTINGS)
    kept_fixed, balanced_fixed, rr_fixed = (run_of(data, k, fixed) for k in ("kept", "balancer", "round-robin"))
    raw = run_of(data, "kept", WITHOUT_STEP)
    lines = [
        "# Routing: per connection against per request",
        "",
        harness.computed(data, "benchmarks/routing.py") + f". `{data['trace']}` x{data['scale']}, its first "
        f"{data['duration_s']:.0f} s, on the measured H100 profile (`--map-lengths {TRACE_LENGTHS}`, as the "
        f"scaling report); SLO: {data['slo']}. Each routing (`nlgsim/routing.py`, `--routing`) under the "
        f"autoscaler's default policy (the chart's `autoscaler.policy`: `pertoken` 25 ms over 60 s, up to "
        f"{data['max_replicas']} replicas) and on a fixed fleet, both starting from {data['fixed']} ready pods, to "
        "which the clients connect.",
        "",
        "| routing | what it stands for | policy | feasible attained | GPU-s | most pods | pods ready | pods that "
        "served | busiest pod's share | TTFT p99 | per-token p99 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, routing, what in (tuple(r.values()) for r in data["routings"]):
        for policy in (*POLICIES, WITHOUT_STEP) if key == "kept" else POLICIES:
            r = run_of(data, key, policy)
            lines.append(
                f"| `{routing}` | {what} | {policy} | {pct(r['attainment_feasible'])} | {r['gpu_seconds']:.0f} "
                f"| {r['max_pods']} | {r['pods_ready']} | {r['pods_served']} | {pct(r['busiest_share'])} "
                f"| {r['ttft_p99_s'] * 1000:.0f} ms | {r['per_token_p99_s'] * 1000:.0f} ms |"
            )
    finding = kept["first_finding_s"]
    lines += [
        "",
        "![Pods each run had ready, and pods that served a request, per 30 s; none served where no request "
        "arrived](figures/routing_pods.png)",
        "",
        "## What the autoscaler's pods do for users",
        "",
        f"- **Behind a bare Service, with kept channels**, the load stays on the {kept_fixed['pods_served']} pods "
        f"the connections first reached, whatever the fleet: {kept_fixed['pods_served']} of "
        f"{kept_fixed['pods_ready']} fixed pods served, the busiest {pct(kept_fixed['busiest_share'])} of the "
        f"requests, and {pct(kept_fixed['attainment_feasible'])} of the feasible requests met the SLO, against "
        f"{pct(balanced_fixed['attainment_feasible'])} through the balancer on the same pods. "
        + (
            f"The autoscaler added pods up to {kept['max_pods']}, of which {kept['pods_served']} served: "
            f"{pct(kept['attainment_feasible'])} met, at {kept['gpu_seconds'] / kept_fixed['gpu_seconds']:.2f}x "
            "the GPU-seconds of the fixed fleet."
            if kept["max_pods"] > data["fixed"]
            else f"The autoscaler added none: {pct(kept['attainment_feasible'])} met, on the fixed fleet's "
            f"GPU-seconds; without the imbalance step it would have added pods up to {raw['max_pods']}, of which "
            f"{raw['pods_served']} served, for {raw['gpu_seconds'] / kept['gpu_seconds']:.2f}x the GPU-seconds "
            f"and {pct(raw['attainment_feasible'])} met."
        ),
        f"- **Behind a bare Service, with many short-lived clients**, connections reopen often enough that "
        f"added pods get their share: {short['pods_served']} of {short['pods_ready']} pods served, "
        f"{pct(short['attainment_feasible'])} met, against {pct(rr['attainment_feasible'])} with round-robin per "
        f"request, at {short['gpu_seconds'] / rr['gpu_seconds']:.2f}x its GPU-seconds.",
        f"- **Through the balancer**, every pod the autoscaler adds takes requests ({balanced['pods_served']} of "
        f"{balanced['pods_ready']}): {pct(balanced['attainment_feasible'])} met at "
        f"{balanced['gpu_seconds'] / rr['gpu_seconds']:.2f}x the GPU-seconds of round-robin per request "
        f"({pct(rr['attainment_feasible'])}); on the fixed fleet {pct(balanced_fixed['attainment_feasible'])} "
        f"against {pct(rr_fixed['attainment_feasible'])}.",
        "",
        "**The imbalance step** (`autoscaler/imbalance.py`) names pods that served nothing through a whole "
        "window while the others missed the target, and holds scale-ups while they stand. With kept channels "
        + (
            "it never named any: no pod went a whole window without a request."
            if finding is None
            else f"it named the {kept_fixed['pods_ready'] - kept_fixed['pods_served']} idle pods from {finding:.0f} s "
            f"on (the first round whose per-token mean was over its target) and held "
            f"{kept['withheld']} scale-ups"
            + (
                ", so the policy kept the pods it started with."
                if kept["max_pods"] <= data["fixed"]
                else f"; the default scale-up limits (4 pods or 100% per 15 s) had asked for {kept['max_pods']} "
                f"pods by {kept['most_desired_at_s']:.0f} s, before a whole window could show it: it stops a "
                "climb it sees, not the first step."
            )
        )
        + " With per-request routing it named none.",
        "",
        "Round-robin per request, which every fleet table of the scaling report assumes, is what a Service gives "
        "only clients that open a connection per request; the chart's balancer (`balancer.kind: haproxy`, on by "
        "default) routes per request, least outstanding, which `least-loaded` models. With several balancer "
        "replicas each knows only its own streams, so the spread is that of a few independent least-loaded "
        "routers, close to one when the streams outnumber the pods.",
    ]
    return "\n".join(lines) + "\n"


def figure(data: dict[str, Any], path: Path = FIGURE) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    auto, fixed = POLICIES
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True, sharey=True)
    for ax, (key, routing, _) in zip(axes.flat, (tuple(r.values()) for r in data["routings"]), strict=True):
        for policy, style in ((auto, "-"), (fixed, ":")):
            t = run_of(data, key, policy)["timeline"]
            minutes = [s / 60 for s in t["start_s"]]
            ax.step(minutes, t["ready"], style, where="post", color="tab:blue", label=f"pods ready, {policy}")
            ax.step(minutes, t["serving"], style, where="post", color="tab:orange", label=f"pods that served, {policy}")
        if key == "kept":
            t = run_of(data, key, WITHOUT_STEP)["timeline"]
            minutes = [s / 60 for s in t["start_s"]]
            ax.step(minutes, t["ready"], "--", where="post", color="tab:red", label=f"pods ready, {WITHOUT_STEP}")
        ax.set_title(f"{routing}", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    for ax in axes[:, 0]:
        ax.set_ylabel("pods")
    axes[0, 0].legend(fontsize=7, loc="center right")
    fig.suptitle(
        f"{data['trace']} x{data['scale']}: pods ready and pods that served a request, per 30 s "
        "(none served: no request arrived)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    harness.output_arguments(parser)
    parser.add_argument("--workers", type=int, default=1, help="runs at once (processes)")
    parser.add_argument("--figure", type=Path, default=FIGURE, help=f"where the figure goes (default {FIGURE})")
    args = parser.parse_args(argv)
    data = harness.results(args, measure)
    figure(data, args.figure)
    harness.publish(render(data), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
