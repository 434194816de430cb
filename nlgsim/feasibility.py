"""Which requests can meet the SLO at all: each checked alone on an idle replica of the profile.

A request alone is as fast as the engine serves it: its prompt prefilled in chunks with nothing else
in the step (TTFT = P(prompt), the chunks' costs add up to the whole prompt's), then one decode step
per token with only its own choices in the batch. One that misses the SLO even so is **infeasible**:
no replica count and no policy serves it within the SLO, so attainment targets are stated over the
feasible requests, and the oracle does not buy replicas for the others (they still load the engines).

The times are those of :class:`nlgsim.replica.Replica` serving the request alone, in closed form: at
decode step k every running choice has context prompt + k (mean and longest alike), the batch is the
choices longer than k tokens, and a choice of n tokens finishes at the end of step n - 1. Summing
each batch size's step costs once per context makes a trace of 20,000 requests take milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nlgsim.profile import EngineProfile
from nlgsim.slo import SLO
from nlgsim.workload import Request


@dataclass(frozen=True)
class AloneTimes:
    """Each request's latencies alone on an idle replica, in the order given; seconds."""

    latency: npt.NDArray[np.float64]
    ttft: npt.NDArray[np.float64]
    per_token: npt.NDArray[np.float64]


class _DecodeSums:
    """Cumulative decode-step costs per batch size: ``sum(b, lo, hi)`` is decode(b, c) over c in [lo, hi)."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self._sums: dict[int, npt.NDArray[np.float64]] = {}

    def sum(self, batch: int, lo: int, hi: int) -> float:
        sums = self._sums.get(batch)
        if sums is None or len(sums) <= hi:
            size = max(hi + 1, 2 * self.profile.max_context + 2)
            steps = [self.profile.decode_step_s(batch, float(c)) for c in range(size)]
            sums = np.concatenate(([0.0], np.cumsum(steps)))
            self._sums[batch] = sums
        return float(sums[hi] - sums[lo])


def alone_times(profile: EngineProfile, requests: Sequence[Request]) -> AloneTimes:
    """Latencies of each request served alone; infinite for one with more choices than the engine runs."""
    sums = _DecodeSums(profile)
    prefill: dict[int, float] = {}
    n = len(requests)
    latency, ttft, per_token = np.empty(n), np.empty(n), np.empty(n)
    for i, r in enumerate(requests):
        if r.choices > profile.max_batch:
            latency[i] = ttft[i] = per_token[i] = np.inf
            continue
        p = r.prompt_tokens
        if p not in prefill:
            prefill[p] = profile.prefill_time_s(p)
        t = first = prefill[p]
        worst = 0.0
        done = 1  # decode steps 1 .. done - 1 are counted in t
        lengths = sorted(r.output_tokens)
        for j, tokens in enumerate(lengths):
            if tokens > done:
                # Steps done .. tokens - 1 run the choices still unfinished, lengths[j:], at context p + k.
                t += sums.sum(len(lengths) - j, p + done, p + tokens)
                done = tokens
            worst = max(worst, t / max(tokens, 1))
        latency[i], ttft[i], per_token[i] = t, first, worst
    return AloneTimes(latency, ttft, per_token)


def infeasible(profile: EngineProfile, requests: Sequence[Request], slo: SLO) -> npt.NDArray[np.bool_]:
    """Per request, whether it misses ``slo`` even alone on an idle replica."""
    alone = alone_times(profile, requests)
    return slo.missed(slo.misses(alone.latency, alone.ttft, alone.per_token))


@dataclass(frozen=True)
class Feasibility:
    """How many requests of a workload can meet the SLO at all, and which limit the others miss."""

    requests: int
    infeasible: int
    missing: dict[str, int]
    """Infeasible requests missing each named limit alone (one may miss several)."""

    def describe(self) -> str:
        if not self.infeasible:
            return f"all {self.requests} requests can meet the SLO alone on an idle replica"
        why = ", ".join(f"{n} {name}" for name, n in self.missing.items() if n)
        share = self.infeasible / max(self.requests, 1)
        return (
            f"{self.infeasible} of {self.requests} requests ({share:.2%}) miss the SLO even alone on an idle "
            f"replica (infeasible; missing {why}); attainment is stated over the other "
            f"{self.requests - self.infeasible}"
        )


def feasibility(profile: EngineProfile, requests: Sequence[Request], slo: SLO) -> Feasibility:
    alone = alone_times(profile, requests)
    misses = slo.misses(alone.latency, alone.ttft, alone.per_token)
    bad = slo.missed(misses)
    return Feasibility(len(requests), int(bad.sum()), {a: int(misses[a].sum()) for a in slo.attain})
