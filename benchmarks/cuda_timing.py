"""Device time of GPU work, read from CUDA events around it: what the device spent, without the
host's time to launch it."""

from __future__ import annotations

from collections.abc import Callable

import torch


def event_seconds(work: Callable[[], object]) -> float:
    """Seconds from a CUDA event recorded before what `work` enqueues to one recorded after it."""
    # torch.cuda.Event's constructor is unannotated in torch.
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    work()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000  # milliseconds, untyped in torch
