"""What one replica carries within the SLO: the planner's model against the simulated replica.

    .venv/bin/python -m benchmarks.capacity_model \
        --json benchmarks/results/capacity_model.json --report benchmarks/capacity_model.md

The planner converts demand into replicas with `autoscaler.capacity.choices_per_second`: from the
engine profile and the mix's mean prompt and output lengths, the choices per second one replica
finishes at the planned per-token latency (`per_token_slo` x `plan_fraction`). Its GPU-seconds and its
attainment rest on that figure. Here it is set against the simulator's replica (`nlgsim`, the same
one every scaling report runs), for each trace mix of the scaling report and the thesis's complex
query: requests with the mix's own prompt and output lengths (drawn at random; a trace's with the
report's length mapping) arrive as a Poisson
process on `REPLICAS` fixed replicas behind round-robin routing, and a bisection on the rate per
replica finds the highest at which the feasible requests reach the trace protocol's SLO target
(TTFT and per-token latency, as the scaling report scores them). The ratio of the two says how far
the model's capacity is from what the replica carries; above 1, the planner plans too few replicas
for that mix.

Deterministic (seeded arrivals and draws): a re-run on any machine gives the same figures.
"""

from __future__ import annotations

import argparse
import datetime
import random
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.capacity import choices_per_second
from autoscaler.config import PlannerSpec
from benchmarks import harness
from nlgsim.experiment import parse_workload
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.protocol import PROTOCOLS
from nlgsim.results import summarize
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import QUERY_TYPES, Request, thesis_requests

H100 = "benchmarks/profiles/h100-gpt2-xl-fp16.json"
T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-derived.json"
LENGTHS = "scale:0.125"  # the scaling report's mapping of the Azure traces into GPT-2's context
CALIBRATED_T4 = "benchmarks/profiles/t4-gpt2-xl-fp16-calibrated.json"
#: (name, workload, profile): the trace mixes and profiles of the scaling report's section 2 (the workload suite's too),
#: and the thesis's complex query, whose prompts all have one length (the model's exponential
#: lengths overstate its prefill: the case that assumption fits least).
CASES = [
    ("azure2023_code on the H100", "trace:benchmarks/traces/azure2023_code.csv", H100),
    ("azure2023_conv on the H100", "trace:benchmarks/traces/azure2023_conv.csv", H100),
    ("azure2023_conv on the derived T4", "trace:benchmarks/traces/azure2023_conv.csv", T4),
    ("Table 4.2 complex on the calibrated T4", "complex", CALIBRATED_T4),
]
SAMPLE = 2000  # requests of a Table 4.2 query drawn for its lengths
REPLICAS = 4
WARMUP_S = 60.0
MEASURED_S = 300.0
STEPS = 9  # bisection steps: the rate to within (hi - lo) / 2**9 of the model's
SEED = 1
SLO = PROTOCOLS["trace"].slo


@dataclass(frozen=True)
class Probe:
    rate: float
    """Requests per second per replica."""
    attainment: float
    ttft_p99_s: float
    per_token_p99_s: float


def mix_of(workload: str, profile: EngineProfile) -> list[Request]:
    """The requests whose lengths the Poisson arrivals draw from: a trace's (mapped as the scaling report
    maps them), or `SAMPLE` of a Table 4.2 query's."""
    if workload.startswith("trace:"):
        return parse_workload(workload, profile, lengths=LENGTHS).requests
    return thesis_requests(QUERY_TYPES[workload], 1.0, SAMPLE, seed=SEED)


def probe(profile: EngineProfile, mix: list[Request], rate: float) -> Probe:
    """`REPLICAS` fixed replicas at `rate` requests a second each, lengths drawn from `mix`."""
    rng = random.Random(SEED)
    t, requests = 0.0, list[Request]()
    while t < WARMUP_S + MEASURED_S:
        t += rng.expovariate(rate * REPLICAS)
        requests.append(replace(rng.choice(mix), id=len(requests), arrival=t))
    log = simulate(Scenario(profile, requests, None, initial_replicas=REPLICAS, name="fixed"))
    s = summarize(log, SLO, "fixed", since=WARMUP_S, until=WARMUP_S + MEASURED_S)
    return Probe(rate, s.attainment_feasible, s.ttft_p99_s, s.per_token_p99_s)


def highest_rate(profile: EngineProfile, mix: list[Request], lo: float, hi: float) -> tuple[float, list[Probe]]:
    """The highest rate per replica in [lo, hi] whose feasible requests reach the SLO's target (lo
    when none does): bisection, the attainment falling as the rate rises."""
    probes = []
    for _ in range(STEPS):
        mid = (lo + hi) / 2
        p = probe(profile, mix, mid)
        probes.append(p)
        lo, hi = (mid, hi) if p.attainment >= SLO.target else (lo, mid)
    return lo, probes


def measure_case(name: str, workload: str, profile_path: str) -> dict[str, Any]:
    profile = load_profile(profile_path)
    mix = mix_of(workload, profile)
    prompt = sum(r.prompt_tokens for r in mix) / len(mix)
    output = sum(sum(r.output_tokens) for r in mix) / sum(r.choices for r in mix)
    choices = sum(r.choices for r in mix) / len(mix)
    spec = PlannerSpec()
    planned_s = spec.per_token_slo / 1000
    model = choices_per_second(profile, planned_s, prompt, output, choices) / choices  # requests a second
    at_mean = choices_per_second(profile, planned_s, prompt, output, choices, spread=False) / choices
    carried, probes = highest_rate(profile, mix, 0.1 * model, 2.0 * model)
    at_model = probe(profile, mix, model)
    return {
        "name": name, "workload": workload, "profile": profile_path, "requests_in_mix": len(mix),
        "prompt_tokens": prompt, "output_tokens": output, "choices": choices,
        "planned_per_token_s": planned_s, "model_rate": model, "model_at_mean_rate": at_mean,
        "carried_rate": carried,
        "at_model": vars(at_model), "probes": [vars(p) for p in probes],
    }  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "machine": harness.machine(),
        "code": harness.revision("autoscaler/capacity.py", "nlgsim", "benchmarks/capacity_model.py"),
        "date": datetime.date.today().isoformat(),
        "replicas": REPLICAS, "warmup_s": WARMUP_S, "measured_s": MEASURED_S, "seed": SEED,
        "lengths": LENGTHS,
        "slo": {"ttft_s": SLO.ttft_s, "per_token_s": SLO.per_token_s, "target": SLO.target},
        "cases": [measure_case(*case) for case in CASES],
    }  # fmt: skip


def render(data: dict[str, Any]) -> str:
    slo = data["slo"]
    lines = [
        "# What one replica carries: the planner's capacity model against the simulated replica",
        "",
        harness.computed(data, "benchmarks/capacity_model.py") + ". Each mix's requests (a trace's "
        f"lengths mapped with `--map-lengths {data['lengths']}` as in the scaling report), drawn at random as "
        f"a Poisson process on {data['replicas']} fixed replicas (round-robin), {data['warmup_s']:g} s of warm-up then "
        f"{data['measured_s']:g} s scored; the SLO of the trace protocol: {slo['target']:.0%} of the feasible "
        f"requests with TTFT <= {slo['ttft_s'] * 1000:g} ms and per-token latency <= "
        f"{slo['per_token_s'] * 1000:g} ms.",
        "",
        "| mix | mean prompt | mean output | simulated: requests/s a replica at the target | model: requests/s "
        "a replica | model / simulated | attainment at the model's rate | model at the mean prompt | "
        "its / simulated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in data["cases"]:
        lines.append(
            f"| {c['name']} | {c['prompt_tokens']:.0f} | {c['output_tokens']:.0f} | {c['carried_rate']:.1f} "
            f"| {c['model_rate']:.1f} | {c['model_rate'] / c['carried_rate']:.2f}x "
            f"| {c['at_model']['attainment'] * 100:.2f}% | {c['model_at_mean_rate']:.1f} "
            f"| {c['model_at_mean_rate'] / c['carried_rate']:.2f}x |"
        )
    worst = max(data["cases"], key=lambda c: c["model_rate"] / c["carried_rate"])
    best = min(data["cases"], key=lambda c: c["model_rate"] / c["carried_rate"])
    lines += [
        "",
        "The model: `autoscaler.capacity.choices_per_second` at the planner's default planned per-token "
        f"latency ({worst['planned_per_token_s'] * 1000:g} ms, `per_token_slo` x `plan_fraction`), for the "
        "mix's mean lengths, as the planner computes it each round: a prompt's prefill time averaged over "
        "exponentially distributed prompt lengths of the mix's mean (`mean_prefill_s`). The model at the "
        "mean prompt: the same with every prompt as long as the mean (`spread=False`, how the Dynamo anchor "
        "reads its profile). The simulated figure: the highest rate a bisection found at which the replicas "
        "reach the target.",
        "",
        "Where a ratio is above 1 the planner, which divides demand by the model's figure, plans that many "
        f"times too few replicas for the mix; the largest is {worst['name']}'s "
        f"{worst['model_rate'] / worst['carried_rate']:.2f}x (at the mean prompt "
        f"{worst['model_at_mean_rate'] / worst['carried_rate']:.2f}x). What remains is the per-token limit "
        "on short outputs: the model counts a step's latency, while a request of a few tokens after a long "
        "prompt spends most of its time before its first token, which the mean lengths do not show. This "
        "throughput model leaves it to the planner's TTFT queue (`autoscaler.planner.queue_replicas`), which "
        "gives each output length the wait its per-token limit leaves it. Below 1 the planner holds more than "
        f"the mix needs; the lowest is {best['name']}'s {best['model_rate'] / best['carried_rate']:.2f}x (at the "
        f"mean prompt {best['model_at_mean_rate'] / best['carried_rate']:.2f}x).",
        "",
        "Bisection steps, per mix (rate per replica, attainment of the feasible requests, TTFT p99, per-token p99):",
        "",
    ]
    for c in data["cases"]:
        steps = "; ".join(
            f"{p['rate']:.1f}/s {p['attainment'] * 100:.2f}% {p['ttft_p99_s'] * 1000:.0f} ms "
            f"{p['per_token_p99_s'] * 1000:.1f} ms"
            for p in c["probes"]
        )
        lines.append(f"- {c['name']}: {steps}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, measure, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
