"""The assembled service: config reload, real API and metrics ports, the CLI and its signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from autoscaler_testkit import PodMetrics, free_port, wait_http

from autoscaler.app import App
from autoscaler.cli import main
from autoscaler.reload import ConfigWatcher


def write(path, data):
    path.write_text(yaml.safe_dump(data))


def base_config(pod, api_port=0, metrics_port=0, token_file=""):
    return {
        "model_id": "gpt2",
        "scaler": {"time_window": 5, "threshold": 25, "stabilization_window": 5, "max_deployment_count": 2},
        "source": {"kind": "direct", "static_targets": [pod.target], "timeout": 1.0},
        "actuator": {"kind": "none"},
        "loop": {"interval": 0.2},
        "api": {"host": "127.0.0.1", "port": api_port, "token_file": token_file},
        "metrics": {"port": metrics_port},
    }


@pytest.fixture
def pod():
    metrics = PodMetrics()
    yield metrics
    metrics.stop()


def test_watcher_applies_changes_and_keeps_the_running_config_on_errors(tmp_path, pod):
    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod))
    watcher = ConfigWatcher(path)
    assert watcher.load().scaler.threshold == 25
    assert watcher.poll() is None  # unchanged
    write(path, {**base_config(pod), "scaler": {"threshold": 30}})
    assert watcher.poll().scaler.threshold == 30
    path.write_text("scaler: {threshold: -3}\n")
    assert watcher.poll() is None
    assert "scaler.threshold = -3.0: must be greater than 0" in watcher.last_error
    assert watcher.current.scaler.threshold == 30
    path.unlink()
    assert watcher.poll() is None
    assert "cannot read" in watcher.last_error
    write(path, {**base_config(pod), "scaler": {"threshold": 30}})
    assert watcher.poll() is None  # back to the running content: nothing to apply
    assert watcher.last_error is None


@pytest.mark.integration
def test_service_serves_api_and_metrics_and_reloads_its_config(tmp_path, pod):
    token = tmp_path / "token"
    token.write_text("abc\n")
    api_port, metrics_port = free_port(), free_port()
    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod, api_port, metrics_port, str(token)))
    watcher = ConfigWatcher(path)
    with App(watcher.load(), watcher=watcher) as app:
        api = f"http://127.0.0.1:{api_port}"
        auth = {"Authorization": "Bearer abc"}
        pod.running.set(1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and app.controller.targets.view("gpt2")["replicas"]["current"] != 2:
            pod.serve(0.050, n=5)  # per-token latency twice the target: 1 -> 2
            time.sleep(0.2)
        view = httpx.get(f"{api}/deployment/gpt2/", headers=auth).json()
        assert view["replicas"]["current"] == 2, view["decisions"][:3]
        assert httpx.get(f"{api}/deployment/gpt2/").status_code == 401
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert 'nlg_autoscaler_current_replicas{model="gpt2"} 2.0' in metrics
        assert "nlg_autoscaler_loop_duration_seconds_count" in metrics
        assert 'nlg_autoscaler_signal_target{model="gpt2",signal="pertoken_mean"} 25.0' in metrics
        reloaded = base_config(pod, api_port, metrics_port, str(token))
        reloaded["scaler"]["threshold"] = 100
        write(path, reloaded)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and app.controller.targets.view("gpt2")["scaler"]["threshold"] != 100:
            time.sleep(0.1)
        view = httpx.get(f"{api}/deployment/gpt2/", headers=auth).json()
        assert view["targets"] == {"pertoken_mean": 100.0}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{api}/healthz")


def test_cli_check(tmp_path, pod, capsys):
    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod))
    assert main(["--config", str(path), "--check"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("metrics.backend: auto, found nlg on ")
    assert out[-1] == f"{path}: ok"
    write(path, {"scaler": {"threshold": 0, "max_deployment_count": 0}, "loop": {"interval": "5s"}})
    assert main(["--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "scaler.threshold = 0.0: must be greater than 0" in err
    assert "scaler.max_deployment_count = 0: must be >= 1" in err
    assert "loop.interval = '5s': must be a finite number" in err


@pytest.mark.integration
def test_cli_once_prints_the_decisions(tmp_path, pod, capsys):
    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod))
    assert main(["--config", str(path), "--once"]) == 0
    views = json.loads(capsys.readouterr().out)
    assert views[0]["model_id"] == "gpt2"
    assert views[0]["decisions"][0]["reason"].startswith("no data")


@pytest.mark.integration
def test_cli_runs_until_sigterm(tmp_path, pod):
    api_port = free_port()
    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod, api_port=api_port))
    process = subprocess.Popen(
        [sys.executable, "-m", "autoscaler.cli", "--config", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{api_port}/healthz", 30, process)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()[-2000:]
    assert b"stopping" in err


def test_a_reload_onto_a_target_the_api_scales_is_refused_and_the_running_config_stays(tmp_path, pod):
    from autoscaler.config import Registration, ScalerSpec

    path = tmp_path / "autoscaler.yaml"
    write(path, base_config(pod))
    watcher = ConfigWatcher(path)
    app = App(watcher.load(), watcher=watcher)
    try:
        bert = Registration(model_id="bert", scaler=ScalerSpec(type="request", threshold=2000))
        app.controller.targets.register(bert)
        write(path, {**base_config(pod), "model_id": "bert"})
        app._before_round()
        assert "already scaled for model 'bert' (api)" in (watcher.last_error or "")
        assert app.config.model_id == "gpt2" and watcher.current is not None and watcher.current.model_id == "gpt2"
        assert {v["model_id"]: v["origin"] for v in app.controller.targets.views()} == {"gpt2": "config", "bert": "api"}
        write(path, {**base_config(pod), "scaler": {**base_config(pod)["scaler"], "threshold": 40}})
        app._before_round()  # a reload that takes no API target's place goes through
        assert watcher.last_error is None and app.config.scaler.threshold == 40
    finally:
        app.stop()
