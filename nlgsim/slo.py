"""The service-level objective of :mod:`autoscaler.slo`, with the per-request arithmetic of a run.

The SLO is judged over the **feasible** requests (those that can meet it at all, alone on an idle
replica: :mod:`nlgsim.feasibility`), in every ``interval_s`` of the run for the oracle and over the
whole run for a policy's attainment. The object is the autoscaler's (the live planner plans with
it); this subclass adds what needs numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autoscaler.slo import SLO as _SLO
from autoscaler.slo import SLO_NAMES

__all__ = ["SLO", "SLO_NAMES"]


class SLO(_SLO):
    """An :class:`autoscaler.slo.SLO` that also judges arrays of per-request latencies."""

    def misses(
        self,
        latency: npt.NDArray[np.float64],
        ttft: npt.NDArray[np.float64],
        per_token: npt.NDArray[np.float64],
    ) -> dict[str, npt.NDArray[np.bool_]]:
        """Per request, whether it missed each limit (all three, named or not)."""
        return {
            "request": latency > self.request_s,
            "ttft": ttft > self.ttft_s,
            "pertoken": per_token > self.per_token_s,
        }

    def missed_one(self, latency: float, ttft: float, per_token: float) -> bool:
        """Whether one request missed any limit ``attain`` names (``missed`` for a single request)."""
        for name in self.attain:
            if name == "request" and latency > self.request_s:
                return True
            if name == "ttft" and ttft > self.ttft_s:
                return True
            if name == "pertoken" and per_token > self.per_token_s:
                return True
        return False

    def missed(self, misses: dict[str, npt.NDArray[np.bool_]]) -> npt.NDArray[np.bool_]:
        """Per request, whether it missed any limit ``attain`` names."""
        bad = np.zeros(len(next(iter(misses.values()))), dtype=bool)
        for a in self.attain:
            bad |= misses[a]
        return bad
