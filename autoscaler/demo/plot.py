"""The demo's picture: replicas (Triton instances) and per-token latency over time, as one PNG.

This module owns drawing and nothing else. The top panel steps through the replicas the autoscaler
observed and asked for; the bottom panel shows the window mean of per-token latency it decided on
(the line), each finished request's client-side per-token latency (the dots, simple and complex
apart) and the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: the demo runs headless and only writes a file

import matplotlib.pyplot as plt  # noqa: E402

from autoscaler.demo.load import LoadRecord  # noqa: E402


@dataclass(frozen=True)
class Round:
    """One control-loop round, seconds since the demo started: decided at ``t``, applied by ``t_end``."""

    t: float
    t_end: float
    current: int
    desired: int
    pertoken_ms: float | None


def plot_run(
    path: Path,
    rounds: Sequence[Round],
    records: Sequence[LoadRecord],
    t0: float,
    threshold_ms: float,
    load_stopped_at: float | None,
) -> Path:
    """Writes the PNG; ``t0`` is the monotonic time the demo started (for the request dots)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, height_ratios=(1, 1.6))
    # Instances change when the reload finishes (end of the round), the decision at its start.
    top.step([r.t_end for r in rounds], [r.current for r in rounds], where="post", label="instances", lw=2)
    top.step([r.t for r in rounds], [r.desired for r in rounds], where="post", label="desired", ls="--")
    top.set_ylabel("replicas")
    top.set_ylim(bottom=0, top=max([r.desired for r in rounds] + [r.current for r in rounds] + [1]) + 1)
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    for kind, color in (("simple", "tab:green"), ("complex", "tab:purple")):
        done = [r for r in records if r.kind == kind and r.per_token_ms is not None and r.end is not None]
        bottom.scatter(
            [r.end - t0 for r in done if r.end is not None],
            [r.per_token_ms for r in done],
            s=8, alpha=0.35, color=color, label=f"{kind} requests (client)",
        )  # fmt: skip
    decided = [(r.t, r.pertoken_ms) for r in rounds if r.pertoken_ms is not None]
    if decided:
        bottom.plot([t for t, _ in decided], [v for _, v in decided], color="tab:blue", linewidth=2,
                    label="window mean (autoscaler)")  # fmt: skip
    bottom.axhline(threshold_ms, color="tab:red", linestyle=":", label=f"threshold {threshold_ms:.0f} ms")
    for axis in (top, bottom):
        if load_stopped_at is not None:
            axis.axvline(load_stopped_at, color="grey", linestyle="-.", linewidth=1)
    bottom.set_ylabel("per-token latency (ms)")
    bottom.set_xlabel("seconds since start" + ("" if load_stopped_at is None else " (dash-dot: load stops)"))
    bottom.set_ylim(bottom=0)
    bottom.legend(loc="upper right", fontsize="small")
    bottom.grid(alpha=0.3)
    fig.suptitle("nlg-demo: per-token latency policy scaling Triton instances in place")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
