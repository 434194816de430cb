"""PNG figures of runs (matplotlib, Agg backend): the what-if views, and a protocol's figures for the report."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from nlgsim.oracle import OracleResult  # noqa: E402
from nlgsim.protocol_tables import (  # noqa: E402
    REFERENCES,
    Spread,
    by_policy,
    family,
    figure_window,
    stat,
    window_ratios,
)
from nlgsim.results import SLO, replicas_over_time, request_table  # noqa: E402
from nlgsim.simulator import RunLog  # noqa: E402

if TYPE_CHECKING:
    from nlgsim.protocol_result import ProtocolResult


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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


# -- a protocol's result (benchmarks/scaling_policies.md) ----------------------------------------------

FAMILY_COLOURS = {"request": "#7f7f7f", "pertoken": "#1f77b4", "planner": "#d62728", "fixed": "#2ca02c"}
#: The references (the lagged oracle, nlgsim/lagged.py): their own colour, and no front of settings.
REFERENCE_COLOURS = dict.fromkeys(REFERENCES, "#8c564b")
_COLOURS = {**FAMILY_COLOURS, **REFERENCE_COLOURS}
#: Requests missed, under a policy's pods: no family's colour.
MISSED_COLOUR = "#ff7f0e"


def _colour(policy: str) -> str:
    return _COLOURS.get(family(policy), "#9467bd")


def _spread_bars(
    ax: Axes, names: Sequence[str], spreads: Sequence[Spread], scale: float = 1.0, missing: str = ""
) -> None:
    """One horizontal bar per policy at its mean, a line from its least to its most; where the mean
    is 0 or missing (``missing`` says what that means) a word stands in for the bar."""
    y = np.arange(len(names))
    means = [s.mean * scale if math.isfinite(s.mean) else 0.0 for s in spreads]
    ax.barh(y, means, color=[_colour(n) for n in names], alpha=0.8, height=0.6)
    for i, s in enumerate(spreads):
        if math.isfinite(s.mean) and s.hi > s.lo:
            ax.plot([s.lo * scale, s.hi * scale], [i, i], color="black", linewidth=1.2)
        if missing and (not math.isfinite(s.mean) or s.hi == 0):
            word = "0" if math.isfinite(s.mean) else missing
            ax.annotate(word, (0, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.invert_yaxis()


def thesis_summary(result: ProtocolResult, path: Path, title: str) -> Path:
    """Attainment, GPU-seconds and first scale-out per policy: means as bars, seeds' range as lines."""
    runs = by_policy(result)
    names = list(runs)
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 0.45 * len(names) + 1.4), sharey=True)
    panels = [
        ("attainment (%)", lambda s: s.attainment, 100.0, ""),
        ("GPU-seconds", lambda s: s.gpu_seconds, 1.0, ""),
        ("first scale-out (s)", lambda s: s.first_scale_s, 1.0, "never"),
    ]
    for ax, (label, value, scale, missing) in zip(axes, panels, strict=True):
        spreads = [stat(runs[n], value) for n in names]
        _spread_bars(ax, names, spreads, scale, missing)
        ax.set_xlabel(label)
        finite = [v * scale for s in spreads for v in (s.lo, s.hi) if math.isfinite(v)]
        if finite and label.startswith("attainment"):
            lo = min(finite)
            ax.set_xlim(max(0.0, lo - 0.1 * (100 - lo) - 0.5), 100.0)
    fig.suptitle(title + f" (bars: mean of {len(result.replicates)} seeds; lines: least to most)", fontsize=10)
    return _save(fig, path)


def replicas_small_multiples(
    series: Mapping[str, Sequence[tuple[float, int]]],
    path: Path,
    title: str,
    end: float,
    oracle: tuple[Sequence[float], Sequence[int]] | None = None,
    misses: Mapping[str, Sequence[int]] | None = None,
    interval_s: float = 0.0,
) -> Path:
    """Pods billed over time, one panel per policy on a shared time axis, each with the oracle's replicas
    dashed where given. Each panel has its own count scale, from 0 to the most its policy or the oracle
    reached: on one shared scale a policy that runs away to the maximum flattens every other panel.

    ``misses`` (per policy, requests missed in each ``interval_s`` from the start) are drawn as pale bars
    on each panel's right-hand scale, shared by the panels: when a policy lost requests against when its
    pods came."""
    names = list(series)
    fig, axes = plt.subplots(len(names), 1, figsize=(7.6, 1.1 * len(names) + 1.0), sharex=True)
    axes_list = [axes] if len(names) == 1 else list(axes)
    oracle_top = max(list(oracle[1]) if oracle else [1])
    shown_misses = {n: list(misses[n]) for n in names if misses and misses.get(n)} if interval_s > 0 else {}
    most_missed = max((max(m) for m in shown_misses.values()), default=0)
    for ax, name in zip(axes_list, names, strict=True):
        if most_missed > 0 and name in shown_misses:
            bars = ax.twinx()
            lost = shown_misses[name]
            left = [k * interval_s for k in range(len(lost))]
            bars.bar(left, lost, width=interval_s, align="edge", color=MISSED_COLOUR, alpha=0.35, linewidth=0)
            bars.set_ylim(0, most_missed * 1.1)
            bars.yaxis.set_major_locator(MaxNLocator(nbins=2))
            bars.tick_params(axis="y", labelsize=7, colors=MISSED_COLOUR)
            ax.set_zorder(bars.get_zorder() + 1)  # the pods' line over the bars
            ax.patch.set_visible(False)
        pts = list(series[name])
        t = [p[0] for p in pts] + [end]
        n = [p[1] for p in pts] + [pts[-1][1] if pts else 0]
        ax.step(t, n, where="post", color=_colour(name), linewidth=1.6)
        if oracle is not None:
            ot, on = oracle
            ax.step(list(ot), list(on), where="post", color="black", linestyle="--", linewidth=1.0)
        ax.set_title(name, loc="left", fontsize=8, pad=2)
        ax.set_ylim(0, max([oracle_top, *n]) + 0.6)
        ax.set_xlim(0, end)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    axes_list[-1].set_xlabel("seconds from the start of the measured window")
    fig.supylabel("pods billed", fontsize=9)
    keys = ["dashed: the oracle"] if oracle else []
    if most_missed:
        keys.append(f"bars, right: requests missed per {interval_s:g} s")
    fig.suptitle(title + (f"\n({'; '.join(keys)})" if keys else ""), fontsize=10)
    return _save(fig, path)


#: Where each family's labels go around its points (offset in points, alignment), so that two
#: families' points at one place keep their labels apart.
_LABEL_AT = {
    "request": ((-4, -11), "right"), "pertoken": ((4, -11), "left"),
    "planner": ((-4, 5), "right"), "fixed": ((4, 5), "left"),
}  # fmt: skip


def family_front(result: ProtocolResult, path: Path, title: str, feasible: bool = False) -> Path:
    """Mean attainment against mean GPU-seconds, each family's settings joined in cost order: all of
    them, and beside it the settings near the target, where the comparison is made."""
    runs = by_policy(result)
    target = 100 * float(result.command["slo"]["target"])
    points: dict[str, list[tuple[float, float, str]]] = {}
    for fam in FAMILY_COLOURS:
        members = [p for p in runs if family(p) == fam]
        points[fam] = sorted(
            (stat(runs[p], lambda s: s.gpu_seconds).mean,
             100 * stat(runs[p], lambda s: s.attainment_feasible if feasible else s.attainment).mean, p)
            for p in members
        )  # fmt: skip
    fig, (whole, near) = plt.subplots(1, 2, figsize=(11.0, 4.8))
    floor = target - 4.0
    for ax, low in ((whole, -math.inf), (near, floor)):
        shown = {fam: [p for p in pts if p[1] >= low] for fam, pts in points.items()}
        for fam, pts in shown.items():
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=FAMILY_COLOURS[fam], label=fam,
                        linewidth=1.2)  # fmt: skip
        ax.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}%")
        every = [p for pts in shown.values() for p in pts]
        if every:
            lo = min(p[1] for p in every)
            xs = [p[0] for p in every]
            pad = 0.08 * (max(xs) - min(xs) or 1.0)
            ax.set_xlim(min(xs) - pad, max(xs) + pad)
            ax.set_ylim(lo - 0.08 * (100 - lo) - 0.2, 100 + 0.06 * (100 - lo) + 0.05)
        _label_settings(ax, shown)
        ax.set_xlabel("GPU-seconds (mean)")
        ax.grid(alpha=0.3)
    whole.set_ylabel("attainment (%, mean)" + (" over feasible requests" if feasible else ""))
    whole.set_title("every setting", fontsize=9)
    near.set_title(f"settings at {floor:g}% and above", fontsize=9)
    whole.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def _label_settings(ax: Axes, shown: Mapping[str, Sequence[tuple[float, float, str]]], size: float = 7) -> None:
    """Each point's setting beside it, unless the label would cover one already placed (settings close
    together in the whole view keep their markers; the zoomed panel separates them)."""
    placed: list[tuple[float, float, float, float]] = []  # label boxes, in points from the axes' corner
    to_points = ax.transData + ax.figure.dpi_scale_trans.inverted()
    for fam, pts in shown.items():
        colour = FAMILY_COLOURS[fam]
        (dx, dy), ha = _LABEL_AT[fam]
        for x, y, p in reversed(pts):  # costliest first: where settings crowd at the top, the top one keeps its label
            head, *opts = p.split()
            short = " ".join([head.partition(":")[2] or head, *opts])
            px, py = 72 * to_points.transform((x, y)) + (dx, dy)
            width = 0.6 * size * len(short)
            left = px - width if ha == "right" else px
            box = (left, py, left + width, py + size)
            if any(box[0] < o[2] and o[0] < box[2] and box[1] < o[3] and o[1] < box[3] for o in placed):
                continue
            placed.append(box)
            ax.annotate(short, (x, y), fontsize=size, xytext=(dx, dy), textcoords="offset points", ha=ha, color=colour)


def trace_summary(result: ProtocolResult, path: Path, title: str) -> Path:
    """Per policy: GPU-seconds over the oracle's and attainment over the feasible requests, window by
    window (dot: mean; line: least to most)."""
    runs = by_policy(result)
    names = list(runs)
    target = float(result.command["slo"]["target"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 0.42 * len(names) + 1.5), sharey=True)
    y = np.arange(len(names))
    ratios = [window_ratios(result, n)[0] for n in names]
    atts = [stat(runs[n], lambda s: 100 * s.attainment_feasible) for n in names]
    for ax, spreads in ((left, ratios), (right, atts)):
        for i, (n, s) in enumerate(zip(names, spreads, strict=True)):
            ax.plot([s.lo, s.hi], [i, i], color=_colour(n), linewidth=1.5)
            ax.plot([s.mean], [i], "o", color=_colour(n))
        ax.grid(axis="x", alpha=0.3)
    reps = result.replicates
    paid = [r.startup_bound_gpu_s / r.oracle_gpu_s for r in reps if r.oracle_gpu_s and r.startup_bound_gpu_s]
    left.axvline(1.0, color="black", linestyle="--", linewidth=1, label="oracle")
    if paid:
        left.axvline(statistics.fmean(paid), color="black", linestyle=":", linewidth=1, label="start-up bound (mean)")
    left.set_xscale("log")
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Minor ticks labelled at 2, 3 and 5 times a power of ten: every one would run together near 1.
    left.xaxis.set_minor_formatter(
        FuncFormatter(lambda v, _: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5) else "")
    )
    left.set_xlabel("GPU-seconds / the oracle's (log)")
    left.legend(fontsize=7, loc="best")  # clear of the points, whichever rows they fall in
    right.axvline(100 * target, color="black", linestyle=":", linewidth=1)
    lows = [s.lo for s in atts if math.isfinite(s.lo)]
    lo = min([*lows, 100 * target])
    span = 100 - lo + 0.1
    right.set_xlim(lo - 0.05 * span, 100 + 0.03 * span)  # room for the dots at 100%
    right.set_xlabel(f"attainment over feasible requests (%); target {100 * target:g}%")
    left.set_yticks(y, names)
    left.invert_yaxis()
    fig.suptitle(title + f" ({len(result.replicates)} windows: dot mean, line least to most)", fontsize=10)
    return _save(fig, path)


#: Policies a thesis result's replica figure draws, a panel each: the thesis's policies, both planners, the
#: three anchors and a fixed count stay readable; a whole family's settings do not, and its front says more.
REPLICA_PANELS = 12


def protocol_figure_kinds(result: ProtocolResult) -> list[str]:
    """Which figures a result gets: ``summary``, ``replicas`` (up to ``REPLICA_PANELS`` policies) and
    ``front`` (where more than one family runs over several settings).

    A trace whose oracle needs the same replicas throughout gets none: every policy's line would be flat.
    """
    runs = by_policy(result)
    if result.protocol == "thesis":
        # Families compared over their settings get the front.
        several = sum(sum(family(p) == f for p in runs) > 1 for f in FAMILY_COLOURS) > 1
        return ["summary", *(["replicas"] if len(runs) <= REPLICA_PANELS else []), *(["front"] if several else [])]
    orc = result.oracle
    return [] if orc is None or max(orc.replicas) == min(orc.replicas) else ["summary", "replicas"]


def protocol_figures(result: ProtocolResult, out: Path, prefix: str, title: str = "", draw: bool = True) -> list[str]:
    """The figures of one protocol result as ``{prefix}{kind}.png`` in ``out`` (drawn unless ``draw`` is
    False); their file names."""
    kinds = protocol_figure_kinds(result)
    names = [f"{prefix}{kind}.png" for kind in kinds]
    if not draw:
        return names
    title = title or f"{result.protocol} protocol, {result.command['workload'].rpartition('/')[2]}"
    for kind, name in zip(kinds, names, strict=True):
        _DRAW[kind](result, out / name, title)
    return names


def _thesis_replicas(result: ProtocolResult, path: Path, title: str) -> Path:
    rep = result.replicates[0]
    first = {r.key.policy: r for r in result.runs if r.key.replicate == rep.index}
    end = max(r.summary.end_s for r in first.values()) - rep.since
    shown = {p: first[p].timeline for p in by_policy(result) if p in first}
    return replicas_small_multiples(shown, path, f"{title}: {rep.label}", end)


def _trace_replicas(result: ProtocolResult, path: Path, title: str) -> Path:
    """The window of :func:`figure_window`: the planners, one HPA policy and the lagged oracles, each beside
    the oracle, with the requests each missed."""
    orc = result.oracle
    assert orc is not None
    rep = figure_window(result)
    in_rep = {r.key.policy: r for r in result.runs if r.key.replicate == rep.index}
    target = float(result.command["slo"]["target"])
    planners = [p for p in in_rep if family(p) == "planner"]
    # The HPA policy to show: the cheapest at the target in that window, else the one closest to it.
    hpa = sorted(
        (r.summary for p, r in in_rep.items() if family(p) in ("request", "pertoken")),
        key=lambda s: (0, s.gpu_seconds) if s.attainment_feasible >= target - 1e-12 else (1, -s.attainment_feasible),
    )
    shown = {p: in_rep[p].timeline for p in planners[:2]}
    if hpa:
        shown[hpa[0].name] = in_rep[hpa[0].name].timeline
    # The lagged oracle: the oracle's own counts, a start-up late and held (nlgsim/lagged.py).
    shown.update({p: in_rep[p].timeline for p in in_rep if family(p) in REFERENCES})
    if not shown:  # none of those families ran: the policies that did, as many as the panels hold
        shown = {p: r.timeline for p, r in list(in_rep.items())[:REPLICA_PANELS]}
    length = (rep.until or 0.0) - rep.since
    orc_n = list(result.oracle_in(rep))
    orc_t = [k * orc.interval_s for k in range(len(orc_n) + 1)]
    missed = {p: in_rep[p].missed for p in shown}
    return replicas_small_multiples(
        shown, path, f"{title}: {rep.label}", length, (orc_t, [*orc_n, orc_n[-1]]), missed, orc.interval_s
    )


def _front(result: ProtocolResult, path: Path, title: str) -> Path:
    return family_front(result, path, title, feasible=result.protocol == "trace")


def _summary(result: ProtocolResult, path: Path, title: str) -> Path:
    return (thesis_summary if result.protocol == "thesis" else trace_summary)(result, path, title)


def _replicas(result: ProtocolResult, path: Path, title: str) -> Path:
    return (_thesis_replicas if result.protocol == "thesis" else _trace_replicas)(result, path, title)


_DRAW = {"summary": _summary, "replicas": _replicas, "front": _front}
