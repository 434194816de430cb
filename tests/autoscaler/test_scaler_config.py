"""The config contract: defaults shared with the docs and the chart, and every error at once."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml

from autoscaler.config import (
    AutoscalerConfig,
    ConfigError,
    RateLimit,
    ScalerSpec,
    Signal,
    load_config,
    parse_config,
    parse_registration,
    parse_scaler,
    to_dict,
)

ROOT = Path(__file__).resolve().parents[2]


def doc_example() -> dict:
    text = (ROOT / "docs" / "autoscaler-config.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block, "docs/autoscaler-config.md lost its yaml example"
    return yaml.safe_load(block.group(1))


def test_the_documented_example_is_the_defaults_plus_one_signal():
    parsed = parse_config(doc_example())
    assert parsed.scaler.signals == (Signal("ttft_p99", 2000.0),)
    without_signals = dataclasses.replace(parsed.scaler, signals=())
    assert dataclasses.replace(parsed, scaler=without_signals) == AutoscalerConfig()


def test_the_chart_policy_defaults_are_the_code_defaults():
    values = yaml.safe_load((ROOT / "helm" / "nlg-serving" / "values.yaml").read_text())
    assert parse_scaler(values["autoscaler"]["policy"]) == ScalerSpec()


def test_empty_document_gives_defaults():
    assert parse_config(None) == AutoscalerConfig()
    assert parse_config({}) == AutoscalerConfig()


def test_round_trip_through_plain_data():
    config = parse_config(doc_example())
    assert parse_config(yaml.safe_load(yaml.safe_dump(to_dict(config)))) == config


def test_partial_rate_limit_keeps_the_other_defaults():
    spec = parse_scaler({"scale_down": {"period": 30}})
    assert spec.scale_down == RateLimit(max_pods=1, max_percent=100.0, period=30.0, select="min")
    assert parse_scaler({"scale_up": {"max_pods": 2}}).scale_up.select == "max"


def test_listing_6_1_body():
    body = {
        "instance_type": "g4dn.12xlarge",
        "model_id": "gpt2",
        "engine_type": "triton",
        "scaler": {"min_deployment_count": 1, "max_deployment_count": 4, "type": "pertoken",
                   "time_window": 60, "threshold": 25},
    }  # fmt: skip
    registration = parse_registration(body)
    assert registration.model_id == "gpt2"
    assert registration.target_name == "gpt2"
    assert registration.scaler == ScalerSpec()


LONG_M = "'" + "m" * 27 + "..." + "m" * 28 + "'"  # a long value, abbreviated
NINES = "9" * 18 + "..." + "9" * 19
BAD = [
    ({"scaler": {"threshold": -1}}, "scaler.threshold = -1.0: must be greater than 0"),
    ({"scaler": {"threshold": math.nan}}, "scaler.threshold = nan: must be a finite number"),
    ({"scaler": {"threshold": math.inf}}, "scaler.threshold = inf: must be a finite number"),
    ({"scaler": {"threshold": "25ms"}}, "scaler.threshold = '25ms': must be a finite number"),
    ({"scaler": {"threshold": True}}, "scaler.threshold = True: must be a finite number"),
    ({"scaler": {"type": "latency"}}, "scaler.type = 'latency': must be one of request, pertoken"),
    ({"scaler": {"min_deployment_count": 1.5}}, "scaler.min_deployment_count = 1.5: must be an integer"),
    ({"scaler": {"min_deployment_count": -1}}, "scaler.min_deployment_count = -1: must be >= 1"),
    ({"scaler": {"min_deployment_count": 0}},
     "scaler.min_deployment_count = 0: must be >= 1: this autoscaler cannot scale up from zero"),
    ({"scaler": {"min_deployment_count": 3, "max_deployment_count": 2}},
     "scaler.max_deployment_count = 2: must be >= scaler.min_deployment_count (3)"),
    ({"scaler": {"max_deployment_count": 0, "min_deployment_count": 0}},
     "scaler.max_deployment_count = 0: must be >= 1"),
    ({"scaler": {"tolerance": 1}}, "scaler.tolerance = 1.0: must be in [0, 1)"),
    ({"scaler": {"stabilization_window": -5}}, "scaler.stabilization_window = -5.0: must be >= 0"),
    ({"scaler": {"time_window": 0}}, "scaler.time_window = 0.0: must be greater than 0"),
    ({"scaler": {"scale_up": {"period": 0}}}, "scaler.scale_up.period = 0.0: must be greater than 0"),
    ({"scaler": {"scale_up": {"max_pods": -1}}}, "scaler.scale_up.max_pods = -1: must be >= 0"),
    ({"scaler": {"scale_down": 3}}, "scaler.scale_down = 3: must be a mapping"),
    ({"scaler": {"treshold": 25}}, "scaler.treshold: unknown key; did you mean 'threshold'?"),
    ({"scaler": {"signals": {"metric": "kv_usage"}}},
     "scaler.signals = {'metric': 'kv_usage'}: must be a list"),
    ({"scaler": {"signals": [{"metric": "ttft_p95", "target": 1}]}},
     "scaler.signals[0].metric = 'ttft_p95': must be one of"),
    ({"scaler": {"signals": [{"metric": "kv_usage"}]}}, "scaler.signals[0].target: required"),
    ({"scaler": {"signals": [{"metric": "kv_usage", "target": 80}]}},
     "scaler.signals[0].target = 80.0: kv_usage is a ratio"),
    ({"scaler": {"signals": [{"metric": "itl_p99", "target": 9}, {"metric": "itl_p99", "target": 8}]}},
     "scaler.signals[1].metric = 'itl_p99': listed twice"),
    ({"model_id": "gpt 2"}, "model_id = 'gpt 2': must be a Triton model name"),
    ({"source": {"kind": "pull"}}, "source.kind = 'pull': must be one of direct, prometheus"),
    ({"source": {"static_targets": "127.0.0.1:8002"}},
     "source.static_targets = '127.0.0.1:8002': must be a list"),
    ({"source": {"static_targets": ["localhost"]}},
     "source.static_targets[0] = 'localhost': must be host:port"),
    ({"source": {"prometheus_url": "prometheus:9090"}},
     "source.prometheus_url = 'prometheus:9090': must be an"),
    ({"source": {"timeout": 0}}, "source.timeout = 0.0: must be greater than 0"),
    ({"source": {"service": "Triton"}}, "source.service = 'Triton': must be a Kubernetes name"),
    ({"actuator": {"kind": "hpa"}}, "actuator.kind = 'hpa': must be one of kubernetes, triton, none"),
    ({"actuator": {"triton_url": "127.0.0.1:8000"}}, "actuator.triton_url = '127.0.0.1:8000': must be an"),
    ({"loop": {"interval": -1}}, "loop.interval = -1.0: must be greater than 0"),
    ({"leader_election": {"enabled": "yes"}}, "leader_election.enabled = 'yes': must be true or false"),
    ({"api": {"port": 70000}}, "api.port = 70000: must be a TCP port"),
    ({"api": {"host": "0.0.0.0"}},
     "api.host = '0.0.0.0': without api.token_file the API listens on loopback only"),
    ({"api": {"host": "10.0.0.5", "auth": "none"}},
     "api.host = '10.0.0.5': without api.token_file the API listens on loopback only"),
    ({"api": {"auth": "none", "token_file": "/t"}}, "api.auth = 'none': contradicts api.token_file = '/t'"),
    ({"api": {"auth": "off"}}, "api.auth = 'off': must be one of token, none"),
    ({"scaler": {"threshold": 10**400}}, "scaler.threshold = 1000000000"),
    ({"scaler": {"max_deployment_count": 10**400}},
     "scaler.max_deployment_count = 1000000000"),
    ({"scaler": {"max_deployment_count": 1001}}, "scaler.max_deployment_count = 1001: must be at most 1000"),
    ({"scaler": {"threshold": 3_600_001}}, "scaler.threshold = 3600001.0: must be at most 3.6e+06"),
    ({"scaler": {"time_window": 1e300}}, "scaler.time_window = 1e+300: must be at most 86400"),
    ({"scaler": {"scale_down": {"select": "median"}}},
     "scaler.scale_down.select = 'median': must be one of max, min"),
    ({"scaler": {"scale_up": {"max_percent": 1e6}}}, "scaler.scale_up.max_percent = 1000000.0: must be at most"),
    ({"scaler": {"signals": [{"metric": "itl_p99", "target": 1e9}]}},
     "scaler.signals[0].target = 1000000000.0: must be at most"),
    ({"scaler": {"signals": [{"metric": "itl_p99", "target": 1}] * 257}},
     "scaler.signals: 257 items, at most 256 allowed"),
    ({"model_id": "m" * 129}, f"model_id = {LONG_M}: must be a Triton model name"),
    ({"model_id": "m" * 10_000}, f"model_id = {LONG_M}: must be at most 4096"),
    ({"loop": {"interval": 4000}}, "loop.interval = 4000.0: must be at most 3600"),
    ({"source": {"port_name": "a-very-long-port-name"}},
     "source.port_name = 'a-very-long-port-name': must be at most 15"),
    ({"source": {"prometheus_url": "http://[::1"}}, "source.prometheus_url = 'http://[::1': must be an"),
    ({"metrics": {"port": "9100"}}, "metrics.port = '9100': must be an integer"),
    ({"extra": 1}, "extra: unknown key; known keys: model_id, scaler"),
    ({"scaler": []}, "scaler = []: must be a mapping"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m.split(" ")[0].rstrip(":") for _, m in BAD])
def test_each_bad_value_is_named(data, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert any(e.startswith(message) for e in caught.value.errors), caught.value.errors


def test_every_problem_is_reported_at_once():
    data = {
        "scaler": {"threshold": 0, "type": "x", "max_deployment_count": "four", "min_deployment_count": 9},
        "source": {"kind": "pull"},
        "loop": {"interval": 0},
        "typo": {},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    errors = caught.value.errors
    assert len(errors) == 6, errors
    # max_deployment_count had the wrong type: no second message comparing its stand-in to min.
    assert not any("must be >= scaler.min_deployment_count" in e for e in errors)
    assert "scaler.threshold = 0.0" in str(caught.value)


def test_validate_on_a_spec_built_in_code():
    assert ScalerSpec().validate() == []
    assert ScalerSpec(threshold=0).validate("sim") == ["sim.threshold = 0: must be greater than 0"]


def test_registration_errors():
    with pytest.raises(ConfigError) as caught:
        parse_registration({"scaler": {"threshold": -1}, "deployment": "Bad_Name"})
    errors = caught.value.errors
    assert errors[0].startswith("model_id: required")
    assert any(e.startswith("scaler.threshold = -1.0") for e in errors)
    assert any(e.startswith("deployment = 'Bad_Name'") for e in errors)
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_registration([])  # type: ignore[arg-type]


def test_load_config_reads_yaml(tmp_path):
    path = tmp_path / "autoscaler.yaml"
    path.write_text("model_id: gpt2\nscaler:\n  threshold: 30\n")
    assert load_config(path).scaler.threshold == 30.0
    path.write_text("")
    assert load_config(path) == AutoscalerConfig()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read the config file"), ("scaler: [\n", "not valid YAML"),
     ("- 1\n", "top level is list")],  # fmt: skip
    ids=["missing", "malformed", "not-a-mapping"],
)
def test_load_config_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "autoscaler.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.errors[0].startswith(str(path))
    assert message in caught.value.errors[0]


def test_lease_must_outlive_the_loop_interval():
    with pytest.raises(ConfigError) as caught:
        election = {"enabled": True, "lease_duration": 5}
        parse_config({"leader_election": election, "loop": {"interval": 5}, "api": {"port": 0}})
    assert caught.value.errors == [
        "leader_election.lease_duration = 5.0: must be greater than loop.interval (5.0), "
        "or the lease expires between renewals"
    ]


def test_registration_fields_are_bounded():
    body = {"model_id": "gpt2", "instance_type": "x" * 129, "engine_type": "vllm"}
    with pytest.raises(ConfigError) as caught:
        parse_registration(body)
    assert caught.value.errors == [
        "instance_type = 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx': must be at most 128 "
        "printable characters",
        "engine_type = 'vllm': must be one of triton",
    ]


def test_a_large_value_is_never_echoed_whole():
    huge = "x" * 5_000_000
    with pytest.raises(ConfigError) as caught:
        parse_registration({"model_id": huge, "instance_type": huge, huge: 1, "scaler": {"signals": [[[huge]]]}})
    assert len(caught.value.errors) == 6, caught.value.errors
    assert all(len(e) < 300 for e in caught.value.errors), [len(e) for e in caught.value.errors]


def test_at_most_fifty_problems_are_listed():
    with pytest.raises(ConfigError) as caught:
        parse_config({f"key{i}": i for i in range(300)})
    assert len(caught.value.errors) == 51
    assert caught.value.errors[-1] == "... and 250 more problems"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"scaler:\n  threshold: " + b"9" * 400 + b"\n", f"scaler.threshold = {NINES}: must be at most 3.6e+06"),
        (b"scaler:\n  threshold: 1.0e+400\n", "scaler.threshold = inf: must be a finite number"),
        (b"scaler:\n  threshold: .nan\n", "scaler.threshold = nan: must be a finite number"),
        (b"scaler:\n  min_deployment_count: " + b"9" * 5000 + b"\n",
         "scaler.min_deployment_count = <an integer of 5000 digits>: must be at most 1000"),
        (b"model_id: gpt\xff2\n", "not UTF-8 (byte 0xff at offset 13); save it as UTF-8"),
        (b"scaler: " + b"[" * 1500 + b"]" * 1500 + b"\n", "nested too deeply"),
        (b"# " + b"x" * (1 << 20) + b"\n", "larger than 1048576 bytes"),
    ],
    ids=["400-digit-float", "overflowing-float", "nan", "5000-digit-int", "not-utf-8", "deep-nesting", "huge"],
)  # fmt: skip
def test_load_config_refuses_every_odd_file(tmp_path, content, message):
    path = tmp_path / "autoscaler.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert any(message in e for e in caught.value.errors), caught.value.errors


def test_check_reports_odd_files_with_exit_status_2(tmp_path, capsys):
    from autoscaler.cli import main

    path = tmp_path / "autoscaler.yaml"
    path.write_bytes(b"model_id: gpt\xff2\nscaler:\n  threshold: " + b"9" * 400 + b"\n")
    assert main(["--config", str(path), "--check"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    path.write_bytes(b"scaler:\n  threshold: " + b"9" * 400 + b"\n")
    assert main(["--config", str(path), "--check"]) == 2
    assert f"scaler.threshold = {NINES}: must be at most 3.6e+06" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content",
    [b"model_id: gpt\xff2\n", b"scaler:\n  threshold: " + b"9" * 400 + b"\n", b"scaler: " + b"[" * 1500 + b"\n",
     b"api:\n  host: 0.0.0.0\n"],
    ids=["not-utf-8", "400-digits", "deep-nesting", "open-api-without-token"],
)  # fmt: skip
def test_a_bad_reload_is_refused_and_the_running_config_kept(tmp_path, content):
    from autoscaler.reload import ConfigWatcher

    path = tmp_path / "autoscaler.yaml"
    path.write_text("scaler:\n  threshold: 30\n")
    watcher = ConfigWatcher(path)
    running = watcher.load()
    path.write_bytes(content)
    assert watcher.poll() is None
    assert watcher.current == running
    assert watcher.last_error
    path.write_text("scaler:\n  threshold: 40\n")  # fixed: applied
    fixed = watcher.poll()
    assert fixed is not None and fixed.scaler.threshold == 40.0
    assert watcher.last_error is None
