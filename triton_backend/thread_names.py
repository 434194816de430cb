"""The kernel's name for the calling thread, so that `top -H`, `ps -L` and /proc/<pid>/task/*/comm tell
the model's threads apart: Python before 3.14 names only its own `threading.Thread` objects.

The serving benchmark reads these names to split the stub process's CPU time between the engine and
the response sender (benchmarks/engine_throughput.py); an operator reads them to see which one is busy.
Threads an OpenMP runtime starts from a named thread inherit its name, so torch's intra-op workers
count as the engine's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

PR_SET_NAME = 15  # prctl(2); the kernel keeps the first 15 bytes
NAME_BYTES = 15


@functools.cache
def _prctl() -> Callable[..., int] | None:
    library = ctypes.util.find_library("c")
    prctl: Callable[..., int] | None = getattr(ctypes.CDLL(library), "prctl", None) if library else None
    return prctl


def name_this_thread(name: str) -> bool:
    """Gives the calling OS thread `name`, cut to 15 bytes; False where the C library has no prctl."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_NAME, name.encode()[:NAME_BYTES], 0, 0, 0) == 0
