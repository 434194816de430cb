"""What the model's stub process learns about its tritonserver: that it is stopping, and that it is gone.

Stopping: Triton keeps a model loaded until every stream of it has sent its final response, so on
SIGTERM finalize() would only run once the streams were done, and a stream longer than the exit
timeout would meet Triton's forced exit. Triton marks the model not ready as soon as it begins to
stop; `watch_readiness` sees that and starts the engine's drain then.

Gone: the stub watches its parent itself, but its exit path needs the GIL and a lock that a thread
blocked on the dead server can hold for ever; such a stub lived on with PPID 1, holding its memory
and the server's sockets. `watch_parent` asks the kernel for the parent's pid and, once the server is
gone, ends the process with os._exit: no locks, no cleanup, no finalize(). It makes no call into
Triton, so a call that never returns cannot stop it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

PARENT_CHECK_INTERVAL = 0.5
READINESS_CHECK_INTERVAL = 0.5


def watch_parent(
    interval: float = PARENT_CHECK_INTERVAL, exit_process: Callable[[int], object] = os._exit
) -> threading.Thread:
    """Starts the watchdog for the current parent process; returns its daemon thread."""
    parent = os.getppid()

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        # The logging module takes locks that a stuck thread may hold: write to the fd directly.
        os.write(2, f"nlg: tritonserver (pid {parent}) is gone; ending the model's stub process\n".encode())
        exit_process(1)

    thread = threading.Thread(target=run, name="nlg-parent-watch", daemon=True)
    thread.start()
    return thread


def watch_readiness(
    is_ready: Callable[[], bool],
    busy: Callable[[], bool],
    on_stopping: Callable[[], None],
    interval: float = READINESS_CHECK_INTERVAL,
) -> threading.Thread:
    """Starts a daemon thread that calls `on_stopping()` once the model is no longer ready, then ends.

    Asks only while `busy()`: with no stream open there is nothing to drain (finalize() stops an idle
    engine at once), and no call into the server is in flight when it dies. It asks nothing more once
    the server is stopping: an unloading model's calls into it can wait on the unload.
    """

    def ready() -> bool:
        try:
            return is_ready()
        except Exception:  # a stopping server answers "Server not ready" with an error
            return False

    def run() -> None:
        while not busy() or ready():
            time.sleep(interval)
        log.info("model not ready (the server is stopping or unloading it): draining its streams")
        on_stopping()

    thread = threading.Thread(target=run, name="nlg-readiness-watch", daemon=True)
    thread.start()
    return thread
