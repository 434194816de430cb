"""Regenerate benchmarks/scaling_policies.md and benchmarks/figures/: the thesis's evaluation in the
simulator, then the policies on the Azure LLM traces against the oracle.

Run from the repository root (about 4 minutes on 2 cores; ``--quick`` for a smoke run):

    python -m benchmarks.scaling_policies [--workers 2] [--quick]

Every number in the report comes from this script; the summary is built from the numbers, and the
prose around them (``DISCUSSION_*`` and the section texts below) was written after reading the numbers
of the run saved in benchmarks/results/report_parts.json: re-read it after a new run. The numbers of
the last run are kept in benchmarks/results/report_parts.json; ``--render-only`` re-renders the report
from them (and from benchmarks/results/sim_to_real.json, written by ``python -m benchmarks.sim_to_real``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nlgsim import plots
from nlgsim.capacity import saturation_rate
from nlgsim.experiment import build_policy, parse_workload, planner_config, scaler_spec
from nlgsim.oracle import OracleResult, oracle
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.results import SLO, Summary, format_table, replicas_over_time, request_table, summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.sweep import pareto_front
from nlgsim.workload import COMPLEX, SIMPLE, thesis_requests

ROOT = Path(__file__).resolve().parent
FIGURES = ROOT / "figures"
PROFILES = ROOT / "profiles"
TRACES = ROOT.parent.parent / "shared" / "traces"
T4 = PROFILES / "t4-gpt2-xl-fp16-derived.json"
T4CAL = PROFILES / "t4-gpt2-xl-fp16-calibrated.json"
CPU = PROFILES / "cpu-gpt2-fp32.json"
H100 = PROFILES / "h100-gpt2-xl-fp16.json"
SIM_TO_REAL = ROOT / "results" / "sim_to_real.json"
PARTS = ROOT / "results" / "report_parts.json"

THESIS = {"violations": 2.1, "gpu_saving": 0.17, "first_scale": 2.29}
THESIS_THRESHOLDS = (20, 25, 30, 35)
# Thesis ch. 7 ran on one node with 4 T4s: 1 to 4 replicas. Everything else is the project's default.
THESIS_SPEC = {"min_deployment_count": 1, "max_deployment_count": 4}
# The planner's recommended settings, and the base of the HPA sweep on the traces (same knobs for all).
TRACE_SPEC = {
    "min_deployment_count": 1,
    "max_deployment_count": 64,
    "stabilization_window": 120,
    "time_window": 30,
}
WARMUP_S = 300.0
# How the traces' prompts (up to 8,192 tokens) are fitted into GPT-2's 1,024 (nlgsim --map-lengths).
TRACE_LENGTHS = "scale:0.125"
RAMP_S = 200.0
SENS_LOADS = (1.2, 1.6, 2.0, 2.56)
# The sensitivity runs: (column label, ramp seconds, scale-down stabilization). The thesis's Fig. 7.4
# has per-token scaling in after 120 s, which the project's default 300 s stabilization forbids, so the
# ramp is also run with 60 s.
SENS_PROTOCOLS = {
    "": ("step", 0.0, 300.0),
    "ramp": ("ramp", RAMP_S, 300.0),
    "ramp60": ("ramp, stab. 60 s", RAMP_S, 60.0),
}
FIXED_REFERENCES = (1, 2)


@dataclass(frozen=True)
class Job:
    key: str
    profile: str
    workload: str
    policy: str
    spec: dict[str, Any]
    slo: SLO
    count: int = 2000
    duration: float | None = None
    seed: int = 0
    ramp: float = 0.0
    since: float = 0.0
    initial: int | None = None
    planner: dict[str, float] = field(default_factory=dict)


@dataclass
class Outcome:
    job: Job
    summary: Summary
    times: list[float]
    replicas: list[int]
    wall_s: float


def run_job(job: Job) -> Outcome:
    t = time.perf_counter()
    profile = load_profile(job.profile)
    workload = parse_workload(
        job.workload, profile, count=job.count, duration=job.duration, seed=job.seed, ramp=job.ramp,
        lengths=TRACE_LENGTHS,
    )
    spec = scaler_spec({}, [f"{k}={v}" for k, v in job.spec.items()])
    cfg = planner_config(profile, workload.requests, job.slo, 5.0, None, **job.planner)
    policy, initial = build_policy(job.policy, spec, cfg)
    scenario = Scenario(profile, workload.requests, policy, initial_replicas=job.initial or initial, name=job.key)
    log = simulate(scenario)
    times, billed = replicas_over_time(log, step=1.0)
    summary = summarize(log, job.slo, job.key, since=job.since)
    return Outcome(job, summary, [float(x) for x in times], [int(x) for x in billed], time.perf_counter() - t)


def run_all(jobs: Sequence[Job], workers: int, log: Callable[[str], None]) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    if workers <= 1:
        results = map(run_job, jobs)
        for o in results:
            out[o.job.key] = o
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for o in pool.map(run_job, jobs):
                out[o.job.key] = o
    log(f"  {len(jobs)} runs, {sum(o.wall_s for o in out.values()):.0f} s of simulation")
    return out


# -- 1. the thesis's evaluation ------------------------------------------------------------------------


def thesis_jobs(
    profile: Path,
    rate: float,
    thresholds: Sequence[float],
    slo: SLO,
    seeds: Sequence[int],
    spec: dict[str, Any],
    count: int,
    tag: str,
    ramp: float = 0.0,
) -> list[Job]:
    policies = [f"request:{slo.request_s * 1000:g}", *(f"pertoken:{t:g}" for t in thresholds), "planner"]
    return [
        Job(f"{tag}|{p}|{s}", str(profile), f"complex:{rate:g}", p, spec, slo, count=count, seed=s, ramp=ramp)
        for s in seeds
        for p in policies
    ]


def lone_latency(profile: EngineProfile, count: int = 64) -> float:
    """Mean latency of a complex request alone on an idle replica (over ``count`` sampled requests)."""
    sample = thesis_requests(COMPLEX, 1.0, count, 0)
    total = 0.0
    for r in sample:
        log = simulate(Scenario(profile, [replace(r, arrival=0.0)], None, initial_replicas=1))
        total += float(request_table(log).latency[0])
    return total / count


def mean_of(outcomes: list[Outcome], fn: Callable[[Summary], float]) -> float:
    values = [fn(o.summary) for o in outcomes]
    finite = [v for v in values if not math.isnan(v)]
    return statistics.fmean(finite) if finite else math.nan


def ratio_text(x: float) -> str:
    return "-" if math.isnan(x) or math.isinf(x) else f"{x:.2f}"


def thesis_table(results: dict[str, Outcome], tag: str, seeds: Sequence[int]) -> tuple[str, dict[str, Any]]:
    names = sorted({k.split("|")[1] for k in results if k.startswith(tag + "|")}, key=_policy_order)
    by = {n: [results[f"{tag}|{n}|{s}"] for s in seeds] for n in names}
    base = next(n for n in names if n.startswith("request"))
    rows, ratios = [], {}
    for n in names:
        o = by[n]
        viol = mean_of(o, lambda s: s.violations["request"])
        gpu = mean_of(o, lambda s: s.gpu_seconds)
        first = mean_of(o, lambda s: s.first_scale_s)
        bviol = mean_of(by[base], lambda s: s.violations["request"])
        bgpu = mean_of(by[base], lambda s: s.gpu_seconds)
        bfirst = mean_of(by[base], lambda s: s.first_scale_s)
        r = {
            "violations": bviol / viol if viol else math.inf,
            "gpu_saving": 1 - gpu / bgpu,
            "first_scale": bfirst / first if first else math.nan,
        }
        ratios[n] = r
        rows.append(
            {
                "policy": n,
                "violations (2 s)": f"{viol:.0f}",
                "attainment %": f"{100 * mean_of(o, lambda s: s.attainment):.1f}",
                "GPU-s": f"{gpu:.0f}",
                "first scale-out s": "-" if math.isnan(first) else f"{first:.1f}",
                "max pods": f"{mean_of(o, lambda s: s.max_replicas):.1f}",
                "viol. ratio (base/this)": ratio_text(r["violations"]),
                "GPU-s saved vs base": f"{100 * r['gpu_saving']:.1f}%",
                "first-scale ratio": ratio_text(r["first_scale"]),
            }
        )
    return format_table(rows), ratios


def thesis_run(results: dict[str, Outcome], tag: str, seeds: Sequence[int], title: str, figure_title: str) -> ThesisRun:
    table, ratios = thesis_table(results, tag, seeds)
    return ThesisRun(tag, title, table, ratios, thesis_figures(results, tag, figure_title))


def _policy_order(name: str) -> tuple[int, float]:
    kind, _, arg = name.partition(":")
    return ({"request": 0, "pertoken": 1, "planner": 2}.get(kind, 3), float(arg or 0))


def thesis_figures(results: dict[str, Outcome], tag: str, title: str) -> list[str]:
    seed0 = {k.split("|")[1]: o for k, o in results.items() if k.startswith(tag + "|") and k.endswith("|0")}
    names = sorted(seed0, key=_policy_order)
    summaries = [seed0[n].summary for n in names]
    paths = [
        plots.bars(
            summaries,
            "first_scale_s",
            "seconds",
            f"Fig. 7.1 first scaling time ({title})",
            FIGURES / f"{tag}_fig7_1_first_scaling.png",
        ),
        plots.bars(
            summaries,
            "request",
            "requests over 2 s",
            f"Fig. 7.2 SLO violations ({title})",
            FIGURES / f"{tag}_fig7_2_violations.png",
        ),
        plots.bars(
            summaries,
            "gpu_seconds",
            "GPU-seconds",
            f"Fig. 7.3 total resource usage ({title})",
            FIGURES / f"{tag}_fig7_3_gpu_seconds.png",
        ),
    ]
    paths.append(
        _replicas_figure(
            {n: seed0[n] for n in names},
            FIGURES / f"{tag}_fig7_4_replicas.png",
            f"Fig. 7.4 GPUs over time ({title})",
        )
    )
    return [p.name for p in paths]


def _replicas_figure(outcomes: dict[str, Outcome], path: Path, title: str, orc: OracleResult | None = None) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    for name, o in outcomes.items():
        ax.step(o.times, o.replicas, where="post", label=name, linewidth=1.3)
    if orc is not None:
        t = np.arange(len(orc.replicas) + 1) * orc.interval
        ax.step(t, [*orc.replicas, orc.replicas[-1]], where="post", linestyle="--", color="black", label="oracle")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("replicas (GPUs)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- 2. traces -----------------------------------------------------------------------------------------


def trace_jobs(
    profile: Path,
    trace: str,
    slo: SLO,
    duration: float | None,
    initial: int,
    thresholds: Sequence[float],
    windows: Sequence[float],
    planners: dict[str, dict[str, float]],
    request_ms: Sequence[float],
) -> list[Job]:
    wl = f"trace:{TRACES / (trace + '.csv')}"
    jobs = []
    for name, over in planners.items():
        jobs.append(
            Job(
                f"{trace}|{name}",
                str(profile),
                wl,
                "planner",
                {**TRACE_SPEC, **PLANNER_SPECS.get(name, {})},
                slo,
                duration=duration,
                since=WARMUP_S,
                initial=initial,
                planner=over,
            )
        )
    for th in thresholds:
        for w in windows:
            spec = {**TRACE_SPEC, "time_window": w}
            jobs.append(
                Job(
                    f"{trace}|pertoken:{th:g} w{w:g}",
                    str(profile),
                    wl,
                    f"pertoken:{th:g}",
                    spec,
                    slo,
                    duration=duration,
                    since=WARMUP_S,
                    initial=initial,
                )
            )
    for ms in request_ms:
        jobs.append(
            Job(
                f"{trace}|request:{ms:g} w30",
                str(profile),
                wl,
                f"request:{ms:g}",
                TRACE_SPEC,
                slo,
                duration=duration,
                since=WARMUP_S,
                initial=initial,
            )
        )
    # References, not autoscalers: what a constant replica count gets.
    for n in FIXED_REFERENCES:
        jobs.append(
            Job(f"{trace}|fixed:{n}", str(profile), wl, f"fixed:{n}", TRACE_SPEC, slo, duration=duration,
                since=WARMUP_S, initial=n)
        )  # fmt: skip
    return jobs


def trace_section(
    results: dict[str, Outcome], trace: str, orc: OracleResult, startup_s: float, tag: str
) -> tuple[str, dict[str, Any]]:
    ours = {k.split("|", 1)[1]: o for k, o in results.items() if k.startswith(trace + "|")}
    bound = orc.gpu_seconds_since(WARMUP_S)
    paid = orc.gpu_seconds_with_startup(startup_s, WARMUP_S)
    names = list(ours)
    points = [(ours[n].summary.gpu_seconds, 1 - ours[n].summary.attainment) for n in names]
    front = set(pareto_front(points))
    rows = []
    for i, n in enumerate(names):
        s = ours[n].summary
        rows.append(
            {
                "policy": n,
                "front": "*" if i in front else "",
                "attainment %": f"{100 * s.attainment:.2f}",
                "TTFT viol": str(s.violations["ttft"]),
                "per-token viol": str(s.violations["pertoken"]),
                "GPU-s": f"{s.gpu_seconds:.0f}",
                "x oracle": f"{s.gpu_seconds / bound:.2f}",
                "x start-up bound": f"{s.gpu_seconds / paid:.2f}",
                "max pods": str(s.max_replicas),
                "TTFT p99 ms": f"{1000 * s.ttft_p99_s:.0f}",
                "per-token p99 ms": f"{1000 * s.per_token_p99_s:.0f}",
            }
        )
    planners = [n for n in names if n.startswith("planner")]
    meeting = [n for n in planners if ours[n].summary.attainment >= 0.99]
    best = min(meeting or planners, key=lambda n: ours[n].summary.gpu_seconds)
    hpa_ok = [n for n in names if n.startswith(("pertoken", "request")) and ours[n].summary.attainment >= 0.99]
    fixed_ok = [n for n in names if n.startswith("fixed") and ours[n].summary.attainment >= 0.99]
    best_fixed = min(fixed_ok, key=lambda n: ours[n].summary.gpu_seconds) if fixed_ok else None
    best_hpa = min(hpa_ok, key=lambda n: ours[n].summary.gpu_seconds) if hpa_ok else None
    pts = [(n, ours[n].summary.gpu_seconds, 100 * (1 - ours[n].summary.attainment)) for n in names]
    plots.tradeoff(
        pts,
        FIGURES / f"{tag}_{trace}_tradeoff.png",
        f"{trace}: SLO misses against GPU-seconds",
        front=[pts[i] for i in sorted(front)],
        oracle_gpu=bound,
        ylabel="requests missing the SLO (%)",
    )
    shown = {best: ours[best]}
    if best_hpa:
        shown[best_hpa] = ours[best_hpa]
    _replicas_figure(shown, FIGURES / f"{tag}_{trace}_replicas.png", f"{trace}: replicas over time", orc)
    info = {
        "oracle_gpu_s": bound,
        "startup_s": startup_s,
        "oracle_startup_gpu_s": paid,
        "best_planner_x_startup_bound": ours[best].summary.gpu_seconds / paid,
        "best_fixed_x_startup_bound": ours[best_fixed].summary.gpu_seconds / paid if best_fixed else None,
        "best_planner": best,
        "best_planner_attainment": ours[best].summary.attainment,
        "best_planner_x_oracle": ours[best].summary.gpu_seconds / bound,
        "best_hpa": best_hpa,
        "best_hpa_x_oracle": ours[best_hpa].summary.gpu_seconds / bound if best_hpa else None,
        "best_fixed": best_fixed,
        "best_fixed_x_oracle": ours[best_fixed].summary.gpu_seconds / bound if best_fixed else None,
        "oracle_max_replicas": max(orc.replicas),
        "oracle_mean_replicas": bound / max(orc.gpu_seconds_end - WARMUP_S, 1e-9),
        "oracle_unattainable_intervals": len(orc.unattainable),
        "oracle_intervals": len(orc.replicas),
    }
    return format_table(rows), info


# -- the report ----------------------------------------------------------------------------------------

# The traces run on the measured H100 profile (GPT2-XL fp16), the hardware the project serves on.
# The SLO: TTFT within 1 s and a per-token latency (the thesis's metric) within 50 ms, 20 tokens a
# second, the order of the thesis's 20-35 ms thresholds. Per trace: (name, SLO, per-token thresholds
# (ms) to sweep, request thresholds (ms), about the p95 output at the per-token SLO).
TRACE_SLO = SLO(ttft_s=1.0, per_token_s=0.05, attain=("ttft", "pertoken"))
TRACE_SETUPS = [
    ("azure2023_conv", TRACE_SLO, (10, 15, 25), (10_000,)),
    ("azure2023_code", TRACE_SLO, (10, 15, 25), (2_000,)),
]
# The planner's per-token plan target (a fraction of the SLO) and headroom.
PLANNER_VARIANTS = {
    "planner (target 0.6 SLO)": {"per_token_target_s": 0.6 * TRACE_SLO.per_token_s},
    "planner (target 0.6 SLO, headroom 0.7)": {
        "per_token_target_s": 0.6 * TRACE_SLO.per_token_s,
        "headroom": 0.7,
    },
    "planner (target 0.3 SLO)": {"per_token_target_s": 0.3 * TRACE_SLO.per_token_s},
    "planner (target 0.6 SLO, stabilization 600 s)": {"per_token_target_s": 0.6 * TRACE_SLO.per_token_s},
    "planner (target 0.6 SLO, stabilization 1200 s)": {"per_token_target_s": 0.6 * TRACE_SLO.per_token_s},
}
# Scaler settings of a planner variant where it differs from TRACE_SPEC: a longer stabilization keeps
# a pod added for a burst through the next ones (the code trace's bursts come minutes apart).
PLANNER_SPECS: dict[str, dict[str, Any]] = {
    "planner (target 0.6 SLO, stabilization 600 s)": {"stabilization_window": 600},
    "planner (target 0.6 SLO, stabilization 1200 s)": {"stabilization_window": 1200},
}


SETUP = """\
- **Replicas**: N pods behind a Service, routed **round-robin** over ready pods (kube-proxy's IPVS
  mode; `--routing least-loaded` is the other choice). Each pod is one continuous-batching engine that
  follows `triton_backend`'s engine step for step: FCFS admission while the KV cache has room for a
  request's choices, then every step one decode of all running choices plus at most 256 prompt tokens
  of prefill (chunked); everything a step produces is emitted when it ends. Step time comes from the
  engine profile: decode(batch, context) + P(end) - P(start) per prefill chunk, where the context is
  the batch's mean, or its longest where the profile's engine pads attention to it (the CPU's).
- **Pods** are ready `startup_s` after creation and cost GPU-seconds from creation until gone (start-up
  and draining counted). Scale-in deletes not-ready pods first, then the ready pod with the fewest
  requests in flight; a deleted pod drains what it admitted.
- **Autoscaler**: each ready pod is scraped every 5 s into the collector's `PodSample` (the four
  latency histograms with the buckets of docs/metrics.md, and the running/waiting/KV gauges); every 5 s
  (`loop.interval`) the real `WindowAggregator` takes the new samples and the policy decides; the
  Deployment is scaled at once. Both HPA-style policies are `autoscaler.decide.decide` itself.
- **Oracle**: the trace is cut into 30 s intervals; each gets the fewest replicas (within the
  policies' bounds, 1 to 64) with which its requests meet the SLO at 99% attainment, found by
  simulating that interval (after 60 s of warm-up traffic on the same replicas) on fixed, instantly
  ready replicas. Its GPU-seconds are the sum of replicas x interval: zero start-up, no draining, and
  each interval sized alone, so a policy that must start pods ahead of time and keep them through a
  stabilization window pays more. An interval where even 64 replicas miss 99% is *unattainable*: it
  is charged 1 replica (the least any policy could use there) and counted in the report, because
  charging the cap would make the "lower bound" higher than what a policy that gives up there uses.
  The last run's oracle did worse: it searched up to 256 replicas while the policies were held to
  64 (and charged 256 where no count met the target), so on the code trace (CPU profile) it averaged
  74 replicas and every policy came out at 0.26-0.62x of the "lower bound". Now it searches the
  policies' range.
- Deterministic: the same scenario and seed give the same run, bit for bit (tested)."""

PROFILE_NOTES = """\
`cpu-gpt2-fp32.json` is **measured** with `python -m nlgsim profile` on the real engine on this
2-core machine (the project's `triton_backend`, GPT-2 124M with random weights from a fixed seed, fp32;
the minimum over repetitions, because other processes share the cores; its eager decode step pads
attention to the longest context in the batch, and the simulator prices it so). It was re-measured
for this report after the engine started keeping its freed host memory for reuse (one malloc arena
and no trimming, `triton_backend/host_memory.py`). A decode step at batch 64 and context 128 now takes
181 ms instead of 355, and at batch 8 and context 1,024 118 ms instead of 209. A lone step is about
as before (section 3). Its start-up, 30 s, was measured while other work loaded the machine (load
average 1.5-1.8). `h100-gpt2-xl-fp16.json` is **measured** the same way on one H100 (GPT2-XL
1.56B, random weights, fp16, CUDA graphs: a step costs the batch's mean context); its start-up, 60
s, is **given**, not measured (a GPU pod's image pull and model load are not reproducible on the
profiling machine). `t4-gpt2-xl-fp16-derived.json` is **derived**, not measured: a roofline model of
the same engine serving GPT2-XL in fp16 on a T4, the thesis's setting, with every assumption in
`benchmarks/derive_profile.py` (effective 240 GB/s and 20 TFLOP/s, 6 ms a step of launch overhead,
32 KV slots, 40 s start-up). It puts a lone sequence at about 19 ms a token, which is where the
thesis's 20-35 ms thresholds sit. `t4-gpt2-xl-fp16-calibrated.json` is derived the same way with
three assumptions changed so that one replica carries what the thesis measured one T4 carry (section
1). Saturation rates are one replica's throughput with an endless queue."""

THESIS_SETUP = """\
Protocol (thesis 7.1): complex queries (Table 4.2: 82 prompt tokens, 4 choices of 15-64 tokens, mean
62) at a Poisson {rate:g} req/s, which is {rel:.2f}x the saturation rate of one derived-T4 replica
({cap:.2f} req/s); 3,840 requests; one replica at the start, at most 4 (the thesis's 4 T4s); SLO 2,000 ms
request latency. Policies: `request` at 2,000 ms (the baseline) and `pertoken` at 20/25/30/35 ms, both
the live `autoscaler.decide.decide` with the project's defaults otherwise (60 s window, tolerance 0.1,
300 s scale-down stabilization, up to 4 pods added per 15 s); and the project's planner. Five
seeds of the arrival process; the figures show seed 0."""

CAL_THESIS = """\
The derived T4 above is a model of an eager engine: one replica carries 22 simple or 3.9 complex
requests a second. The thesis measured more on one T4 (ch. 4): simple queries served at 40 req/s (not
at 80), complex ones topping out at 13, 20 and 30 req/s on 2, 3 and 4 GPUs, about 6.5-7.5 a GPU. So
its 10 req/s was about 1.4x one replica, not 2.56x, and a lone sequence was faster than our 19 ms a
token, which puts the 20 ms threshold right at our engine's floor. `t4-gpt2-xl-fp16-calibrated.json`
(`python -m benchmarks.derive_profile --variant calibrated`) changes three assumptions to match those
capacities: 87.5% of the T4's bandwidth, 1 ms a step of fixed cost (a fused engine with CUDA graphs)
and 64 sequences (paged KV); its saturation is in the profile table. A lone sequence then takes about
12 ms a token. The protocol is the same, at the thesis's own 10 req/s."""

CPU_THESIS = """\
The same protocol on the measured profile, with every latency of the thesis's setting multiplied by
k = {k:.2f}, the latency of a lone complex request on an idle CPU replica over the same on the
derived T4 ({lone_cpu:.2f} s against {lone_t4:.2f} s): the SLO is k x 2,000 ms, the per-token
thresholds k x 20/25/30/35 ms (rounded to 10 ms and 1 ms), and the rate is the same multiple of one
replica's saturation rate. Start-up is the measured one. (The last run took k from one sequence's
decode step, 1.92 with the CPU profile of then; but a complex request decodes its 4 choices as a
batch of 4, where that CPU engine was relatively much slower, so a lone request, 5.97 s, took longer
than the 3.8 s SLO that k gave and every policy scored 0% attainment.)"""

TRACE_SETUP = """\
Traces: `../shared/traces/azure2023_{{conv,code}}.csv` (Azure LLM inference traces, 2023), the whole
hour at its recorded rate, on the **measured H100 profile** (GPT2-XL fp16), the hardware the project
serves on. The last run used the CPU profile: one 2-core replica carries about 0.13 (conversation)
or 0.9 (code) requests a second of these traces, so every policy ran into the 64-pod cap and the
comparison was about the cap, not the policies. On the H100 one replica carries about 10
(conversation) or 28 (code) requests a second with an endless queue, against the traces' 5.5 and 2.5
on average: the cap never binds, and the question becomes whether a policy can follow the traces'
bursts with few replicas. GPT-2's context is 1,024 tokens, shorter than many of these prompts, so
lengths are mapped by **scaling prompts by 1/8** (the ratio of GPT-2's window to the 8,192 tokens
the traces' prompts fit in: code's p99 prompt is 7,436 tokens), capping outputs at 512 and then
clipping the prompt to 1,024 - output (the mapping and the number of clipped rows are in each
workload line). Each run starts with the oracle's replicas for the first interval and the first
{warmup:.0f} s are a warm-up: attainment, GPU-seconds and the oracle count from then on. All
policies share `min 1, max 64, stabilization 120 s`; the HPA runs sweep the per-token threshold and
the window (30 or 60 s), the request policy runs at one threshold; `fixed:1` and `fixed:2` (no
autoscaler) are references. The planner's settings: per-token plan target a fraction of the SLO,
headroom, lead time = start-up + one loop (5 s), trend over 60 s, backlog drained over 20 s, tail
guards at the SLO (p99 per-token and p99 TTFT); two variants keep the planner's pods through a
longer stabilization (600 or 1,200 s) than the shared 120 s."""

LIMITATIONS = """\
- The T4 profiles are derived, not measured; their absolute numbers are a model. The H100 profile is
  measured, but its 60 s start-up is an assumption.
- At the traces' recorded rates one or two H100 replicas of GPT2-XL carry them: the trace results say
  how well a policy handles bursts at a small scale, not how it tracks a fleet of tens of replicas.
  Multiplying a trace's rate (superposing shifted copies, or replaying it faster) would change its
  burst structure, so it is not done here.
- Sim-to-real is checked on the CPU only (this machine has no GPU); the H100 profile's predictions
  are not checked against a served H100.
- The thesis's ratios depend on its metric pipeline (KEDA, Prometheus), which is not modelled here: the simulator models
  the project's autoscaler (direct scrapes every 5 s), not the thesis's.
- The engine model takes step time from the profile as a function of batch and context (the mean,
  or the longest where the profile says the engine pads to it); the served engine's per-step costs
  beyond the profile (Triton's responses, the gRPC client, other processes on the cores) are not in
  the in-process profile: section 3 measures how much they add on this machine.
- Output lengths are known to the engine in a replay (`ignore_eos` with `max_tokens`), as the
  simulator assumes; with real EOS the engine's admission would use its length predictions.
- One replica is one GPU; multi-instance pods and GPU sharing are not modelled.
- The planner's workload mix (mean prompt and output tokens) is configured from the trace, because the
  autoscaler's `PodSample` carries no token counters; in production it would have to come from
  `nlg_prompt_tokens_total` / `nlg_generation_tokens_total` rates."""


def summary(
    thesis: list[ThesisRun], cal_runs: list[ThesisRun], traces: list[Any], real: dict[str, Any] | None
) -> str:
    """The report's opening lines, built from the numbers so that they cannot drift from the tables."""
    lines = ["**Results against the issue's goals** (each explained in its section):", ""]
    for label, run in [*(("derived T4", r) for r in thesis), *(("calibrated T4", r) for r in cal_runs)]:
        r = run.ratios
        pertoken = sorted((key for key in r if key.startswith("pertoken:")), key=lambda key: float(key[9:]))
        r20, first = r[pertoken[0]], max(r[key]["first_scale"] for key in pertoken)
        ok = {key: verdict(v >= THESIS[key]) for key, v in (*r20.items(), ("first_scale", first))}
        lines.append(
            f"- Thesis reproduction, {label} ({run.title[0].lower() + run.title[1:]}): violations "
            f"{ratio_text(r20['violations'])}x fewer with per-token 20 ms (thesis 2.1x: {ok['violations']}); "
            f"GPU-seconds {100 * r20['gpu_saving']:+.1f}% saved (thesis 17%: {ok['gpu_saving']}); "
            f"first scale-out {ratio_text(first)}x sooner (thesis 2.29x: {ok['first_scale']})."
        )
    for trace, _desc, _slo, _table, info in traces:
        ok = info["best_planner_attainment"] >= 0.99 and info["best_planner_x_oracle"] <= 1.15
        lines.append(
            f"- {trace} (measured H100 profile): the planner's best variant reaches "
            f"{100 * info['best_planner_attainment']:.2f}% attainment at {info['best_planner_x_oracle']:.2f}x "
            f"the oracle's GPU-seconds (goal >= 99% at <= 1.15x: {verdict(ok)}); "
            f"{info['best_planner_x_startup_bound']:.2f}x a clairvoyant scaler that pays the "
            f"{info['startup_s']:g} s start-up, which itself needs "
            f"{info['oracle_startup_gpu_s'] / info['oracle_gpu_s']:.2f}x the oracle."
        )
    if real is not None:
        raw = real["metrics"]
        cal = real.get("calibrated_metrics", {})
        text = ", ".join(f"{m} {100 * v['p50_error']:+.0f}%" for m, v in raw.items())
        ok = all(abs(v["p50_error"]) <= 0.2 for v in raw.values())
        line = f"- Sim-to-real median error with the in-process profile: {text} (goal <= 20%: {verdict(ok)})"
        if cal:
            ctext = ", ".join(f"{m} {100 * v['p50_error']:+.0f}%" for m, v in cal.items())
            cok = all(abs(v["p50_error"]) <= 0.2 for v in cal.values())
            line += (
                "; with the serving path's overhead, measured on probe requests (lone and a batch of 4), "
                f"added: {ctext} ({verdict(cok)})"
            )
        lines.append(line + ".")
    lines.append("- The simulator is deterministic for a seed (tested in tests/sim).")
    return "\n".join(lines)


DISCUSSION_THESIS = """\
**As the thesis describes its load** (10 req/s from the first second, 2.56x what one replica
carries), every policy makes the same decision at the same moment: at 9.9 s, the first round whose
window has data, one replica is so far over any threshold that HPA's `ceil(current x value /
target)` asks for the maximum, 4, whichever signal it reads. The violations (1,073-1,098 of 3,840)
come from the 40 s the new pods take to start: with 4 replicas from the start the same load misses
29 (seed 0). Every ratio is within 2% of 1. Under a step load the thesis's differences cannot come
from the policies' arithmetic; they need a load that builds up.

**With the same rate reached over 200 s** the thesis's ordering appears, stronger than it reports
for violations and first scaling: per-token at 20 ms scales out at 16.3 s against 95.3 s for the
request policy (5.84x) and misses 57 requests against 599 (10.55x); per-token at 25 ms lands on the
thesis's 2.1x (2.09x, first scale-out 1.40x); 30 ms is about the baseline and 35 ms is worse than
it. The reason is the thesis's own: a request's latency reaches the autoscaler only when the request
ends, and crosses 2,000 ms only once requests already miss a 2,000 ms SLO, while per-token latency
rises with the batch long before. The 20 ms threshold is extreme here: a lone complex request on the
derived T4 already takes 20.4 ms a token, so the first growth of the batch puts it over the 10%
tolerance.

**The GPU-seconds claim is not reproduced**: per-token at 20 ms uses 14.7% *more* GPU-seconds than
the baseline, not 17% less. The cause is in the protocol, not in a setting tuned one way or the
other: all policies reach the cap of 4 replicas and none scales in before the last request finishes
(the load stays at 10 req/s to the end, and scale-in waits 300 s), so GPU-seconds measure only how
early a policy scaled out: 3 pods x (95.3 - 16.3 s) = 237 GPU-s, exactly the gap (1,853 against
1,616). Under this protocol a policy that scales out sooner cannot use fewer GPU-seconds; the
thesis's saving must come from something this protocol does not contain (an end of the load and a
scale-in, or a request policy that overshoots a higher cap), which its description does not give.
The sensitivity table shows the same at 1.2-2.56x one replica: under the ramp per-token at 20 ms
always scales out 8-11x sooner and always costs 14-27% more. Under the step load nothing differs
except GPU-seconds at 1.2x: that run lasts about 800 s, long enough for the request policy to scale
in once its latency falls, while per-token at 20 ms, its threshold at the engine's floor, never
scales in (14% more). The thesis's Fig. 7.4 has per-token scaling in after 120 s, which a 300 s
scale-down stabilization forbids, so the ramp also ran with 60 s (the last two columns): that does
not bring the saving either. Where the load leaves room (1.2x and 1.6x one replica), it is the
request policy that scales in, since its latency falls back under 2,000 ms once 4 pods serve (seed 0
at 1.2x: 4 -> 3 pods at 361 s), while per-token at 20 ms holds its 4 pods, its threshold being the
engine's floor: per-token at 20 ms then costs 39% and 19% more; at 2-2.56x nothing scales in before
the end and the figures equal the 300 s ones. A latency signal saves GPU-seconds by scaling in, and
here the signal whose threshold sits far above its floor is the one that can.

**On the calibrated T4** (one replica carries what the thesis measured one T4 carry; a lone
sequence at about 12 ms a token) the picture is the same, and the ramp's ratios are weaker. Under
the step load every ratio is again within 2% of 1: 10 req/s is still 1.4x one replica, and every
policy asks for pods at the first round with data. Under the ramp, per-token at 20 ms has 2.24x
fewer violations (the thesis's 2.1x: met), but it scales out only 1.32x sooner (110.3 s against
145.3 s) and uses 7.2% more GPU-seconds. With the floor at 12 ms, per-token latency crosses 20 ms
later in the ramp than on the derived profile, so its lead over request latency is smaller. Neither
profile gives all three of the thesis's ratios together, and neither gives the GPU-seconds saving.

**On the measured CPU profile**, with k taken from a lone complex request (the section above), the runs
say little about the policies. Per-token at k x 20 ms still scales out sooner under the ramp (3.76x;
1.00x at the step) for 0.1-2.1% more GPU-seconds, but the violations differ by 0-2%, and
attainment is 40-45% for every policy. Most violations are steady-state ones that 4 replicas also
have, because the CPU engine's step grows far faster with the batch than the T4's (29 / 64 / 181 ms
at batch 1 / 16 / 64 against 19 / 25 / 31 ms at 1 / 16 / 32, context 128), so under load requests
outgrow an SLO of only 1.5x a lone request's latency. (The last report's CPU runs had 77-80%
attainment. The engine has since become about twice as fast at large batches, so the same 2.56x of
one replica's capacity is a higher rate, 2.93 req/s instead of 1.64, and the batches are larger.)
And the 3,840 requests span about 1,300 s instead of about 400 s, so the start-up transient where
the policies differ is a small part of the run.

The project's planner scales at the first round with data under the ramp (5.3 s on the T4, 3.5 s on
the CPU; it forecasts one pod start-up ahead from the demand trend) and has the fewest violations of
all (39 on the T4, 99.0% attainment), for 17.2% more GPU-seconds than the baseline, about what
per-token at 20 ms costs. Under the step load it does what the others do: nothing can start a pod
faster than its start-up time."""
DISCUSSION_TRACES = """\
**azure2023_conv**: at the recorded rate (5.5 req/s on average, at most 8.5 in a minute) one H100
replica of GPT2-XL serves the whole hour within the SLO (fixed:1 has no violation; TTFT p99 91 ms,
per-token p99 9 ms), so the oracle is 1 replica throughout and so is every policy but the planner
with headroom 0.7, which adds a second pod for a while (1.16x). The goal is met, but trivially: this
trace does not test scaling on this hardware.

**azure2023_code** is the real test, and the goal is **not met**. Its average is low (2.5 req/s) but
it comes in bursts: up to 268 requests and 70,597 prompt tokens (after the 1/8 mapping) in 5 s, at
570, 855-860 and 1,410 s, against a replica that prefills about 13,000 tokens a second. One replica
then queues for several seconds (fixed:1: 88.0%, TTFT p99 4.3 s); two hold the SLO (fixed:2:
99.48%). The oracle, which knows when each burst comes and starts pods instantly, gives most
intervals 1 replica and those with a burst 2 or 3 (1.22 on average): 3,812 GPU-s. A causal policy
sees a burst only after it has started, and a pod takes 60 s to be ready, while a burst lasts
seconds: with the shared 120 s stabilization the planner's extra pods (up to 3) arrive after the
burst they answer and are gone before the next, so its attainment is barely above fixed:1's (89.10%
against 88.02%) at 1.31x the oracle, and its plan targets and headroom barely matter (4,993-5,003
GPU-s): whatever they plan, a pod comes 60 s after the burst that called for it. Kept through a
longer stabilization, the pod added for one burst is there for the next, minutes later: 99.27% at
2.01x (600 s) and 99.10% at 1.92x (1,200 s), the planner's best at >= 99%, and still dearer than a
constant 2 replicas. The HPA per-token policy at 10 ms with a 60 s window does reach 99.99%, by
climbing to 64 pods early in the hour and to 48 near its end, and keeping 2 or more for most of the
hour in between (8.60x the oracle; figure below); at 15 ms it gets 98.74% at 8.10x; the request
policy behaves like fixed:1. Among everything tried, the cheapest configuration at >= 99% is a
constant 2 replicas at 1.65x the oracle. Meeting 99% at <= 1.15x would need about 1.4 replicas on
average with the second one present at bursts that come without warning, which none of these
policies can do: holding pods longer buys attainment with GPU-seconds, as the stabilization variants
show, and does not approach 1.15x.

**The 1.15x goal is below what pod start-up allows on this trace.** The oracle creates pods at no
cost. A scaler that knew the whole trace in advance, had exactly the oracle's replicas ready in every
interval, and paid each pod's 60 s start-up (starting it one start-up ahead, and keeping it through
a gap when restarting would cost more) uses 4,742 GPU-s, **1.24x** the oracle, because the oracle's
second and third replicas come and go in 15 separate stretches of 30-120 s after the warm-up. So 1.15x is out of reach
for any policy that serves every interval the way the oracle does, clairvoyant or not. Against that
bound (column "x start-up bound"), a constant 2 replicas is at 1.32x and the planner's best variant
at 1.54x. What is left between them is the price of not knowing when a burst comes. Most large
bursts recur 225-330 s apart (570, 855, 1,185, 1,410, 1,695, 1,975, 2,285 and 2,585 s), with others
in between (1,080, 1,370 and 2,180 s) and none from 2,600 to 3,420 s. A forecast of that period
could start a pod before each burst and drop it between them. But a pod needs 60 s to start, the
timing varies by up to 60 s either way, and a burst lasts about 30 s, so the pod would be held about
half of each period: about 1.5 replicas on average, close to fixed:2's cost, with the bursts off the
period missed. It is not built. Starred rows with attainment under 99% (fixed:1 at 0.82x) are
cheaper than the oracle because they give up the bursts: the oracle bounds only policies that meet
the target."""
DISCUSSION_REAL = """\
**What separates the raw simulator from the real server.**

*The serving path.* The profile is the engine's step in-process, with the cores to itself. The
replay goes through tritonserver, the Python backend's stub (each step's tokens become one response
per request, passed to the server and sent over gRPC) and a Python gRPC client, all on the same 2
cores. Lone requests through the same server, just before and after the replay, put that work at
the per-prompt and per-step figures of the calibration line above: for a lone request about a quarter
of its decode step's own time. It is not in the in-process
profile, so the raw simulator is faster than the real server.

*The profile must match the engine.* A profile measured before an engine change mispredicts at once:
right after the oneDNN change a replay measured a median per-token latency of 53 ms against the
simulator's 88 ms with the older profile. `cpu-gpt2-fp32.json` is re-measured with every engine
change (`python -m nlgsim profile`); this report's is the current engine's.

*Other work on the machine.* Other processes shared the cores during some measurements today, and the
raw error follows the load average (-35%/-33% at about 1.1, -49%/-36% at 1.5-2.9 and -66%/-63% at
about 3, with the engine of the morning).

With the serving overhead added to the profile (`EngineProfile.with_overhead`; measured on other
requests, before and after the replay, never fitted to the replayed window), the simulator's
batching and queueing put the medians within the calibrated rows' errors above. The overhead has a
part per step and a part per sequence in the step: the stub builds and sends one response per
request per step, so serving work grows with the batch, and lone requests alone see only a batch of
one. A batch of four probe requests arriving together separates the two (the calibration line above).
With the per-step part alone, as first built, per-token latency came out 22% low on the engine of
the last report; the per-sequence part closes that. The raw comparison stays outside 20%: the
in-process profile does not contain the serving path, and profiling through the server (the
profiler timing steps through tritonserver and a client, as the replay does) would be the way to make
it."""


def startup_bound_text(info: dict[str, Any]) -> str:
    """The oracle's schedule with each pod's start-up paid, as a sentence (``info`` from trace_section)."""
    ratio = info["oracle_startup_gpu_s"] / info["oracle_gpu_s"]
    reach = "so 1.15x the oracle is out of reach even for it" if ratio > 1.15 else "within 1.15x"
    return (
        f"A clairvoyant scaler that has the oracle's replicas ready in every interval but pays each pod's "
        f"{info['startup_s']:g} s start-up (created one start-up ahead, kept through gaps shorter than a "
        f"start-up) uses {info['oracle_startup_gpu_s']:.0f} GPU-s, {ratio:.2f}x the oracle, {reach} "
        "(column 'x start-up bound')."
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


@dataclass
class ThesisRun:
    tag: str
    title: str
    table: str
    ratios: dict[str, Any]
    figures: list[str]


def claims(ratios: dict[str, Any]) -> str:
    # The lowest per-token threshold plays the thesis's 20 ms (on the CPU profile they are scaled by k).
    pertoken = sorted((key for key in ratios if key.startswith("pertoken:")), key=lambda key: float(key[9:]))
    r20 = ratios[pertoken[0]]
    first = max(ratios[key]["first_scale"] for key in pertoken)
    rows = [
        ("violations, request / per-token 20 ms", "2.1x", f"{ratio_text(r20['violations'])}x",
         r20["violations"] >= THESIS["violations"]),
        ("GPU-seconds saved by per-token 20 ms", "17%", f"{100 * r20['gpu_saving']:.1f}%",
         r20["gpu_saving"] >= THESIS["gpu_saving"]),
        ("first scaling, request / per-token (best of 20-35 ms)", "2.29x", f"{ratio_text(first)}x",
         first >= THESIS["first_scale"]),
    ]  # fmt: skip
    return format_table(
        [{"claim": c, "thesis": t, "here": h, "at least the thesis's": verdict(ok)} for c, t, h, ok in rows]
    )


def render(
    t4: EngineProfile,
    cpu: EngineProfile,
    h100: EngineProfile,
    t4_rate: float,
    t4_cap: float,
    k: float,
    thesis: list[ThesisRun],
    cal_runs: list[ThesisRun],
    cpu_runs: list[ThesisRun],
    sens_rows: list[dict[str, str]],
    traces: list[Any],
    real: dict[str, Any] | None,
    wall: float,
    quick: bool,
) -> str:
    out = [
        "# Scaling policies in simulation: the thesis reproduced, and a planner on real traces",
        "",
        f"Generated by `python -m benchmarks.scaling_policies` ({wall / 60:.0f} min on 2 CPU cores"
        + (", **--quick run: fewer seeds, 900 s of each trace**" if quick else "")
        + "). The simulator is `nlgsim` (docs/simulator.md); every run drives the live autoscaler's "
        "`autoscaler.aggregate.WindowAggregator` and `autoscaler.decide.decide`, imported, on a fake clock.",
        "",
        summary(thesis, cal_runs, traces, real),
        "",
        "## What is simulated",
        "",
        SETUP,
        "",
        "## Engine profiles",
        "",
        profile_rows({f"profiles/{path.name}": loaded for path, loaded in
                      ((T4, t4), (T4CAL, load_profile(T4CAL)), (CPU, cpu), (H100, h100))}),  # fmt: skip
        "",
        PROFILE_NOTES,
        "",
        "## 1. The thesis's evaluation (ch. 7), reproduced",
        "",
        THESIS_SETUP.format(rate=t4_rate, rel=t4_rate / t4_cap, cap=t4_cap),
        "",
    ]
    for run in thesis:
        out += [
            f"### {run.title}",
            "",
            "Mean over the seeds (first scale-out: seconds from the first request to the first decision "
            "to add pods; ratios against `request:2000`):",
            "",
            run.table,
            "",
            claims(run.ratios),
            "",
            *(f"![{f}](figures/{f})" for f in run.figures),
            "",
        ]
    out += [
        "### Sensitivity to the load (seeds 0-1; request / per-token for violations and first scaling, "
        "GPU-seconds saved by per-token)",
        "",
        format_table(sens_rows),
        "",
        "### The same on a T4 profile calibrated to the thesis's own capacities",
        "",
        CAL_THESIS,
        "",
    ]
    out += sub_runs(cal_runs)
    out += [
        "### The same on the measured CPU profile",
        "",
        CPU_THESIS.format(k=k, lone_cpu=lone_latency(cpu), lone_t4=lone_latency(t4)),
        "",
    ]
    out += sub_runs(cpu_runs)
    out += ["### What this says", "", DISCUSSION_THESIS, "", "## 2. The Azure LLM traces: HPA policies, the "
            "project's planner and the oracle", "", TRACE_SETUP.format(warmup=WARMUP_S), ""]  # fmt: skip
    for trace, desc, slo_desc, table, info in traces:
        ok = info["best_planner_attainment"] >= 0.99 and info["best_planner_x_oracle"] <= 1.15
        out += [
            f"### {trace}",
            "",
            f"Workload: {desc}. SLO: {slo_desc}. Oracle (30 s intervals, 99% attainment in each, at most "
            f"{TRACE_SPEC['max_deployment_count']} replicas): {info['oracle_gpu_s']:.0f} GPU-s after the "
            f"warm-up, {info['oracle_mean_replicas']:.2f} replicas on average, at most "
            f"{info['oracle_max_replicas']}; {info['oracle_unattainable_intervals']} of "
            f"{info['oracle_intervals']} intervals unattainable at the maximum. "
            + startup_bound_text(info),
            "",
            table,
            "",
            f"Best planner variant: **{info['best_planner']}**, attainment "
            f"{100 * info['best_planner_attainment']:.2f}%, {info['best_planner_x_oracle']:.2f}x the "
            f"oracle's GPU-seconds; target (>= 99% and <= 1.15x): {verdict(ok)}. "
            "Cheapest HPA configuration at >= 99%: "
            + (f"{info['best_hpa']} at {info['best_hpa_x_oracle']:.2f}x." if info["best_hpa"] else "none.")
            + " Fewest fixed replicas at >= 99%: "
            + (f"{info['best_fixed']} at {info['best_fixed_x_oracle']:.2f}x." if info["best_fixed"] else "none tried.")
            + " Starred rows are the Pareto front (GPU-seconds against SLO misses).",
            "",
            f"![tradeoff](figures/h100_{trace}_tradeoff.png)",
            f"![replicas](figures/h100_{trace}_replicas.png)",
            "",
        ]
    out += ["### What this says", "", DISCUSSION_TRACES, "", "## 3. Sim-to-real", ""]
    out += [render_real(real), "", "## Limitations", "", LIMITATIONS, ""]
    return "\n".join(out)


def sub_runs(runs: list[ThesisRun]) -> list[str]:
    """A profile's runs under the thesis's protocol: table, claims and the replicas figure of each."""
    out: list[str] = []
    for run in runs:
        out += [f"#### {run.title}", "", run.table, "", claims(run.ratios), "",
                *(f"![{f}](figures/{f})" for f in run.figures[-1:]), ""]  # fmt: skip
    return out


def render_real(real: dict[str, Any] | None) -> str:
    if real is None:
        return "Not run: benchmarks/results/sim_to_real.json is missing (`python -m benchmarks.sim_to_real`)."
    runs = {"in-process profile (raw)": real["metrics"]}
    if "calibrated_metrics" in real:
        runs["profile + serving overhead from probe requests"] = real["calibrated_metrics"]
    rows = [
        {
            "simulator": how,
            "metric": m,
            "real p50 ms": f"{1000 * v['real_p50']:.0f}",
            "sim p50 ms": f"{1000 * v['sim_p50']:.0f}",
            "p50 error": f"{100 * v['p50_error']:+.1f}%",
            "real p90 ms": f"{1000 * v['real_p90']:.0f}",
            "sim p90 ms": f"{1000 * v['sim_p90']:.0f}",
        }
        for how, metrics in runs.items()
        for m, v in metrics.items()
    ]
    verdicts = "; ".join(
        f"{how}: {verdict(all(abs(v['p50_error']) <= 0.2 for v in metrics.values()))}" for how, metrics in runs.items()
    )
    cal = real.get("calibration")
    how = ""
    if cal:
        load = real.get("load_average_before_after", [math.nan, math.nan])
        how = (
            f"Calibration: {len(cal['real_lone_ttft_s'])} lone requests (prompt/output tokens "
            f"{', '.join(f'{p}/{n}' for p, n in cal['requests'])}, each before and after the replay)"
            + (
                f" and two batches of {cal['batch_probe'][0]} arriving together ({cal['batch_probe'][1]}/"
                f"{cal['batch_probe'][2]} tokens each)"
                if "batch_probe" in cal
                else ""
            )
            + f" put the serving path's own work at {1000 * cal['first_token_overhead_s']:.0f} ms a prompt and "
            f"{1000 * cal['step_overhead_s']:.1f} ms a decode step"
            + (
                f" + {1000 * cal['per_sequence_overhead_s']:.1f} ms per sequence in it"
                if "per_sequence_overhead_s" in cal
                else ""
            )
            + " beyond the profile; the machine's "
            f"1-minute load average was {load[0]:.1f} before and {load[1]:.1f} after the replay.\n\n"
        )
    figs = "\n".join(f"![{f}](figures/{f})" for f in real.get("figures", []))
    return (
        real["description"]
        + "\n\n"
        + how
        + format_table(rows)
        + f"\n\nTarget (median error <= 20%): {verdicts}.\n\n"
        + figs
        + "\n\n"
        + DISCUSSION_REAL
    )


def profile_rows(profiles: dict[str, EngineProfile]) -> str:
    rows = []
    for path, p in profiles.items():
        simple = saturation_rate(p, thesis_requests(SIMPLE, 1.0, 64, 0))
        complex_ = saturation_rate(p, thesis_requests(COMPLEX, 1.0, 64, 0))
        rows.append(
            {
                "profile": path,
                "source": p.source,
                "model": f"{p.preset} {p.dtype}",
                "hardware": p.hardware,
                "decode 1 / 16 / max batch (ctx 128) ms": " / ".join(
                    f"{1000 * p.decode_step_s(b, 128):.0f}" for b in (1, 16, p.max_batch)
                ),
                "prefill 128 tok ms": f"{1000 * p.prefill_time_s(128):.0f}",
                "max batch": str(p.max_batch),
                "start-up s": f"{p.startup_s:.0f}",
                "saturation simple / complex req/s": f"{simple:.2f} / {complex_:.2f}",
            }
        )
    return format_table(rows)


def write_report(out: Path) -> None:
    """Render the report from the numbers saved by the last full run (and the sim-to-real result)."""
    p = json.loads(PARTS.read_text())
    real = json.loads(SIM_TO_REAL.read_text()) if SIM_TO_REAL.exists() else None
    text = render(
        load_profile(T4), load_profile(CPU), load_profile(H100), p["t4_rate"], p["t4_cap"], p["k"],
        [ThesisRun(**r) for r in p["thesis"]], [ThesisRun(**r) for r in p["cal_runs"]],
        [ThesisRun(**r) for r in p["cpu_runs"]], p["sens_rows"],
        [tuple(t) for t in p["traces"]], real, p["wall"], p["quick"],
    )  # fmt: skip
    out.write_text(text)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer seeds, shorter traces: a smoke run")
    parser.add_argument("--render-only", action="store_true", help="re-render the report from the saved numbers")
    parser.add_argument("--out", type=Path, default=ROOT / "scaling_policies.md")
    args = parser.parse_args()
    if args.render_only:
        write_report(args.out)
        return
    FIGURES.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    say = print
    seeds = (0, 1) if args.quick else (0, 1, 2, 3, 4)
    t4, cpu = load_profile(T4), load_profile(CPU)
    facts: dict[str, Any] = {}

    say("1. thesis reproduction")
    t4_rate = 10.0
    t4_cap = saturation_rate(t4, thesis_requests(COMPLEX, 1.0, 64, 0))
    slo = SLO(request_s=2.0)
    protocols = {"": 0.0, "ramp": RAMP_S}
    jobs = []
    for name, ramp in protocols.items():
        jobs += thesis_jobs(T4, t4_rate, THESIS_THRESHOLDS, slo, seeds, THESIS_SPEC, 3840, f"t4{name}", ramp)
        # Calibrated to the thesis's capacities, so the thesis's own 10 req/s, not a multiple of ours.
        jobs += thesis_jobs(T4CAL, t4_rate, THESIS_THRESHOLDS, slo, seeds, THESIS_SPEC, 3840, f"t4cal{name}", ramp)
    for rel in SENS_LOADS:
        for name, (_, ramp, stab) in SENS_PROTOCOLS.items():
            spec = {**THESIS_SPEC, "stabilization_window": stab}
            jobs += thesis_jobs(T4, rel * t4_cap, (20, 25), slo, seeds[:2], spec, 3840, f"sens{name}-{rel}", ramp)
    # The measured CPU profile, every latency of the thesis's setting scaled by the CPU's slowness: k
    # is a lone complex request's latency on the CPU over the T4's (its 4 choices decode as a batch
    # of 4, where the CPU is relatively slower than for one sequence).
    k = lone_latency(cpu) / lone_latency(t4)
    cpu_cap = saturation_rate(cpu, thesis_requests(COMPLEX, 1.0, 64, 0))
    cpu_rate = (t4_rate / t4_cap) * cpu_cap
    for name, ramp in protocols.items():
        # Rounded (thresholds to 1 ms, the SLO to 10 ms) so that the tables name them readably.
        jobs += thesis_jobs(CPU, cpu_rate, [round(t * k) for t in THESIS_THRESHOLDS],
                            SLO(request_s=round(2.0 * k, 2)), seeds, THESIS_SPEC, 3840, f"cpu{name}", ramp)  # fmt: skip
    results = run_all(jobs, args.workers, say)
    thesis, cal_runs, cpu_runs = [], [], []
    for name, ramp in protocols.items():
        how = "as described: 10 req/s from the first second" if not ramp else f"rising to 10 req/s over {ramp:g} s"
        shape = "step" if not ramp else "ramp"
        thesis.append(thesis_run(results, f"t4{name}", seeds, f"Load {how}", f"T4 derived, {shape}"))
        cal_runs.append(thesis_run(results, f"t4cal{name}", seeds, f"Load {how}", f"T4 calibrated, {shape}"))
        cpu_how = how.replace("10 req/s", f"{cpu_rate:.2f} req/s")
        cpu_runs.append(thesis_run(results, f"cpu{name}", seeds, f"Load {cpu_how}", f"CPU measured, {shape}"))
    facts.update({run.tag: run.ratios for run in (*thesis, *cal_runs, *cpu_runs)})
    sens_rows = []
    for rel in SENS_LOADS:
        row = {"load (x one replica)": f"{rel:g}"}
        for name, (label, _, _) in SENS_PROTOCOLS.items():
            _, r = thesis_table(results, f"sens{name}-{rel}", seeds[:2])
            for n in ("pertoken:20", "pertoken:25"):
                row[f"{label} {n}: viol / GPU saved / first"] = (
                    f"{ratio_text(r[n]['violations'])} / {100 * r[n]['gpu_saving']:.0f}% / "
                    f"{ratio_text(r[n]['first_scale'])}"
                )
        sens_rows.append(row)

    say("2. Azure traces on the measured H100 profile")
    trace_md = []
    duration = 900.0 if args.quick else None
    h100 = load_profile(H100)
    for trace, slo_t, thresholds, request_ms in TRACE_SETUPS:
        wl = parse_workload(f"trace:{TRACES / (trace + '.csv')}", h100, duration=duration, lengths=TRACE_LENGTHS)
        # The oracle searches the same replica range the policies may use; its intervals are the SLO's.
        orc = oracle(h100, wl.requests, slo_t, max_replicas=TRACE_SPEC["max_deployment_count"])
        say(f"  {trace}: oracle {orc.gpu_seconds_since(WARMUP_S):.0f} GPU-s")
        tj = trace_jobs(
            H100, trace, slo_t, duration, orc.replicas[0], thresholds, (30, 60), PLANNER_VARIANTS, request_ms
        )
        tr = run_all(tj, args.workers, say)
        table, info = trace_section(tr, trace, orc, h100.startup_s, "h100")
        info["workload"] = wl.description
        info["slo"] = slo_t.describe()
        facts[trace] = info
        trace_md.append((trace, wl.description, slo_t.describe(), table, info))

    wall = time.perf_counter() - started
    parts = {
        "t4_rate": t4_rate, "t4_cap": t4_cap, "k": k, "thesis": [asdict(r) for r in thesis],
        "cal_runs": [asdict(r) for r in cal_runs], "cpu_runs": [asdict(r) for r in cpu_runs],
        "sens_rows": sens_rows, "traces": trace_md,
        "wall": wall, "quick": args.quick,
    }  # fmt: skip
    (ROOT / "results").mkdir(exist_ok=True)
    PARTS.write_text(json.dumps(parts, indent=1, default=str) + "\n")
    write_report(args.out)
    (ROOT / "results" / "scaling_policies.json").write_text(json.dumps(facts, indent=2, default=str) + "\n")
    say(f"wrote {args.out} in {wall:.0f} s")


if __name__ == "__main__":
    main()
