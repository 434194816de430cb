"""The balancer's configuration as the chart renders it, and Debian's haproxy binary that runs it.

haproxy comes from `bash scripts/setup --with-system` (Debian's package, the 2.6 branch of the
chart's image). Where it is missing a test skips, naming it, except in CI (the `CI` environment
variable), where it fails: CI must run these.
"""

from __future__ import annotations

import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from external_tools import HAPROXY, require
from helm_testkit import Rendered


def haproxy_binary() -> str:
    return require(HAPROXY)


def balancer_config(rendered: Rendered) -> str:
    return rendered.config_map_file("-balancer", "haproxy.cfg")


def sections(config: str) -> dict[str, list[str]]:
    """haproxy.cfg by section header ("global", "backend triton-grpc", ...): its lines, stripped,
    without comments."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in config.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = found.setdefault(line.strip(), [])
        elif current is not None:
            current.append(line.strip())
    return found


def keyword(lines: list[str], name: str) -> list[list[str]]:
    """The arguments of each line of `lines` that starts with keyword `name` (e.g. "server-template")."""
    return [line.split()[len(name.split()) :] for line in lines if re.match(rf"{re.escape(name)}(\s|$)", line)]


def check_config(config: str) -> subprocess.CompletedProcess[str]:
    """`haproxy -c`: HAProxy's own parse of the whole file, resolvers included."""
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as f:
        f.write(config)
        f.flush()
        return subprocess.run([haproxy_binary(), "-c", "-f", f.name], capture_output=True, text=True, timeout=30)


class HAProxy:
    """haproxy in the foreground with `config`, its log (stdout) in `log_path`; stopped on exit."""

    def __init__(self, config: str, workdir: Path) -> None:
        self.config_path = workdir / "haproxy.cfg"
        self.config_path.write_text(config, encoding="utf-8")
        self.log_path = workdir / "haproxy.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> HAProxy:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in __exit__
        self.process = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(self.config_path)], stdout=self._log, stderr=subprocess.STDOUT
        )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def served(self, backend: str) -> list[str]:
        """The address of the pod that served each request of `backend`, from the access log, in the
        order the requests ended (the chart's log-format writes %b/%s %si:%sp)."""
        pattern = rf"^\S+ \[[^\]]+\] \S+ {re.escape(backend)}/\S+ (\S+):\d+ "
        return re.findall(pattern, self.log(), re.M)

    def wait_for_log(self, pattern: str, timeout: float, since: int = 0) -> bool:
        """Whether a line matching `pattern` appears within `timeout` s, after the first `since`
        characters of the log."""
        deadline = time.monotonic() + timeout
        while True:
            if re.search(pattern, self.log()[since:], re.M):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def shared_free_port(hosts: tuple[str, ...]) -> int:
    """A port number free on every address of `hosts`, as each pod of a Deployment has the same ports."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port: int = probe.getsockname()[1]
        try:
            for host in hosts:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port number is free on all of {hosts}")
