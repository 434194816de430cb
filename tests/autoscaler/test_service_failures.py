"""Triton and the service's own ports failing: a Triton of the test's own that never answers or dies
mid-reload, a busy port; and the docs' failure and metric tables tied to the code."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from autoscaler_testkit import FakeTriton, PodMetrics, SilentServer, free_port
from prometheus_client import CollectorRegistry

from autoscaler.actuate import ActuationError, Deferred
from autoscaler.actuate.triton import TritonInstanceScaler
from autoscaler.app import App, StartupError
from autoscaler.config import parse_config
from autoscaler.telemetry import Telemetry

pytestmark = pytest.mark.integration

DOCS = Path(__file__).parents[2] / "docs" / "autoscaler.md"


def docs_section(title: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def counter_for(failure: str) -> str:
    """The counter docs/autoscaler.md's failure table names for the row starting with ``failure``."""
    for row in docs_section("### Failures").splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if row.startswith("|") and cells[0].startswith(failure):
            return cells[1].strip("`")
    raise AssertionError(f"no row for {failure!r} in the docs' failure table")


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def pod():
    metrics = PodMetrics()
    yield metrics
    metrics.stop()


def triton_config(pod, triton_url, interval=0.4, **extra):
    return parse_config({
        "model_id": "gpt2",
        "scaler": {"time_window": 5, "threshold": 25, "max_deployment_count": 3},
        "source": {"kind": "direct", "static_targets": [pod.target], "timeout": 1.0},
        "actuator": {"kind": "triton", "triton_url": triton_url, "triton_metrics_url": f"{triton_url}/metrics"},
        "loop": {"interval": interval}, "api": {"port": 0}, "metrics": {"port": 0}, **extra,
    })  # fmt: skip


@pytest.mark.e2e
def test_a_triton_that_never_answers_does_not_stop_the_loop(pod):
    with SilentServer() as triton:
        app = App(triton_config(pod, triton.url))
        rounds = "nlg_autoscaler_loop_duration_seconds_count"
        with app:
            deadline = time.monotonic() + 20
            while value(app.registry, rounds) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            view = app.controller.targets.view("gpt2")
        count, total = value(app.registry, rounds), value(app.registry, "nlg_autoscaler_loop_duration_seconds_sum")
    assert count >= 4, "the loop stopped going round"
    assert total / count < 1.0  # each round bounded by half the 0.4 s interval, not a 300 s load
    assert view["last_error"] == f"cannot reach Triton at {triton.url}: no answer in time (ReadTimeout)"
    # The docs say which counter a Triton outage lands in; it is that one.
    assert counter_for("the scale target") == "nlg_autoscaler_actuation_errors_total"
    assert value(app.registry, "nlg_autoscaler_actuation_errors_total", model="gpt2") >= 4
    assert value(app.registry, "nlg_autoscaler_scrape_errors_total", model="gpt2", source="direct") == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scaler_for(fake: FakeTriton, load_wait: float = 0.1, clock=time.monotonic, timeout: float = 1.0):
    return TritonInstanceScaler(fake.url, fake.metrics_url, timeout=timeout, load_wait=load_wait, confirm_idle=0.0,
                                load_timeout=300.0, clock=clock)  # fmt: skip


def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_reload_is_started_then_polled_not_awaited():
    with FakeTriton() as fake:
        scaler = scaler_for(fake)
        try:
            assert scaler.observe("gpt2").replicas == 1
            fake.load_gate.clear()  # the load takes its time
            with pytest.raises(Deferred, match=r"Triton is loading model 'gpt2' with 2 instances"):
                scaler.scale("gpt2", 2, expected=1)
            with pytest.raises(Deferred, match=r"still loading model 'gpt2' with 2 instances"):
                scaler.scale("gpt2", 2, expected=1)
            assert scaler.observe("gpt2").replicas == 1
            fake.load_gate.set()
            until(lambda: fake.count == 2)
            observed = scaler.observe("gpt2")
            assert (observed.replicas, observed.external) == (2, False)  # its own reload, not a person's
            assert fake.loads == 1
        finally:
            scaler.close()


def test_a_reload_is_in_progress_while_triton_is_too_busy_to_answer_until_its_deadline():
    """Reported: "the reload ... is abandoned" logged while Triton was still loading (and then loaded)."""
    clock = FakeClock()
    with FakeTriton() as fake:
        scaler = scaler_for(fake, clock=clock, timeout=0.3)
        try:
            fake.load_gate.clear()
            with pytest.raises(Deferred):
                scaler.scale("gpt2", 2, expected=1)  # t0: the load starts, its deadline t0 + 300 s
            fake.busy.set()  # config reads go unanswered while it loads
            for elapsed, left in ((10, 290), (299, 1)):
                clock.now = 1000.0 + elapsed
                with pytest.raises(ActuationError) as error:
                    scaler.observe("gpt2")
                assert str(error.value) == (
                    f"cannot reach Triton at {fake.url}: no answer in time (ReadTimeout); the reload of model "
                    f"'gpt2' to 2 instances is in progress (Triton answers it once the instances are loaded; "
                    f"abandoned if not done in {left} s)"
                )
            with pytest.raises(Deferred, match=r"still loading model 'gpt2' with 2 instances"):
                scaler.scale("gpt2", 2, expected=1)  # not a second load
            fake.busy.clear()
            fake.load_gate.set()  # loaded within its deadline
            until(lambda: fake.count == 2)
            observed = scaler.observe("gpt2")
            assert (observed.replicas, observed.external, fake.loads) == (2, False, 1)
        finally:
            scaler.close()


def test_a_reload_past_its_deadline_is_abandoned_and_triton_is_read_afresh():
    clock = FakeClock()
    with FakeTriton() as fake:
        scaler = scaler_for(fake, clock=clock, timeout=0.3)
        try:
            fake.load_gate.clear()
            with pytest.raises(Deferred):
                scaler.scale("gpt2", 2, expected=1)
            fake.busy.set()  # no answer to anything, the load included
            clock.now += 299.9
            with pytest.raises(ActuationError, match=r"is in progress"):
                scaler.observe("gpt2")
            clock.now += 0.1
            with pytest.raises(ActuationError) as error:
                scaler.observe("gpt2")
            assert str(error.value) == (
                "the reload of model 'gpt2' to 2 instances is abandoned: not done within load_timeout (300 s); "
                "what Triton has loaded shows when it answers"
            )
            fake.busy.clear()  # answering again, with the instance it had
            observed = scaler.observe("gpt2")
            assert (observed.replicas, observed.external) == (1, False)
            fake.load_gate.set()
            until(lambda: _scaled(scaler, 2, expected=1))
            assert fake.count == 2
        finally:
            scaler.close()


def _scaled(scaler: TritonInstanceScaler, replicas: int, expected: int) -> bool:
    try:
        return scaler.scale("gpt2", replicas, expected) == replicas
    except Deferred:
        return False


def test_a_refused_reload_is_an_actuation_error():
    with FakeTriton() as fake:
        fake.refuse = True
        scaler = scaler_for(fake, load_wait=5.0)
        try:
            with pytest.raises(ActuationError, match=r"Triton refused to reload 'gpt2' with 2 instances: HTTP 400 "
                               r"failed to load 'gpt2'"):  # fmt: skip
                scaler.scale("gpt2", 2, expected=1)
            assert scaler.observe("gpt2").replicas == 1  # reported once, then reads go on
        finally:
            scaler.close()


@pytest.fixture
def busy_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def static_config(pod, **ports):
    return parse_config({
        "source": {"kind": "direct", "static_targets": [pod.target]},
        "actuator": {"kind": "none"},
        "api": {"host": "127.0.0.1", "port": ports.get("api", 0)},
        "metrics": {"port": ports.get("metrics", 0)},
    })  # fmt: skip


def test_a_busy_api_port_stops_the_start_and_leaves_nothing_running(pod, busy_port):
    metrics_port = free_port()
    app = App(static_config(pod, api=busy_port, metrics=metrics_port))
    with pytest.raises(StartupError) as error:
        app.start()
    assert str(error.value) == (
        f"api.port = {busy_port} (the management API): cannot listen on 127.0.0.1:{busy_port}: "
        "Address already in use; stop what uses it or choose another port"
    )
    assert app._threads == []
    with socket.create_server(("127.0.0.1", metrics_port)):
        pass  # the metrics port was never taken


def test_a_busy_metrics_port_ends_the_cli_with_one_line(pod, busy_port, tmp_path):
    api_port = free_port()
    path = tmp_path / "autoscaler.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"kind": "direct", "static_targets": [pod.target]}, "actuator": {"kind": "none"},
        "api": {"host": "127.0.0.1", "port": api_port}, "metrics": {"port": busy_port},
    }))  # fmt: skip
    process = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "--config", str(path)], capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 1
    assert "Traceback" not in process.stderr
    assert process.stderr.splitlines()[-1:] == [
        f"nlg-autoscaler: metrics.port = {busy_port} (the autoscaler's /metrics): cannot listen on "
        f"127.0.0.1:{busy_port}: Address already in use; stop what uses it or choose another port"
    ]
    with socket.create_server(("127.0.0.1", api_port)):
        pass  # the API port was let go


def test_the_docs_list_every_metric_the_autoscaler_exports():
    registry = CollectorRegistry()
    Telemetry(registry)
    exported = {m.name + ("_total" if m.type == "counter" else "") for m in registry.collect()}
    in_docs = set(re.findall(r"^\| `(nlg_autoscaler_\w+)` \|", docs_section("## The autoscaler's own metrics"), re.M))
    import autoscaler.telemetry

    in_docstring = set(re.findall(r"^(nlg_autoscaler_\w+) ", autoscaler.telemetry.__doc__ or "", re.M))
    assert in_docs == exported
    assert in_docstring == exported
    failures = {counter_for(row) for row in ("the metric source", "the scale target", "the Lease", "a round")}
    assert failures <= exported


def test_the_docs_give_the_reload_deadline_the_code_has():
    import inspect

    default = inspect.signature(TritonInstanceScaler).parameters["load_timeout"].default
    assert f"unanswered for {default:g} s from its start" in " ".join(docs_section("### Failures").split())
