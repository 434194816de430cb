"""Sim-to-real check: replay a short trace against a real local Triton (CPU) and against the simulator.

1. Take a window of the Azure conversation trace, lengths mapped as the report maps them (prompt x 1/8)
   with outputs capped at ``--max-output`` so the replay stays short, and replayed ``--speed`` times
   faster or slower so that its rate is ``--load`` times one replica's saturation rate (from the profile).
2. Start tritonserver with model_repository/gpt2 (the ``gpt2`` preset, fp32, CPU: the profile's
   engine) via ``triton_backend.launch.TritonServer`` on free loopback ports, replay the requests with
   ``nlgsim.replay`` and time them on the client.
3. Simulate the same requests on one replica with the same profile.
4. Compare the distributions of TTFT and per-token latency (median and p90), write
   ``benchmarks/results/sim_to_real.json`` and CDF figures.

The profile is measured in-process (``python -m nlgsim profile``), the minimum over repetitions, with
the cores to itself. The replay goes through tritonserver, its Python stub and a gRPC client, all on
the same 2 cores, often beside other work on the machine: every step is slower there by a factor
that changes with the machine's load. So the server is also timed on a few **lone calibration
requests** (one at a time, not from the replayed window; before and after the replay), and the
simulator runs a second time with the serving path's work added to the profile
(``EngineProfile.with_overhead``): the median of real minus simulated TTFT to every prompt, and of
real minus simulated time between tokens to every decode step, split by a batch of ``--batch-probe`` such
requests arriving together into a part per step and a part per sequence in the step (the stub sends
one response per request per step). Both
comparisons are reported: the raw one says how well the in-process profile predicts the served
engine on this machine; the calibrated one, how well the simulator predicts batching and queueing
once the machine's speed at the time is known.

Run from the repository root: ``python -m benchmarks.sim_to_real`` (about 3-5 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks import harness
from benchmarks import sim_to_real_serve as serving
from nlgsim import plots
from nlgsim.capacity import saturation_rate
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.replay import Measured
from nlgsim.results import RequestTable, request_table
from nlgsim.simulator import Scenario, simulate
from nlgsim.workload import LengthMap, Request, load_trace

ROOT = Path(__file__).resolve().parent
TRACES = ROOT / "traces"  # the committed copies (benchmarks/traces/README.md)
# Lone calibration requests: (prompt tokens, output tokens), spanning the replayed window's prompts.
CALIBRATION = ((32, 48), (128, 48), (384, 48))
# And a batch of them arriving together: serving work grows with the batch (a response per request
# per step), which lone requests cannot show. Four on a 2-core CPU; a GPU batches far more (--batch-probe).
BATCH_PROBE = 4


def lone_sim(profile: EngineProfile, r: Request) -> tuple[float, float]:
    """(TTFT, time after the first token) of ``r`` alone on one simulated replica."""
    log = simulate(Scenario(profile, [replace(r, arrival=0.0)], None, initial_replicas=1))
    table = request_table(log)
    return float(table.ttft[0]), float(table.latency[0] - table.ttft[0])


def per_step(real: Measured, sim_after_first: float, r: Request) -> float:
    """Real minus simulated time after the first token, per decode step of ``r``."""
    return ((real.latency - real.ttft) - sim_after_first) / max(max(r.output_tokens) - 1, 1)


def batch_probe(index: int, size: int = BATCH_PROBE) -> list[Request]:
    prompt, output = CALIBRATION[1]
    return [Request(20_000 + 100 * index + i, 0.0, prompt + i, (output,)) for i in range(size)]


def step_gap(profile: EngineProfile, requests: Sequence[Request], real: Sequence[Measured]) -> float:
    """Mean of real minus simulated time per decode step after the first token, for ``requests``
    arriving together (the simulation runs them together too)."""
    table = request_table(simulate(Scenario(profile, list(requests), None, initial_replicas=1)))
    after_first = table.latency - table.ttft
    return statistics.fmean(per_step(m, after_first[i], r) for i, (m, r) in enumerate(zip(real, requests, strict=True)))


def calibrated(
    profile: EngineProfile,
    requests: Sequence[Request],
    real: list[Measured],
    sims: Sequence[tuple[float, float]],
    batches: Sequence[tuple[Sequence[Request], Sequence[Measured]]],
) -> tuple[EngineProfile, float, float, float]:
    """The profile plus the serving path's own work: from lone requests (medians), the real TTFT over
    the simulated one is added to every prompt and the real time between tokens over the simulated one
    to a step of one; from batches arriving together, how much more that gap grows per sequence. Returns
    the profile and the overheads (s): per prompt, per step, per sequence in a step; negatives count as 0.
    ``sims`` are :func:`lone_sim` of ``requests``."""
    first = statistics.median(m.ttft - s[0] for m, s in zip(real, sims, strict=True))
    lone_step = statistics.median(per_step(m, s[1], r) for m, s, r in zip(real, sims, requests, strict=True))
    batch_step = statistics.median(step_gap(profile, reqs, measured) for reqs, measured in batches)
    size = len(batches[0][0])
    per_sequence = max((batch_step - lone_step) / (size - 1), 0.0)
    first, step = max(first, 0.0), max(lone_step - per_sequence, 0.0)
    served = profile.with_overhead(first_token_s=first, step_s=step, per_sequence_s=per_sequence)
    return served, first, step, per_sequence


def compare(
    real_ttft: npt.NDArray[np.float64], real_tok: npt.NDArray[np.float64], table: RequestTable
) -> dict[str, dict[str, float]]:
    metrics = {}
    for name, real, sim in (("TTFT", real_ttft, table.ttft), ("per-token latency", real_tok, table.per_token)):
        metrics[name] = {
            "real_p50": float(np.median(real)),
            "sim_p50": float(np.median(sim)),
            "p50_error": float(np.median(sim) / np.median(real) - 1),
            "real_p90": float(np.percentile(real, 90)),
            "sim_p90": float(np.percentile(sim, 90)),
        }
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, default=ROOT / "profiles" / "cpu-gpt2-fp32.json")
    parser.add_argument("--trace", type=Path, default=TRACES / "azure2023_conv.csv")
    parser.add_argument("--start", type=float, default=600.0, help="seconds into the trace")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--max-output", type=int, default=64)
    parser.add_argument("--load", type=float, default=0.6, help="rate as a fraction of one replica's saturation")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sim_to_real.json")
    parser.add_argument("--batch-probe", type=int, default=BATCH_PROBE, help="requests in a batch probe (>= 2)")
    parser.add_argument("--plan", type=Path, help="only write the requests to serve elsewhere (sim_to_real_serve)")
    parser.add_argument("--served", type=Path, help="compare what sim_to_real_serve recorded for --plan's requests")
    args = parser.parse_args()
    if not 2 <= args.batch_probe <= 99:
        parser.error(f"--batch-probe: {args.batch_probe} requests; give 2 to 99")
    if args.plan and args.served:
        parser.error("--plan writes the requests for --served's replay: give one of them")

    profile = load_profile(args.profile)
    lengths = replace(LengthMap.parse("scale:0.125"), max_output=args.max_output)
    trace = load_trace(args.trace, lengths, start=args.start)
    window = trace.requests[: args.requests]
    t0 = window[0].arrival
    window = [replace(r, id=i, arrival=r.arrival - t0) for i, r in enumerate(window)]
    capacity = saturation_rate(profile, window)
    natural = len(window) / max(window[-1].arrival, 1e-9)
    speed = args.load * capacity / natural
    reqs = [replace(r, arrival=r.arrival / speed) for r in window]
    print(f"{len(reqs)} requests over {reqs[-1].arrival:.0f} s ({args.load:g}x the saturation rate {capacity:.2f}/s)")

    probes = [Request(10_000 + i, 0.0, p, (n,)) for i, (p, n) in enumerate(CALIBRATION)]
    parts = {
        "warmup": reqs[:2],  # first calls of each shape are slow
        "before": probes, "batch_before": batch_probe(0, args.batch_probe), "window": reqs,
        "after": probes, "batch_after": batch_probe(1, args.batch_probe),
    }  # fmt: skip
    env = {
        "NLG_PRESET": profile.preset,
        "NLG_DTYPE": profile.dtype,
        "NLG_PREFILL_CHUNK_TOKENS": str(profile.prefill_chunk_tokens),
        "NLG_MAX_NUM_SEQS": str(profile.max_batch),
    }
    planned = {p: [serving.request_to_json(r) for r in v] for p, v in parts.items()}
    if args.plan:
        harness.write_json(args.plan, {"env": env, "parts": planned})
        print(f"wrote {args.plan}: serve it with python -m benchmarks.sim_to_real_serve")
        return
    if args.served:
        record = json.loads(args.served.read_text())
        if record["plan"]["parts"] != planned:
            parser.error(f"{args.served} served other requests than these arguments make: give the same ones")
        known = {r.id: r for v in parts.values() for r in v}
        got = {p: [serving.measured_from_json(m, known) for m in record["parts"][p]] for p in serving.PARTS}
        startup, hardware = record["startup_s"], record["hardware"]
        load_before, load_after = record["load_average_before_after"]
    else:
        got = serving.serve(env, parts)
        startup, hardware = got["startup_s"], f"this machine's CPU ({harness.cpu_model()})"
        load_before, load_after = got["load_average_before_after"]
    before, batch_before, measured = got["before"], got["batch_before"], got["window"]
    after, batch_after = got["after"], got["batch_after"]
    mismatched = [m.request.id for m in measured if m.input_tokens != m.request.prompt_tokens]
    real_ttft = np.array([m.ttft for m in measured])
    real_tok = np.array([m.per_token for m in measured])

    table = request_table(simulate(Scenario(profile, reqs, None, initial_replicas=1)))
    metrics = compare(real_ttft, real_tok, table)
    batches = [(parts["batch_before"], batch_before), (parts["batch_after"], batch_after)]
    sims = [lone_sim(profile, r) for r in probes]
    served, first_s, step_s, seq_s = calibrated(profile, [*probes, *probes], [*before, *after], [*sims, *sims], batches)
    ctable = request_table(simulate(Scenario(served, reqs, None, initial_replicas=1)))
    cmetrics = compare(real_ttft, real_tok, ctable)
    figs = []
    for name, real, sim, csim, fname in (
        ("TTFT (s)", real_ttft, table.ttft, ctable.ttft, f"{args.out.stem}_ttft.png"),
        ("per-token latency (s)", real_tok, table.per_token, ctable.per_token, f"{args.out.stem}_per_token.png"),
    ):
        plots.distributions(
            {"real Triton": list(real), "simulator": list(sim), "simulator, calibrated": list(csim)},
            ROOT / "figures" / fname,
            f"Sim-to-real: {name}",
            name,
        )
        figs.append(fname)
    result = {
        "description": (
            f"{len(reqs)} requests of {args.trace.stem} from {args.start:g} s (prompt x 1/8, outputs capped at "
            f"{args.max_output}), replayed at {args.load:g}x one replica's saturation rate "
            f"({capacity:.2f} req/s, from the profile) against one real tritonserver ({profile.preset} "
            f"{profile.dtype} on {hardware}, ready {startup:.0f} s after start) and against the "
            f"simulator with profiles/{args.profile.name}. "
            "Real times are taken on the client (gRPC streaming): TTFT at the first response with text, "
            "per-token latency as the final response's latency over the tokens generated."
        ),
        "metrics": metrics,
        "calibrated_metrics": cmetrics,
        "calibration": {
            "requests": [list(c) for c in CALIBRATION],
            "first_token_overhead_s": first_s,
            "step_overhead_s": step_s,
            "per_sequence_overhead_s": seq_s,
            "batch_probe": [args.batch_probe, *CALIBRATION[1]],
            "real_lone_ttft_s": [m.ttft for m in [*before, *after]],
            "real_lone_after_first_s": [m.latency - m.ttft for m in [*before, *after]],
            "sim_lone_s": [list(s) for s in sims],
        },
        "figures": figs,
        "prompt_token_mismatches": mismatched,
        "load_average_before_after": [load_before, load_after],
        "load_average": list(os.getloadavg()),
        "notes": "",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    harness.write_json(args.out, result)
    print(
        f"serving overhead: {first_s * 1000:.1f} ms a prompt, {step_s * 1000:.1f} ms a step "
        f"+ {seq_s * 1000:.1f} ms a sequence in it; "
        f"load {load_before:.1f} / {load_after:.1f}"
    )
    for how, ms in (("raw", metrics), ("calibrated", cmetrics)):
        for name, v in ms.items():
            print(
                f"{how} {name}: real p50 {v['real_p50'] * 1000:.0f} ms, sim p50 {v['sim_p50'] * 1000:.0f} ms "
                f"({100 * v['p50_error']:+.1f}%); p90 {v['real_p90'] * 1000:.0f} / {v['sim_p90'] * 1000:.0f} ms"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
