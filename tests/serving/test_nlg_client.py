"""``nlg-client generate``: one line and an exit status when the server cannot be reached or the user
presses Ctrl-C (no traceback), and several choices each on a line of their own.

Reported: a Python traceback on a wrong port and on Ctrl-C; ``--n 3`` interleaved the choices'
tokens on one line.
"""

from __future__ import annotations

import io
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from triton_backend.cli.client import ChoicePrinter, Delta
from triton_backend.launch import free_port

CLIENT = [sys.executable, "-m", "triton_backend.cli.client", "generate"]


def run_client(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLIENT, *args], capture_output=True, text=True, timeout=timeout)


def assert_one_line(stderr: str, pattern: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert re.fullmatch(pattern, stderr.strip()), stderr


def test_several_choices_are_each_printed_on_a_line_of_their_own_as_they_finish():
    out = io.StringIO()
    printer = ChoicePrinter(3, out)
    printer.add(Delta(["Hel", "Bon", "Ha"], ["", "", ""]))
    printer.add(Delta(["lo", "jour", ""], ["", "stop", ""]))
    assert out.getvalue() == "[1] Bonjour\n"  # the finished one, whole; the others wait
    printer.add(Delta([" world", "", "llo"], ["length", "", ""]))
    printer.finish()  # the stream ended before choice 2 said why: written at the end
    assert out.getvalue() == "[1] Bonjour\n[0] Hello world\n[2] Hallo\n"


def test_one_choice_streams_as_it_comes():
    out = io.StringIO()
    printer = ChoicePrinter(1, out)
    printer.add(Delta(["Hel"], [""]))
    assert (out.getvalue(), printer.partial) == ("Hel", True)
    printer.add(Delta(["lo"], ["stop"]))
    printer.finish()
    assert (out.getvalue(), printer.partial) == ("Hello\n", False)


def test_a_port_nobody_listens_on_is_one_line_and_status_1():
    port = free_port()
    done = run_client("hi", "--url", f"127.0.0.1:{port}")
    assert (done.returncode, done.stdout) == (1, "")
    assert_one_line(done.stderr, rf"nlg-client: cannot reach Triton at 127\.0\.0\.1:{port}: .*Connection refused.*")


@pytest.fixture
def silent_port():
    """A port that accepts connections and never says anything (a wrong service, a hung server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.mark.e2e
def test_a_server_that_never_answers_is_one_line_after_the_timeout(silent_port):
    done = run_client("hi", "--url", f"127.0.0.1:{silent_port}", "--timeout", "1")
    assert (done.returncode, done.stdout) == (1, "")
    assert_one_line(done.stderr, rf"nlg-client: cannot reach Triton at 127\.0\.0\.1:{silent_port}: Deadline Exceeded")


def as_in_a_terminal() -> None:
    """The client's SIGINT at its default, as a user's Ctrl-C finds it: a shell starts a background job
    (a CI step run with `&`, say) with SIGINT ignored, its children inherit that, and Python then
    installs no KeyboardInterrupt handler, so the test would see a client that cannot be interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(process: subprocess.Popen[str], after: float) -> tuple[str, str]:
    time.sleep(after)
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=30)


@pytest.mark.e2e
def test_ctrl_c_is_one_line_and_status_130(silent_port):
    process = subprocess.Popen([*CLIENT, "hi", "--url", f"127.0.0.1:{silent_port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal)  # fmt: skip
    out, err = interrupt(process, after=3.0)  # the interpreter and tritonclient loaded, waiting on the server
    assert (process.returncode, out) == (130, "")
    assert_one_line(err, r"nlg-client: interrupted; a request under way was cancelled")


@pytest.mark.integration
def test_against_the_server_choices_are_lines_and_ctrl_c_cancels_the_stream(triton_tiny):
    done = run_client("Once upon a time", "--url", triton_tiny.grpc_url, "--n", "3", "--max-tokens", "8",
                      "--seed", "1", timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line[:4] for line in lines) == ["[0] ", "[1] ", "[2] "], done.stdout
    process = subprocess.Popen([*CLIENT, "Once upon a time", "--url", triton_tiny.grpc_url, "--max-tokens", "1000",
                                "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=as_in_a_terminal)  # fmt: skip
    # Interrupted once its first text arrives: the stream is under way, however fast this machine
    # generates (a quiet one streams the tiny model's 1000 tokens in a few seconds).
    assert process.stdout is not None and process.stdout.read(1)
    first = time.monotonic()
    out, err = interrupt(process, after=0.2)
    # What ended it, should the interrupt come too late: how long after its first text, with what.
    seen = f"status {process.returncode} {time.monotonic() - first:.2f} s after the first text, {len(out)} chars: {err}"
    assert process.returncode == 130, seen
    assert_one_line(err, r"nlg-client: interrupted; a request under way was cancelled")
