"""What the model's stub process learns about its tritonserver: that it is stopping, and that it is gone.

Stopping: on SIGTERM Triton first closes its HTTP endpoint to new connections and waits for the
open ones (HTTP streams), then waits for the model's streams: their response factories hold the
model, so Triton unloads it and calls finalize() only once every stream has sent its final response.
The drain must therefore start before finalize(). `watch_readiness` starts it as soon as the server
says it is stopping, from two sources: its HTTP endpoint (`http_model_ready`, at the address
server_stop reads from the server's arguments: the endpoint closes, or the model is marked not
ready) and, for a server without HTTP, its main thread (`main_thread_stopping`), which waits for a
signal while serving and sleeps out the exit timeout while stopping. Neither goes through
`pb_utils.is_model_ready`, which waits on the server holding the interpreter's lock: with that call,
a stop that came in the first half second of the streams drained nothing and ran into the forced exit.

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
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

PARENT_CHECK_INTERVAL = 0.5
# server_stop.NOTICE_SECONDS allows for both: the HTTP check's interval, the main thread's sleep.
READINESS_CHECK_INTERVAL = 0.5
MAIN_THREAD_CHECK_INTERVAL = 0.2
STOP_SLEEP_SECONDS = 1.0
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


def main_thread_stopping(
    pid: int,
    proc: Path = Path("/proc"),
    sustained: float = STOP_SLEEP_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[], Readiness]:
    """Reads whether tritonserver `pid` is stopping from what its main thread waits in: serving, it
    waits for a signal on a condition variable (a futex); stopping, it counts down the exit timeout
    in one-second sleeps (nanosleep), first for the HTTP connections, then for the model. "not ready"
    once it has slept for `sustained` seconds on end, "ready" while it waits on the futex, else
    "unknown" (busy, or a kernel that does not say). It needs no endpoint: HTTP may be off."""
    wchan = proc / str(pid) / "task" / str(pid) / "wchan"
    asleep_since: list[float | None] = [None]

    def state() -> Readiness:
        try:
            waiting_in = wchan.read_text().strip()
        except OSError:
            return "unknown"
        now = clock()
        if "nanosleep" not in waiting_in:
            asleep_since[0] = None
            return "ready" if "futex" in waiting_in else "unknown"
        since = asleep_since[0]
        if since is None:
            since = asleep_since[0] = now
        return "not ready" if now - since >= sustained else "unknown"

    return state


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
    unloading) at once. An endpoint that never answered (one the model cannot reach) says nothing of
    a stop. Only `busy()` instances drain; an idle one has nothing to drain and keeps watching.
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
        on_stopping()

    thread = threading.Thread(target=run, name="nlg-readiness-watch", daemon=True)
    thread.start()
    return thread


def watch_stop(
    http_url: str | None, model: str, version: str, busy: Callable[[], bool], on_stopping: Callable[[], None]
) -> None:
    """Starts the watches that can see this server stop: its HTTP endpoint where it has one, its main
    thread where the kernel says what that waits in. `on_stopping` may be called by both."""
    if http_url is not None:
        watch_readiness(http_model_ready(http_url, model, version), busy=busy, on_stopping=on_stopping)
    server = os.getppid()
    stopping = main_thread_stopping(server)
    if _answers(stopping):
        watch_readiness(stopping, busy=busy, on_stopping=on_stopping, interval=MAIN_THREAD_CHECK_INTERVAL)
    elif http_url is None:
        log.warning(
            "HTTP is off and this kernel does not say what tritonserver's main thread waits in "
            "(/proc/%d/task/%d/wchan): a stop cannot drain the streams, and one that outlasts the "
            "exit timeout crashes the server; turn HTTP on",
            server,
            server,
        )


def _answers(state: Callable[[], Readiness], tries: int = 10) -> bool:
    """Whether a source says "ready" within a few tries (a busy moment reads "unknown")."""
    for _ in range(tries):
        if state() == "ready":
            return True
        time.sleep(0.05)
    return False
