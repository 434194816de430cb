"""How long a stop of the model's tritonserver leaves the model, read from the server's own arguments.

The model runs in a Python-backend stub whose parent is the tritonserver process, started by
nlg-triton, the chart or by hand with any arguments. Its command line (/proc/<ppid>/cmdline) says
what the model needs: `--exit-timeout-secs` (default 30), and where its HTTP endpoint is
(`--allow-http`, `--http-address`, `--http-port`), which the readiness watch asks (server_watch).

Triton 2.51's stop counts one exit timeout from SIGTERM: the HTTP endpoint refuses new connections
and waits for the open ones, then the server waits for the model's streams (their response
factories hold the model) and unloads it, calling finalize(). Past the timeout it calls exit(1)
with the model's threads still running, which crashes the server (SIGSEGV, or a malloc abort that
hangs it with its stubs). So once the model notices the stop (server_watch) it cuts its streams
early enough to send their final responses, stop its threads and let its stub exit within the
timeout: `StopBudget.drain_end` is the moment to cut.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_backend.settings import EXIT_MARGIN_SECONDS

# tritonserver's own defaults.
DEFAULT_EXIT_TIMEOUT_SECONDS = 30
DEFAULT_HTTP_PORT = 8000
# How late the model may learn of a stop: the HTTP check's interval, or the main thread's sustained
# sleep and the interval of that check (server_watch).
NOTICE_SECONDS = 1.5
# The Python backend's shared-memory region names (shm_sweep); `--backend-config=python,
# shm-region-prefix-name=...` sets another.
DEFAULT_SHM_REGION_PREFIX = "triton_python_backend_shm_region_"
_PREFIX_OPTION = "python,shm-region-prefix-name="
_FALSE = ("false", "off", "0")


@dataclass(frozen=True)
class ServerArgs:
    """What the model reads from its tritonserver's arguments."""

    exit_timeout_seconds: int = DEFAULT_EXIT_TIMEOUT_SECONDS
    http_url: str | None = f"http://127.0.0.1:{DEFAULT_HTTP_PORT}"  # None: HTTP is off
    shm_region_prefix: str = DEFAULT_SHM_REGION_PREFIX


def parse_server_args(argv: Sequence[str]) -> ServerArgs:
    """tritonserver's arguments (getopt's `--name=value` or `--name value`; the last one counts, as
    there); a value tritonserver would refuse keeps the default, as the server would not have started."""
    options: dict[str, str] = {}
    prefix = DEFAULT_SHM_REGION_PREFIX
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, sep, value = arg.partition("=")
        if not sep:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        options[name] = value
        if name == "--backend-config" and value.startswith(_PREFIX_OPTION) and len(value) > len(_PREFIX_OPTION):
            prefix = value[len(_PREFIX_OPTION) :]
    exit_timeout = DEFAULT_EXIT_TIMEOUT_SECONDS
    raw = options.get("--exit-timeout-secs", "")
    if raw.strip().isdigit():
        exit_timeout = int(raw)
    http_url: str | None = None
    if options.get("--allow-http", "true").strip().lower() not in _FALSE:
        port = DEFAULT_HTTP_PORT
        if options.get("--http-port", "").strip().isdigit():
            port = int(options["--http-port"])
        http_url = f"http://{_connectable(options.get('--http-address', '0.0.0.0'))}:{port}"
    return ServerArgs(exit_timeout, http_url, prefix)


def _connectable(address: str) -> str:
    """The address to reach a server bound to `address` from the same machine."""
    address = address.strip().strip("[]")
    if address in ("", "0.0.0.0"):
        return "127.0.0.1"
    if address == "::":
        return "[::1]"
    return f"[{address}]" if ":" in address else address


def read_server_args(pid: int | None = None, proc: Path = Path("/proc")) -> ServerArgs:
    """The arguments of process `pid` (by default this process's parent: the stub's tritonserver);
    tritonserver's defaults where its command line cannot be read."""
    pid = os.getppid() if pid is None else pid
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ServerArgs()
    return parse_server_args([part.decode(errors="replace") for part in raw.split(b"\0") if part])


def stop_margin_seconds(exit_timeout_seconds: int) -> float:
    """What a stop keeps after the cut: the final responses, the model's threads, the stub's exit and
    the server's one-second checks; half of a short exit timeout."""
    return min(float(EXIT_MARGIN_SECONDS), exit_timeout_seconds / 2)


@dataclass(frozen=True)
class StopBudget:
    """When a stop cuts the streams still open: after the model's drain, or early enough for the exit
    timeout, whichever comes first."""

    drain_seconds: float  # the model setting drain_seconds
    exit_timeout_seconds: int

    @property
    def margin_seconds(self) -> float:
        return stop_margin_seconds(self.exit_timeout_seconds)

    @property
    def seconds(self) -> float:
        """How long after the stop was noticed the streams may run."""
        exit_budget = self.exit_timeout_seconds - self.margin_seconds - NOTICE_SECONDS
        return max(0.0, min(float(self.drain_seconds), exit_budget))

    def drain_end(self, noticed: float) -> float:
        """The moment to cut, for a stop noticed at `noticed` (monotonic seconds)."""
        return noticed + self.seconds
