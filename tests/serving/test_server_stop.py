"""What the model reads from its tritonserver's arguments, and how long a stop leaves its streams:
whatever started the server, the streams are cut early enough for Triton's exit timeout."""

from __future__ import annotations

import subprocess
import sys

import pytest

from triton_backend.server_stop import (
    DEFAULT_EXIT_TIMEOUT_SECONDS,
    DEFAULT_SHM_REGION_PREFIX,
    NOTICE_SECONDS,
    ServerArgs,
    StopBudget,
    parse_server_args,
    read_server_args,
)
from triton_backend.settings import EXIT_MARGIN_SECONDS, DrainBudget


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["tritonserver", "--model-repository", "m"], ServerArgs(30, "http://127.0.0.1:8000")),
        (["tritonserver", "--exit-timeout-secs=252", "--http-port=9000"], ServerArgs(252, "http://127.0.0.1:9000")),
        (["tritonserver", "--exit-timeout-secs", "5", "--http-port", "9001"], ServerArgs(5, "http://127.0.0.1:9001")),
        (["tritonserver", "--http-port=9000", "--http-port=9002"], ServerArgs(30, "http://127.0.0.1:9002")),
        (["tritonserver", "--allow-http=false", "--http-port=9000"], ServerArgs(30, None)),
        (["tritonserver", "--allow-http", "OFF"], ServerArgs(30, None)),
        (["tritonserver", "--allow-http=1", "--http-address=10.1.2.3"], ServerArgs(30, "http://10.1.2.3:8000")),
        (["tritonserver", "--http-address", "::"], ServerArgs(30, "http://[::1]:8000")),
        (["tritonserver", "--http-address=fd00::5", "--http-port=1"], ServerArgs(30, "http://[fd00::5]:1")),
        (["tritonserver", "--exit-timeout-secs=x", "--http-port=-1"], ServerArgs(30, "http://127.0.0.1:8000")),
        (["tritonserver", "--exit-timeout-secs"], ServerArgs(30, "http://127.0.0.1:8000")),
        (
            ["tritonserver", "--backend-config=python,shm-region-prefix-name=pfx_", "--backend-config", "onnx,x=1"],
            ServerArgs(30, "http://127.0.0.1:8000", "pfx_"),
        ),
    ],
    ids=[
        "defaults",
        "joined",
        "split",
        "last-wins",
        "http-off",
        "http-off-split",
        "address",
        "any-ipv6",
        "ipv6",
        "refused-values-keep-defaults",
        "value-missing",
        "region-prefix",
    ],
)
def test_the_servers_arguments_give_its_exit_timeout_and_http_endpoint(argv, want):
    assert parse_server_args(argv) == want


def test_the_arguments_are_read_from_the_running_process(tmp_path):
    code = "import time; print('up', flush=True); time.sleep(30)"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "--exit-timeout-secs=7", "--allow-http", "false"], stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        assert read_server_args(child.pid) == ServerArgs(7, None)
    finally:
        child.kill()
        child.wait()
    # A process that is gone (or a /proc without it) reads as tritonserver's defaults.
    assert read_server_args(child.pid, proc=tmp_path) == ServerArgs()
    assert ServerArgs().shm_region_prefix == DEFAULT_SHM_REGION_PREFIX


@pytest.mark.parametrize(
    ("drain", "exit_timeout", "seconds"),
    [
        (122, 30, 30 - EXIT_MARGIN_SECONDS - NOTICE_SECONDS),  # plain tritonserver: the exit timeout bounds it
        (DrainBudget().drain_seconds, DrainBudget().exit_timeout_seconds, DrainBudget().drain_seconds),  # nlg-triton
        (3, DrainBudget(1).exit_timeout_seconds, 3),  # the test kit's short budget
        (122, 10, 10 - 5 - NOTICE_SECONDS),  # a short timeout keeps half for the stop
        (122, 1, 0.0),
        (122, 0, 0.0),
        (0, 300, 0.0),
    ],
    ids=["plain-default", "launcher", "short-budget", "short-timeout", "one-second", "zero", "no-drain"],
)
def test_a_stop_cuts_the_streams_inside_the_exit_timeout(drain, exit_timeout, seconds):
    budget = StopBudget(drain, exit_timeout)
    assert budget.seconds == pytest.approx(seconds)
    assert budget.drain_end(100.0) == pytest.approx(100.0 + seconds)
    if exit_timeout:
        # After the cut: the notice's delay and the margin for final responses, threads and the stub.
        assert budget.seconds + NOTICE_SECONDS + budget.margin_seconds <= max(exit_timeout, NOTICE_SECONDS + 0.5)


def test_the_readme_gives_a_plain_servers_stop_budget_and_the_sweeps_rule():
    from triton_backend.launch import PROJECT_ROOT
    from triton_backend.shm_sweep import MIN_AGE_SECONDS, SWEEP_VARIABLE

    readme = " ".join((PROJECT_ROOT / "README.md").read_text(encoding="utf-8").split())
    default = StopBudget(DrainBudget().drain_seconds, DEFAULT_EXIT_TIMEOUT_SECONDS)
    assert f"{default.seconds:g} s at the default {DEFAULT_EXIT_TIMEOUT_SECONDS}" in readme
    assert f"the exit timeout less {NOTICE_SECONDS:g} s to notice the stop" in readme
    assert f"a margin of {EXIT_MARGIN_SECONDS} s (half of a timeout under {2 * EXIT_MARGIN_SECONDS} s)" in readme
    assert f"over {MIN_AGE_SECONDS:g} s old" in readme
    assert f"`{SWEEP_VARIABLE}=off`" in readme
