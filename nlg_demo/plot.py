"""The demo's picture: replicas, demand (for the planner) and per-token latency over time, as one PNG.

This module owns drawing and nothing else. The top panel steps through the replicas the autoscaler
observed and asked for. For a policy that plans (its decisions carry ``demand`` and ``planned``), a
middle panel shows demand in choices per second: what the planner measured from the pods, what it
planned for (the work a start-up ahead, or the burst floor), the capacity its instances give, and what
the client offered. The bottom panel shows the per-token latency the policy decided on (the line), each
finished request's client-side per-token latency (the dots, simple and complex apart) and the policy's
target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: the demo runs headless and only writes a file

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nlg_demo.load import LoadRecord  # noqa: E402


@dataclass(frozen=True)
class Round:
    """One control-loop round, seconds since the demo started: decided at ``t``, applied by ``t_end``."""

    t: float
    t_end: float
    current: int
    desired: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    """The decision's values (ms for latencies, choices/s for demand), plus ``capacity`` for a planner."""


@dataclass(frozen=True)
class Signal:
    """The per-token signal the policy decided on: its key in :attr:`Round.metrics` and its target."""

    key: str
    label: str
    target_ms: float
    target_label: str


def plans(rounds: Sequence[Round]) -> bool:
    """Whether the rounds come from a policy that plans demand (the planner)."""
    return any("planned" in r.metrics for r in rounds)


def offered(records: Sequence[LoadRecord], t0: float, bin_s: float) -> tuple[list[float], list[float]]:
    """Choices the client sent per second, in bins of ``bin_s`` from ``t0`` (bin starts, rates)."""
    sent = [r.start - t0 for r in records if r.start >= t0]
    if not sent:
        return [], []
    bins = int(max(sent) // bin_s) + 1
    rates = [0.0] * bins
    for r in records:
        if r.start >= t0:
            rates[int((r.start - t0) // bin_s)] += r.choices / bin_s
    return [i * bin_s for i in range(bins)], rates


def _series(rounds: Sequence[Round], key: str) -> tuple[list[float], list[float]]:
    kept = [(r.t, r.metrics[key]) for r in rounds if key in r.metrics]
    return [t for t, _ in kept], [v for _, v in kept]


def _replicas(axis: Axes, rounds: Sequence[Round]) -> None:
    # Instances change when the reload finishes (end of the round), the decision at its start.
    axis.step([r.t_end for r in rounds], [r.current for r in rounds], where="post", label="instances", lw=2)
    axis.step([r.t for r in rounds], [r.desired for r in rounds], where="post", label="desired", ls="--")
    axis.set_ylabel("replicas")
    axis.set_ylim(bottom=0, top=max([r.desired for r in rounds] + [r.current for r in rounds] + [1]) + 1)
    axis.legend(loc="upper left")


def _demand(axis: Axes, rounds: Sequence[Round], records: Sequence[LoadRecord], t0: float, bin_s: float) -> None:
    starts, rates = offered(records, t0, bin_s)
    if starts:
        axis.step(starts + [starts[-1] + bin_s], rates + [rates[-1]], where="post", color="grey", alpha=0.6,
                  label=f"offered by the client ({bin_s:g} s bins)")  # fmt: skip
    axis.plot(*_series(rounds, "demand"), color="tab:blue", lw=2, label="demand (planner, from the pods)")
    axis.plot(*_series(rounds, "planned"), color="tab:orange", lw=2, ls="--",
              label="planned for: the work, or the burst floor")  # fmt: skip
    axis.step(*_series(rounds, "fleet_capacity"), where="post", color="tab:red", lw=1, ls=":",
              label="capacity planned: instances x per-instance (learned) x headroom")  # fmt: skip
    axis.set_ylabel("choices per second")
    shown = [v for key in ("demand", "planned", "fleet_capacity") for v in _series(rounds, key)[1]]
    highest = max([*shown, *rates, 1.0])
    axis.set_ylim(0, highest * 1.4)  # room above the lines for the legend
    axis.legend(loc="upper right", fontsize="small")


def _latency(axis: Axes, rounds: Sequence[Round], records: Sequence[LoadRecord], t0: float, signal: Signal) -> None:
    for kind, color in (("simple", "tab:green"), ("complex", "tab:purple")):
        done = [(r.end - t0, r.per_token_ms) for r in records if r.kind == kind and r.end is not None]
        shown = [(t, v) for t, v in done if v is not None and t >= 0]
        axis.scatter([t for t, _ in shown], [v for _, v in shown], s=8, alpha=0.35, color=color,
                     label=f"{kind} requests (client)")  # fmt: skip
    times, values = _series(rounds, signal.key)
    if times:
        axis.plot(times, values, color="tab:blue", linewidth=2, label=signal.label)
    axis.axhline(signal.target_ms, color="tab:red", linestyle=":", label=signal.target_label)
    axis.set_ylabel("per-token latency (ms)")
    axis.set_ylim(bottom=0)
    axis.legend(loc="upper right", fontsize="small")


def draw(
    rounds: Sequence[Round],
    records: Sequence[LoadRecord],
    t0: float,
    signal: Signal,
    load_stopped_at: float | None,
    title: str,
    bin_s: float = 10.0,
) -> Figure:
    """The figure; ``t0`` is the monotonic time the demo started (for the requests)."""
    planning = plans(rounds)
    ratios = (1, 1.3, 1.4) if planning else (1, 1.6)
    fig, axes = plt.subplots(len(ratios), 1, figsize=(10, 3.2 * len(ratios)), sharex=True, height_ratios=ratios)
    _replicas(axes[0], rounds)
    if planning:
        _demand(axes[1], rounds, records, t0, bin_s)
    _latency(axes[-1], rounds, records, t0, signal)
    for axis in axes:
        axis.grid(alpha=0.3)
        if load_stopped_at is not None:
            axis.axvline(load_stopped_at, color="grey", linestyle="-.", linewidth=1)
    axes[-1].set_xlabel("seconds since start" + ("" if load_stopped_at is None else " (dash-dot: load stops)"))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_run(
    path: Path,
    rounds: Sequence[Round],
    records: Sequence[LoadRecord],
    t0: float,
    signal: Signal,
    load_stopped_at: float | None,
    title: str = "nlg-demo",
    bin_s: float = 10.0,
) -> Path:
    """Writes the PNG of :func:`draw`."""
    fig = draw(rounds, records, t0, signal, load_stopped_at, title, bin_s)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
