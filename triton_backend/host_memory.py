"""Keep freed host memory in the process instead of giving it back to the kernel after every step.

glibc's malloc serves large blocks with mmap, trims the top of its heap once more than a few MB are
free, and unmaps a thread arena's heap as soon as it is empty. So the tensors a CPU decode step
allocates and frees (logits, the gathered cache, the layers' activations: tens of MB) come back as
fresh pages every step, and each page faults and is zeroed by the kernel. Measured on the 2-core CPU
machine (gpt2, 16 streams): in-process on the main thread, 8-10 s of a run's 40 CPU-s went to the
kernel and the engine made 113-144 tokens/s; with the thresholds below 1.2-1.4 s and 179-186 tokens/s.
On an engine thread, as in the Triton model, the thresholds alone left 9-10 s in the kernel (90-102
tokens/s); with one arena as well, 0.5 s (146-180 tokens/s). The price is that the process keeps its
peak heap, which is the engine's working set and is needed again at the next step anyway.

It is one process-wide setting, so it belongs to whoever owns the process: the Triton model's
``initialize`` and the benchmark and profiling workers (a profile must time the engine as served).

What is kept is given back once the engine has nothing to do (``release_freed_memory``, called by
the engine loop after a quiet spell): an instance that served a burst and then sits idle, or waits
to be scaled in, should not hold the burst's peak. The next step faults its temporaries in once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

# mallopt(3) parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: The largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks up to
#: here come from the heap and are reused.
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap that is kept rather than returned.
TRIM_THRESHOLD = 1 << 30


@functools.cache
def _libc_function(name: str) -> Any:
    library = ctypes.util.find_library("c")
    return None if library is None else getattr(ctypes.CDLL(library), name, None)


def keep_freed_memory() -> bool:
    """Sets malloc to reuse freed blocks; False where the C library has no glibc ``mallopt``
    (nothing changes there)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    # One arena for every thread. A thread's own arena grows in 64 MiB heaps, and glibc unmaps a heap as
    # soon as it is free, whatever the trim threshold: the engine thread's step temporaries then come back
    # as fresh pages every step. This only takes effect if no thread has been given an arena yet, so
    # the server's environment sets MALLOC_ARENA_MAX=1 as well (triton_backend.launch, the chart).
    mallopt(M_ARENA_MAX, 1)
    if not applied:
        log.info("mallopt refused the thresholds; freed host memory goes back to the kernel")
    return applied


def release_freed_memory() -> bool:
    """Gives the heap's free pages back to the kernel (glibc ``malloc_trim``); True if any went back.
    Safe to call from any thread; a no-op (False) without glibc."""
    malloc_trim = _libc_function("malloc_trim")
    return bool(malloc_trim(0)) if malloc_trim is not None else False
