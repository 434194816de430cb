"""The suite's figure: for each shape of a set, the window that decides the default's verdict (where it
attains least), with the oracle's replicas, the default's pods, the planner as it was, and the best fixed
fleet, so that where a shape is lost, and to what, can be seen."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from benchmarks.suite.render import cell, verdict  # noqa: E402
from benchmarks.suite.runner import DEFAULT  # noqa: E402

STYLES = {
    DEFAULT: {"color": "#1f77b4", "linewidth": 1.6, "label": DEFAULT},
    "planner-v1": {"color": "#ff7f0e", "linewidth": 1.0, "label": "planner-v1"},
}
FIXED = {"color": "black", "linewidth": 1.0, "linestyle": "--", "label": "best fixed"}


def _steps(points: list[list[float]], end: float) -> tuple[list[float], list[float]]:
    t = [p[0] for p in points] + [end]
    n = [p[1] for p in points] + [points[-1][1] if points else 0]
    return t, n


def draw(data: Mapping[str, Any], split: str, path: Path) -> Path | None:
    """The set's figure at ``path``; None, and nothing drawn, where the results hold none of its shapes."""
    shapes = [s for s in data["shapes"] if s["split"] == split and s.get("deciding")]
    if not shapes:
        return None
    cols = 3
    rows = max(1, math.ceil(len(shapes) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(12, 2.3 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(shapes):]:
        ax.set_visible(False)
    for ax, shape in zip(axes.flat, shapes, strict=False):
        d = shape["deciding"]
        end, interval = d["length"], d["interval"]
        if d["oracle"] and interval:
            ot = [k * interval for k in range(len(d["oracle"]))] + [min(len(d["oracle"]) * interval, end)]
            on = [*d["oracle"], d["oracle"][-1]]
            ax.fill_between(ot, on, step="post", color="#cccccc", linewidth=0, label="oracle")
        for policy, points in d["pods"].items():
            style = STYLES.get(policy, FIXED)
            t, n = _steps(points, end)
            ax.step(t, n, where="post", **style)
        met = verdict(shape)[0]
        mark = {True: "met", False: "not met", None: "unknown"}[met]
        ax.set_title(f"{shape['name']}, window {d['window']}: {mark} ({cell(shape, DEFAULT)})", fontsize=8, loc="left")
        ax.set_xlim(0, end)
        ax.set_ylim(0, None)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.tick_params(labelsize=7)
    handles, labels = [], []
    for ax in axes.flat[: len(shapes)]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(labels))
    fig.suptitle(
        f"The {split} set: each shape's window where {DEFAULT} attains least (pods over seconds of the window)",
        fontsize=10, x=0.01, ha="left",
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
