"""PNG figures of runs (matplotlib, Agg backend): the thesis's Figures 7.1-7.4 and the what-if views."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nlgsim.oracle import OracleResult  # noqa: E402
from nlgsim.results import SLO, Summary, replicas_over_time, request_table  # noqa: E402
from nlgsim.simulator import RunLog  # noqa: E402


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bars(summaries: Sequence[Summary], value: str, ylabel: str, title: str, path: Path) -> Path:
    """One bar per run of ``value`` (``first_scale_s``, ``gpu_seconds`` or a ``violations`` key)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = [s.name for s in summaries]
    if value in ("first_scale_s", "gpu_seconds"):
        ys = [getattr(s, value) for s in summaries]
    else:
        ys = [s.violations[value] for s in summaries]
    ys = [0.0 if math.isnan(y) else y for y in ys]
    ax.bar(names, ys, color=["#888888" if n.startswith("request") else "#3b75af" for n in names])
    for x, y in enumerate(ys):
        ax.annotate(f"{y:.0f}", (x, y), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=20)
    return _save(fig, path)


def replicas(logs: Mapping[str, RunLog], path: Path, title: str, oracle: OracleResult | None = None) -> Path:
    """Replicas (pods billed) over time for each run, with the oracle's as a dashed step line."""
    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    for name, log in logs.items():
        t, n = replicas_over_time(log)
        ax.step(t, n, where="post", label=name, linewidth=1.4)
    if oracle is not None:
        t = np.arange(len(oracle.replicas) + 1) * oracle.interval
        ax.step(
            t,
            [*oracle.replicas, oracle.replicas[-1]],
            where="post",
            linestyle="--",
            color="black",
            label="oracle",
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("replicas (GPUs)")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def latency(logs: Mapping[str, RunLog], path: Path, title: str, slo: SLO, bin_s: float = 10.0) -> Path:
    """p99 request latency and p99 per-token latency of requests by arrival time, in bins."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 5.2), sharex=True)
    for name, log in logs.items():
        table = request_table(log)
        if not len(table.arrival):
            continue
        edges = np.arange(0.0, table.arrival.max() + bin_s, bin_s)
        idx = np.digitize(table.arrival, edges) - 1
        mids, lat, tok = [], [], []
        for i in range(len(edges)):
            sel = idx == i
            if sel.any():
                mids.append(edges[i] + bin_s / 2)
                lat.append(np.percentile(table.latency[sel], 99))
                tok.append(np.percentile(table.per_token[sel], 99) * 1000)
        top.plot(mids, lat, label=name, linewidth=1.2)
        bottom.plot(mids, tok, label=name, linewidth=1.2)
    top.axhline(slo.request_s, color="red", linestyle=":", linewidth=1)
    bottom.axhline(slo.per_token_s * 1000, color="red", linestyle=":", linewidth=1)
    top.set_ylabel("p99 request latency (s)")
    top.set_yscale("log")
    bottom.set_ylabel("p99 per-token (ms)")
    bottom.set_yscale("log")
    bottom.set_xlabel("arrival time (s)")
    top.set_title(title)
    top.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def tradeoff(
    points: Sequence[tuple[str, float, float]],
    path: Path,
    title: str,
    front: Sequence[tuple[str, float, float]] = (),
    oracle_gpu: float | None = None,
    xlabel: str = "GPU-seconds",
    ylabel: str = "SLO violations",
) -> Path:
    """Violations (or misses) against GPU-seconds, one labelled point per run; the front joined."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    for name, gpu, bad in points:
        ax.scatter(gpu, bad, s=18, color="#888888" if name.startswith("request") else "#3b75af")
        ax.annotate(name, (gpu, bad), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if front:
        ordered = sorted(front, key=lambda p: p[1])
        ax.plot(
            [p[1] for p in ordered],
            [p[2] for p in ordered],
            color="#d62728",
            linewidth=1,
            label="Pareto front",
        )
    if oracle_gpu is not None:
        ax.axvline(oracle_gpu, color="black", linestyle="--", linewidth=1, label="oracle")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if front or oracle_gpu is not None:
        ax.legend(fontsize=8)
    return _save(fig, path)


def distributions(series: Mapping[str, Sequence[float]], path: Path, title: str, xlabel: str) -> Path:
    """Empirical CDFs, one line per named sample (sim against real)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, values in series.items():
        xs = np.sort(np.asarray(values, dtype=float))
        if len(xs):
            ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)
