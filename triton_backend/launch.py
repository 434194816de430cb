"""Start the tritonserver that the PyPI wheel nvidia-pytriton ships, with this project's model.

The wheel carries the server binary, its libraries (nvidia_pytriton.libs), the Python backend and
one backend stub per Python version. The server wants a backend directory holding `python/` with the
backend and the stub that matches the interpreter; the stub loads libpython dynamically, so this
interpreter's LIBDIR goes first on the library path (an older system libpython breaks extension
modules such as _ssl). The model runs in the stub's interpreter, which finds this environment's
packages through PYTHONPATH.

Where nvidia-pytriton cannot be installed, the environment variable NLG_TRITON_HOME names a directory
laid out as the wheel's site-packages: `pytriton/tritonserver/...` and `nvidia_pytriton.libs/` (what
scripts/pack_gpu_bundle.py packs and scripts/gpu_bundle_env.sh unpacks); the server is taken from
there and pytriton is not imported. Unset, the installed wheel is used.

The stub of Triton 2.51 is built with a pybind11 that predates numpy 2: under numpy 2 it reads every
request tensor of more than one byte as its first byte repeated (a prompt arrives as garbage). Where
the environment has numpy 2, NLG_STUB_PYTHONPATH names directories that the model's interpreter
searches before this environment's packages, e.g. one holding numpy 1.26 (the bundle above has one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from triton_backend.server_stop import parse_server_args
from triton_backend.settings import DrainBudget
from triton_backend.shm_sweep import sweep


def _triton_home() -> Path:
    """The site-packages-like directory holding pytriton/tritonserver and nvidia_pytriton.libs."""
    home = os.environ.get("NLG_TRITON_HOME")
    if home:
        return Path(home).resolve()
    import pytriton

    return Path(pytriton.__file__).parent.parent


_HOME = _triton_home()
_TRITON = _HOME / "pytriton" / "tritonserver"
_LIBS = _HOME / "nvidia_pytriton.libs"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"


def backend_directory() -> Path:
    """A backend directory with the Python backend and the stub for this interpreter (made once)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = _TRITON / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise FileNotFoundError(f"nvidia-pytriton ships no Python backend stub for Python {version} ({stub})")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = cache / "nlg-serving" / f"backends-py{version}-{_fingerprint(stub)}"
    python_dir = target / "python"
    if not (python_dir / "triton_python_backend_stub").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="backends-", dir=target.parent))
        (staging / "python").mkdir()
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(_TRITON / "backends" / "python" / name, staging / "python" / name)
        shutil.copy2(stub, staging / "python" / stub.name)
        (staging / "python" / stub.name).chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging)  # another process made it first
    return target


def server_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, str(_LIBS), env.get("LD_LIBRARY_PATH", "")) if p)
    # NLG_STUB_PYTHONPATH goes before this environment's packages (numpy 1.x over an environment's numpy 2).
    stub_first = env.get("NLG_STUB_PYTHONPATH", "")
    paths = [stub_first, str(PROJECT_ROOT), *site.getsitepackages(), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    # The engine runs on a thread of the stub; one arena keeps its step memory for reuse (host_memory).
    env.setdefault("MALLOC_ARENA_MAX", "1")
    return env


def server_command(model_repository: Path, args: Sequence[str] = ()) -> list[str]:
    return [
        str(_TRITON / "bin" / "tritonserver"),
        f"--model-repository={model_repository}",
        f"--backend-directory={backend_directory()}",
        *args,
    ]


def with_drain_budget(budget: DrainBudget, env: dict[str, str], args: Sequence[str]) -> list[str]:
    """Sets the model's drain in `env` and returns `args` with Triton's exit timeout, both from `budget`.

    Either one set by hand could undercut the other (a drain that outlasts the exit timeout ends in
    Triton's forced exit), so both are refused here with the way to change them.
    """
    if "NLG_DRAIN_SECONDS" in env:
        raise ValueError("NLG_DRAIN_SECONDS: derived from the drain budget; unset it and set --max-stream-seconds")
    if any(a.split("=", 1)[0] == "--exit-timeout-secs" for a in args):
        raise ValueError(
            "--exit-timeout-secs: derived from the drain budget; leave it out and set --max-stream-seconds"
        )
    env["NLG_DRAIN_SECONDS"] = str(budget.drain_seconds)
    return [f"--exit-timeout-secs={budget.exit_timeout_seconds}", *args]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TritonServer:
    """A tritonserver on free loopback ports, ready on enter and always stopped on exit.

    `env` adds variables for the server (and the model), e.g. {"NLG_PRESET": "tiny"}; the drain and
    Triton's exit timeout come from `drain` (see DrainBudget). `host` and `ports` (http, grpc, metrics)
    place it as a pod is placed: several servers on loopback addresses of their own can share one set
    of port numbers, as the pods behind a headless Service do.
    """

    def __init__(
        self,
        model_repository: Path = DEFAULT_MODEL_REPOSITORY,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 180.0,
        log_path: Path | None = None,
        drain: DrainBudget | None = None,
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] | None = None,
    ) -> None:
        self.model_repository = model_repository
        self.host = host
        self.http_port, self.grpc_port, self.metrics_port = ports or (free_port(), free_port(), free_port())
        self._env = server_environment()
        self._env.update(env or {})
        self.drain = drain or DrainBudget()
        self._extra_args = with_drain_budget(self.drain, self._env, extra_args)
        self._ready_timeout = ready_timeout
        self._log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def start(self) -> TritonServer:
        args = [
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            *self._extra_args,
        ]
        sweep(prefixes=(parse_server_args(args).shm_region_prefix,), environ=self._env)
        log: IO[bytes]
        if self._log_path is not None:
            log = open(self._log_path, "wb")  # noqa: SIM115 - closed in stop()
        else:
            log = tempfile.NamedTemporaryFile(prefix="tritonserver-", suffix=".log")  # noqa: SIM115
        self._log = log
        # A session of its own: stop() can then end the backend stubs too, which outlive a crashed server.
        self.process = subprocess.Popen(
            server_command(self.model_repository, args),
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def log_text(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the server outlives its exit timeout."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(self.drain.exit_timeout_seconds + 10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # stubs left behind by a crash
        self._log.close()

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        """Until the server is ready and its metrics endpoint answers: Triton starts the metrics service
        after HTTP and gRPC, so a ready server may refuse a scrape for a moment (tens of milliseconds
        here, longer on a loaded machine)."""
        assert self.process is not None
        deadline = time.monotonic() + self._ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n{self._log_summary()}")
            if answers(f"http://{self.http_url}/v2/health/ready") and answers(self.metrics_url):
                return
            time.sleep(0.2)
        raise TimeoutError(f"tritonserver not ready in {self._ready_timeout:.0f}s:\n{self._log_summary()}")

    def _log_summary(self) -> str:
        # The server's closing status tables bury the cause: its error lines (E...) say it.
        text = self.log_text()
        errors = [line for line in text.splitlines() if line.startswith("E")]
        return "\n".join(errors[-20:]) if errors else text[-4000:]


def answers(url: str) -> bool:
    """Whether a GET of ``url`` gets 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size:x}{int(stat.st_mtime):x}"
