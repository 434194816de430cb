"""The service-level objective: one object read by the planner, the simulator's report and its oracle.

It says which latencies count (``attain``: any of request latency, TTFT and per-token latency, each
with its limit), which share of requests must meet them (``target``, 0.99: the 99th percentile of
each named latency is within its limit), and over what interval the simulator's oracle meets it
(``interval_s``). The simulator adds the per-request arithmetic (:mod:`nlgsim.slo`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SLO_NAMES = ("request", "ttft", "pertoken")


@dataclass(frozen=True)
class SLO:
    """Latency limits in seconds; ``attain`` names those a request must meet."""

    request_s: float = 2.0
    ttft_s: float = 2.0
    per_token_s: float = 0.05
    attain: tuple[str, ...] = ("request",)
    target: float = 0.99
    """Share of the feasible requests that must meet every named limit."""
    interval_s: float = 30.0
    """The oracle meets ``target`` in each interval of this many seconds."""

    def __post_init__(self) -> None:
        errors = []
        unknown = [a for a in self.attain if a not in SLO_NAMES]
        if unknown or not self.attain:
            errors.append(f"SLO attain = {self.attain}: name one or more of {', '.join(SLO_NAMES)}")
        for key in ("request_s", "ttft_s", "per_token_s", "interval_s"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                errors.append(f"SLO {key} = {value}, must be a finite number > 0")
        if not 0 < self.target <= 1:
            errors.append(f"SLO target = {self.target}, must be in (0, 1]")
        if errors:
            raise ValueError("; ".join(errors))

    def describe(self) -> str:
        parts = {
            "request": f"request latency <= {self.request_s * 1000:g} ms",
            "ttft": f"TTFT <= {self.ttft_s * 1000:g} ms",
            "pertoken": f"per-token latency <= {self.per_token_s * 1000:g} ms",
        }
        return " and ".join(parts[a] for a in self.attain)

    def statement(self) -> str:
        """The whole objective in one line, as reports print it."""
        return (
            f"{self.target:.4g} of the feasible requests with {self.describe()} "
            f"(the oracle: in every {self.interval_s:g} s interval)"
        )

    def per_token_allowed(self, long_output_tokens: float) -> float:
        """The per-token latency the named limits allow a long output (the planner's guard).

        The per-token limit itself where it is named (or where request latency is not), and a request
        latency limit spread over ``long_output_tokens``.
        """
        allowed = [self.per_token_s] if "pertoken" in self.attain or "request" not in self.attain else []
        if "request" in self.attain:
            allowed.append(self.request_s / max(long_output_tokens, 1.0))
        return min(allowed)

    @property
    def window_quantile(self) -> str:
        """The autoscaler window's quantile (p50, p90, p99) at or above ``target``."""
        if self.target <= 0.5:
            return "p50"
        return "p90" if self.target <= 0.9 else "p99"
