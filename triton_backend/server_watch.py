"""What the model's stub process learns about its tritonserver: that it is stopping, and that it is gone.

Stopping: on SIGTERM Triton first closes its HTTP endpoint to new connections and waits for the
open ones (HTTP streams), and only then unloads the model (finalize()); gRPC streams hold nothing
up. `watch_readiness` sees the endpoint close, or the model marked not ready, and starts the
engine's drain then, so HTTP streams end in time too. It asks over that endpoint
(`http_model_ready`, at the address server_stop reads from the server's arguments), with a timeout
and without the interpreter's lock, not through `pb_utils.is_model_ready`, which waits on the server
holding the lock: with that call, a stop that came in the first half second of the streams drained
nothing and ran into the forced exit.

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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Literal

log = logging.getLogger(__name__)

PARENT_CHECK_INTERVAL = 0.5
READINESS_CHECK_INTERVAL = 0.5  # server_stop.NOTICE_SECONDS allows for it
FIRST_ANSWER_INTERVAL = 0.02


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


Readiness = Literal["ready", "not ready", "gone", "unknown"]


def http_model_ready(base_url: str, model: str, version: str, timeout: float = 1.0) -> Callable[[], Readiness]:
    """Asks `base_url` (tritonserver's HTTP endpoint) whether the model is ready: "ready", "not ready"
    (the server said so), "gone" (the connection was refused: no endpoint there, or no longer), or
    "unknown" (no answer in time: an overloaded server is no stopping one)."""
    url = f"{base_url.rstrip('/')}/v2/models/{urllib.parse.quote(model)}/versions/{urllib.parse.quote(version)}/ready"

    def ready() -> Readiness:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return "ready" if response.status == 200 else "not ready"
        except urllib.error.HTTPError:
            return "not ready"
        except urllib.error.URLError as err:
            return "gone" if isinstance(err.reason, ConnectionRefusedError) else "unknown"
        except ConnectionError:
            return "gone"
        except OSError:
            return "unknown"

    return ready


def watch_readiness(
    is_ready: Callable[[], Readiness],
    busy: Callable[[], bool],
    on_stopping: Callable[[], None],
    interval: float = READINESS_CHECK_INTERVAL,
) -> threading.Thread:
    """Starts a daemon thread that calls `on_stopping()` once the model is no longer ready, then ends.

    Asks every `interval` (more often until the first answer), from the start: tritonserver closes
    its HTTP endpoint the moment it is told to stop, so an endpoint that answered before and is gone
    now means stopping, and it must have answered before the stop. "not ready" means stopping (or
    unloading) at once. An endpoint that never answered (one the model cannot reach) leaves the drain to
    finalize(). Only `busy()` instances drain; an idle one has nothing to drain and keeps watching.
    """

    def run() -> None:
        answered = False
        while True:
            state = is_ready()
            stopping = state == "not ready" or (state == "gone" and answered)
            answered = answered or state in ("ready", "not ready")
            if stopping and busy():
                break
            # Until the endpoint first answers, ask often: tritonserver opens it just after loading
            # the model, and a stop soon after would otherwise find it closed before it was ever seen.
            time.sleep(interval if answered else FIRST_ANSWER_INTERVAL)
        log.info("model not ready (the server is stopping or unloading it): draining its streams")
        on_stopping()

    thread = threading.Thread(target=run, name="nlg-readiness-watch", daemon=True)
    thread.start()
    return thread
