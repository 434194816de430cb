"""A tritonserver started the way a user starts it by hand: the binary nlg-triton runs, with its
defaults (no drain settings, no exit timeout, no variables for the model), on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import tritonclient.grpc as grpcclient

from triton_backend.launch import DEFAULT_MODEL_REPOSITORY, answers, free_port, server_command, server_environment


class PlainTritonServer:
    """tritonserver with `args` (e.g. ["--allow-http=false"]) and `env` for the model; HTTP on a free
    port unless `args` turn it off. Ready on start(), always killed (with its stubs) on stop()."""

    def __init__(self, log_path: Path, env: dict[str, str], args: Sequence[str] = (), http: bool = True) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.env = {k: v for k, v in server_environment().items() if not k.startswith("NLG_")}
        self.env.update(env)
        ports = ["--http-address=127.0.0.1", f"--http-port={self.http_port}"] if http else ["--allow-http=false"]
        self.args = [
            *ports,
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={self.metrics_port}",
            *args,
        ]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout: float = 240.0) -> PlainTritonServer:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                server_command(DEFAULT_MODEL_REPOSITORY, self.args),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            # Triton starts its metrics service after gRPC: a model ready over gRPC does not yet mean
            # a scrape is answered.
            with contextlib.suppress(Exception), grpcclient.InferenceServerClient(self.grpc_url) as client:
                if client.is_model_ready("gpt2") and answers(self.metrics_url):
                    return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"tritonserver not ready in {timeout:.0f}s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
