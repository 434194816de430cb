"""Requests that certainly miss the SLO on one replica, known before it is simulated.

The oracle tries every replica count below its answer, and each must be shown to fall short. Where a
count falls far short, a lower bound on each request's first token shows it without simulating: on one
replica (:class:`nlgsim.replica.Replica`, the engine's scheduler) that cannot preempt, requests are
admitted in arrival order (the replays set no deadlines) and prefilled in that order, and a step lasts
its decode rows' time plus its prefill chunks' costs. So for request k and any earlier request i:

* every request from i to k arrived at a_i or later, and all of them were prefilled by k's first token:
  their prompts' costs P (a prompt's chunks cost P(prompt) together);
* when k was admitted, at most ``max_batch - 1`` of their choices were still running, so the others had
  ended: a choice of L tokens decodes L - 1 steps, and a step of b rows lasts at least ``b * g``, where
  g is the least any step of the profile spends a row (its decode time over its rows, at any batch size
  and context the requests reach).

Hence ``T_k >= a_i + g * (D(i..k-1) - C) + P(i..k)``, D the decode tokens of those requests' choices and
C the most the ``max_batch - 1`` longest choices could hold back, and ``T_k >= a_k + P_k``: the largest
over i is Lindley's recursion, one cumulative maximum. A scored request misses where this bound alone
passes a limit of the SLO (the first token is no later than any choice's end), by a margin far above the
rounding of either side's arithmetic. The bound holds only where no preemption can occur (every choice at
its longest fits the cache at a full batch): elsewhere it claims nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from nlgsim.profile import EngineProfile
from nlgsim.slo import SLO
from nlgsim.workload import Request

#: Seconds a bound must pass a limit by: far above the rounding of a run's times and of the bound's sums.
MARGIN_S = 1e-3


class FirstTokenBound:
    """Requests in arrival order, each served by one replica of ``profile``: which of those ``scored``
    certainly miss ``slo`` on the replica that serves every ``step``-th of them."""

    def __init__(self, profile: EngineProfile, requests: Sequence[Request], scored: npt.NDArray[np.bool_], slo: SLO):
        self.slo = slo
        self.scored = scored
        self.arrival = np.array([r.arrival for r in requests], dtype=np.float64)
        longest = max((r.prompt_tokens + max(r.output_tokens) for r in requests), default=1)
        choices = max((r.choices for r in requests), default=1)
        pages = -(-longest // profile.page_size)
        # Preemption needs a page none is free for; at most max_batch choices hold pages, each at most
        # `pages`. A request with more choices than max_batch is refused on submission: simulate it.
        self.holds = choices <= profile.max_batch and profile.max_batch * pages <= profile.total_pages
        if not self.holds:
            return
        g = min(_decode_per_row(profile, b, longest) for b in range(1, profile.max_batch + 1)) * (1 - 1e-9)
        prefill = {n: profile.prefill_time_s(n) for n in {r.prompt_tokens for r in requests}}
        self.prefill = np.array([prefill[r.prompt_tokens] for r in requests], dtype=np.float64)
        tokens = np.array([sum(r.output_tokens) - r.choices for r in requests], dtype=np.float64)
        self.work = g * tokens + self.prefill  # what request j adds to the bound of every later one
        self.held_back = g * (profile.max_batch - 1) * max((max(r.output_tokens) - 1 for r in requests), default=0)
        self.shortest = np.array([min(r.output_tokens) for r in requests], dtype=np.float64)

    def first_tokens(self, first: int = 0, step: int = 1) -> npt.NDArray[np.float64]:
        """The bound on each first token of the requests ``first``, ``first + step``, ... (one replica's
        share), before the margin; only where it holds (``holds``)."""
        arrival, work = self.arrival[first::step], self.work[first::step]
        before = np.concatenate(([0.0], np.cumsum(work[:-1])))  # sum of work[j] for j < k
        latest = before + np.maximum.accumulate(arrival - before)  # max over i <= k of a_i + work(i..k-1)
        bound: npt.NDArray[np.float64] = np.maximum(latest - self.held_back, arrival) + self.prefill[first::step]
        return bound

    def misses(self, first: int = 0, step: int = 1) -> npt.NDArray[np.bool_]:
        """Of the requests ``first``, ``first + step``, ... (one replica's share), those scored that
        certainly miss the SLO; none where the bound does not hold."""
        arrival = self.arrival[first::step]
        if not self.holds or not len(arrival):
            return np.zeros(len(arrival), dtype=bool)
        late = self.first_tokens(first, step) - arrival - MARGIN_S
        slo, shortest = self.slo, self.shortest[first::step]
        missed = np.zeros(len(arrival), dtype=bool)
        if "ttft" in slo.attain:
            missed |= late > slo.ttft_s
        if "request" in slo.attain:
            missed |= late > slo.request_s
        if "pertoken" in slo.attain:
            missed |= late / shortest > slo.per_token_s
        certain: npt.NDArray[np.bool_] = missed & self.scored[first::step]
        return certain


def _decode_per_row(profile: EngineProfile, batch: int, longest: int) -> float:
    """The least a decode step of ``batch`` rows spends a row, at any mean context from 1 to ``longest``:
    the step time is linear in the context between the grid's points, so its least is at one of them or at
    an end."""
    curve = profile.decode_curve(batch)
    contexts = [1.0, float(longest), *(float(c) for c in profile.decode_context if 1 < c < longest)]
    return min(curve(c) for c in contexts) / batch
