"""The autoscaler's config and Deployment: the config is the chart's values (one source of defaults),
and a `helm upgrade --set autoscaler.policy.*` reaches the running process through the mounted
ConfigMap without restarting it. Its Role: test_helm_rbac.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_testkit import CHART, NAMESPACE, RELEASE, HelmError, container, pod_spec

from autoscaler.config import (
    SIGNAL_METRICS,
    AutoscalerConfig,
    ConfigError,
    ScalerSpec,
    load_config,
    parse_config,
    parse_scaler,
    to_dict,
)
from autoscaler.reload import ConfigWatcher

TRITON = f"{RELEASE}-nlg-serving-triton"
CONFIG_DIR = "/etc/nlg-autoscaler"


def rendered_config(rendered) -> dict[str, Any]:
    data = yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml"))
    assert isinstance(data, dict)
    return data


def set_args(*assignments: str) -> list[str]:
    return [arg for a in assignments for arg in ("--set", a)]


# --- one source of defaults ------------------------------------------------------------------------


def test_default_values_are_a_valid_autoscaler_config(render):
    config = parse_config(rendered_config(render()))
    assert isinstance(config, AutoscalerConfig)


def test_chart_policy_defaults_are_the_autoscalers_defaults(render, chart_values):
    """values.yaml's autoscaler.policy, the rendered `scaler` and ScalerSpec() are one policy."""
    config = parse_config(rendered_config(render()))
    code_defaults = to_dict(ScalerSpec())
    assert to_dict(config.scaler) == code_defaults
    # The chart sets planner.profile itself, from autoscaler.plannerProfile (test_helm_planner.py).
    del code_defaults["planner"]["profile"]
    assert chart_values["autoscaler"]["policy"] == code_defaults


def test_values_policy_keys_are_the_scaler_fields(chart_values):
    fields = {f.name for f in dataclasses.fields(ScalerSpec)}
    assert set(chart_values["autoscaler"]["policy"]) == fields
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    policy_schema = schema["properties"]["autoscaler"]["properties"]["policy"]
    assert set(policy_schema["properties"]) == fields
    assert policy_schema["additionalProperties"] is False
    assert policy_schema["properties"]["signals"]["items"]["properties"]["metric"]["enum"] == list(
        SIGNAL_METRICS
    )


def test_config_points_at_the_releases_objects(render):
    rendered = render()
    config = parse_config(rendered_config(rendered))
    # The clients' Service selects the balancer: the pods are found through the headless one.
    service = rendered.one("Service", "-triton-pods")
    assert config.model_id == "gpt2"
    assert config.source.service == service["metadata"]["name"] == f"{TRITON}-pods"
    assert config.source.port_name in {p["name"] for p in service["spec"]["ports"]}
    assert config.actuator.deployment == rendered.one("Deployment", "-triton")["metadata"]["name"]
    assert config.actuator.triton_url == f"http://{TRITON}-pods.{NAMESPACE}.svc:8000"
    assert (
        config.source.namespace == config.actuator.namespace == config.leader_election.namespace == NAMESPACE
    )
    assert config.leader_election.enabled
    lease_rules = [
        r for r in rendered.one("Role")["rules"] if r.get("resourceNames") and "leases" in r["resources"]
    ]
    assert lease_rules[0]["resourceNames"] == [config.leader_election.lease_name]
    autoscaler = container(pod_spec(rendered.one("Deployment", "-autoscaler")), "autoscaler")
    ports = {p["name"]: p["containerPort"] for p in autoscaler["ports"]}
    assert ports == {"api": config.api.port, "metrics": config.metrics.port}
    assert (config.api.host, config.api.auth) == ("0.0.0.0", "token")
    assert config.api.token_file == "/var/run/secrets/nlg-autoscaler/token"  # the chart's own Secret


def test_api_token_secret_becomes_the_token_file(render):
    rendered = render(*set_args("autoscaler.api.tokenSecret.name=autoscaler-token"))
    config = parse_config(rendered_config(rendered))
    spec = pod_spec(rendered.one("Deployment", "-autoscaler"))
    mount = next(m for m in container(spec, "autoscaler")["volumeMounts"] if m["name"] == "api-token")
    volume = next(v for v in spec["volumes"] if v["name"] == "api-token")
    assert config.api.token_file == os.path.join(mount["mountPath"], volume["secret"]["items"][0]["path"])
    assert volume["secret"]["secretName"] == "autoscaler-token"


# --- helm upgrade --set autoscaler.policy.* reaches the running autoscaler -------------------------


class KubeletConfigMapVolume:
    """A ConfigMap volume as the kubelet writes it: `config.yaml -> ..data/config.yaml`, where `..data`
    points at a timestamped directory that an update replaces with one atomic rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0

    def write(self, data: dict[str, str]) -> None:
        self.generation += 1
        version = self.root / f"..2026_01_01_00_00_{self.generation:02d}"
        version.mkdir()
        for key, text in data.items():
            (version / key).write_text(text, encoding="utf-8")
            link = self.root / key
            if not link.is_symlink():
                link.symlink_to(Path("..data") / key)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(version.name)
        os.replace(tmp_link, self.root / "..data")

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"


def test_helm_upgrade_set_threshold_reaches_the_running_autoscaler(render, tmp_path):
    """install -> kubelet writes the file -> the autoscaler loads it; upgrade --set threshold=20 ->
    the kubelet swaps the file -> the autoscaler's watcher picks up the new policy, nothing else."""
    before = render()
    after = render(*set_args("autoscaler.policy.threshold=20"))
    volume = KubeletConfigMapVolume(tmp_path)

    volume.write(before.one("ConfigMap", "-autoscaler")["data"])
    watcher = ConfigWatcher(volume.config_path)  # what `nlg-autoscaler --config` runs
    running = watcher.load()
    assert running.scaler.threshold == 25.0
    assert watcher.poll() is None  # unchanged file: nothing to apply

    volume.write(after.one("ConfigMap", "-autoscaler")["data"])  # the kubelet's refresh after the upgrade
    reloaded = watcher.poll()
    assert reloaded is not None and reloaded.scaler.threshold == 20.0
    only_threshold_changed = dataclasses.replace(running.scaler, threshold=20.0)
    assert reloaded == dataclasses.replace(running, scaler=only_threshold_changed)
    assert load_config(volume.config_path) == reloaded


def test_policy_change_does_not_restart_the_autoscaler(render):
    """The live path is the file reload: the pod template must not change, or the Deployment would roll."""
    before = render().one("Deployment", "-autoscaler")
    after = render(
        *set_args(
            "autoscaler.policy.threshold=20",
            "autoscaler.policy.max_deployment_count=8",
            "autoscaler.policy.tolerance=0.2",
        )
    )
    assert after.one("Deployment", "-autoscaler") == before
    assert after.one("ConfigMap", "-autoscaler") != render().one("ConfigMap", "-autoscaler")


def restart_checksum(rendered) -> str:
    value: str = rendered.one("Deployment", "-autoscaler")["spec"]["template"]["metadata"]["annotations"][
        "checksum/restart-config"
    ]
    return value


@pytest.mark.parametrize(
    "assignment",
    [
        "autoscaler.source.kind=prometheus",
        "autoscaler.loop.interval=10",
        "autoscaler.actuator.kind=none",
        "autoscaler.leader_election.lease_duration=30",
        "model.name=gpt2-xl",
    ],
)
def test_sections_the_autoscaler_reloads_do_not_restart_it(render, assignment):
    """autoscaler.app applies source, actuator, loop, leader_election and model_id changes live."""
    changed = render(*set_args(assignment))
    assert changed.one("ConfigMap", "-autoscaler") != render().one("ConfigMap", "-autoscaler")
    assert restart_checksum(changed) == restart_checksum(render())


@pytest.mark.parametrize(
    "assignment",
    ["autoscaler.api.port=8081", "autoscaler.metrics.port=9101", "autoscaler.api.tokenSecret.name=token",
     "autoscaler.api.tokenSecret.key=other"],
)  # fmt: skip
def test_api_and_metrics_changes_restart_the_autoscaler(render, assignment):
    """Their ports are bound and the token read at start: autoscaler.app applies them after a restart."""
    assert restart_checksum(render(*set_args(assignment))) != restart_checksum(render())


SET_CASES = [
    (["autoscaler.policy.threshold=30"], "threshold", 30.0),
    (["autoscaler.policy.threshold=22.5"], "threshold", 22.5),
    (["autoscaler.policy.type=request", "autoscaler.policy.threshold=2000"], "type", "request"),
    (
        ["autoscaler.policy.min_deployment_count=2", "autoscaler.policy.max_deployment_count=8"],
        "max_deployment_count",
        8,
    ),
    (["autoscaler.policy.time_window=30"], "time_window", 30.0),
    (["autoscaler.policy.tolerance=0.2"], "tolerance", 0.2),
    (["autoscaler.policy.tolerance=0"], "tolerance", 0.0),
    (["autoscaler.policy.stabilization_window=120"], "stabilization_window", 120.0),
    (["autoscaler.policy.scale_up.max_pods=2"], "scale_up.max_pods", 2),
    (["autoscaler.policy.scale_down.period=30.5"], "scale_down.period", 30.5),
    (["autoscaler.policy.scale_down.max_percent=12.5"], "scale_down.max_percent", 12.5),
    (
        ["autoscaler.policy.signals[0].metric=ttft_p99", "autoscaler.policy.signals[0].target=1500.5"],
        "signals.0.target",
        1500.5,
    ),
]


@pytest.mark.parametrize(
    ("assignments", "field", "want"), SET_CASES, ids=[c[1] + "=" + str(c[2]) for c in SET_CASES]
)
def test_every_policy_key_reaches_the_loaded_config(render, tmp_path, assignments, field, want):
    """`--set autoscaler.policy.<key>=<value>` is `scaler.<key>` in the file the autoscaler loads,
    decimals included (helm passes them as strings; the chart turns them back into numbers)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        render(*set_args(*assignments)).config_map_file("-autoscaler", "config.yaml"), encoding="utf-8"
    )
    got: Any = load_config(path).scaler
    for part in field.split("."):
        got = got[int(part)] if part.isdigit() else getattr(got, part)
    assert got == want


# --- the chart and the autoscaler reject the same bad policies --------------------------------------

BAD_POLICIES = [
    ("negative-threshold", {"threshold": -5}, "threshold"),
    ("zero-threshold", {"threshold": 0}, "threshold"),
    ("zero-window", {"time_window": 0}, "time_window"),
    ("min-above-max", {"min_deployment_count": 5, "max_deployment_count": 2}, "min_deployment_count"),
    ("negative-min", {"min_deployment_count": -1}, "min_deployment_count"),
    ("zero-min", {"min_deployment_count": 0}, "min_deployment_count"),
    ("zero-max", {"max_deployment_count": 0}, "max_deployment_count"),
    ("unknown-type", {"type": "latency"}, "type"),
    ("tolerance-one", {"tolerance": 1}, "tolerance"),
    ("negative-stabilization", {"stabilization_window": -1}, "stabilization_window"),
    ("negative-max-pods", {"scale_up": {"max_pods": -1}}, "max_pods"),
    ("zero-period", {"scale_down": {"period": 0}}, "period"),
    ("unknown-signal", {"signals": [{"metric": "gpu_util", "target": 50}]}, "metric"),
    ("repeated-signal", {"signals": [{"metric": "ttft_p99", "target": 1}] * 2}, "signals"),
    ("kv-usage-above-one", {"signals": [{"metric": "kv_usage", "target": 2}]}, "target"),
    ("misspelled-key", {"treshold": 25}, "treshold"),
]


@pytest.mark.parametrize(("policy", "key"), [c[1:] for c in BAD_POLICIES], ids=[c[0] for c in BAD_POLICIES])
def test_chart_rejects_what_the_autoscaler_rejects(helm, policy, key):
    with pytest.raises(ConfigError) as config_error:
        parse_config({"scaler": policy})
    assert any(key in e for e in config_error.value.errors), config_error.value.errors
    with pytest.raises(HelmError) as helm_error:
        helm.template(values={"autoscaler": {"policy": policy}})
    assert key in str(helm_error.value)


# --- how the config reaches the pod ------------------------------------------------------------------


def test_config_is_mounted_as_a_directory_the_kubelet_updates(render):
    rendered = render()
    spec = pod_spec(rendered.one("Deployment", "-autoscaler"))
    autoscaler = container(spec, "autoscaler")
    assert autoscaler["command"] == ["nlg-autoscaler", "--config", f"{CONFIG_DIR}/config.yaml"]
    [mount] = [m for m in autoscaler["volumeMounts"] if m["mountPath"] == CONFIG_DIR]
    # A subPath mount would freeze the file at pod start: no reload.
    assert "subPath" not in mount and "subPathExpr" not in mount
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == rendered.one("ConfigMap", "-autoscaler")["metadata"]["name"]
    assert "items" not in volume["configMap"]
    assert set(rendered.one("ConfigMap", "-autoscaler")["data"]) == {"config.yaml"}


def test_autoscaler_runs_unprivileged(render):
    spec = pod_spec(render().one("Deployment", "-autoscaler"))
    assert spec["securityContext"]["runAsNonRoot"] is True
    context = container(spec, "autoscaler")["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]


def test_several_replicas_need_leader_election(helm):
    with pytest.raises(
        HelmError, match=r"autoscaler.replicas \(2\) needs autoscaler.leader_election.enabled=true"
    ):
        helm.template(*set_args("autoscaler.replicas=2", "autoscaler.leader_election.enabled=false"))


@pytest.mark.parametrize(
    ("limit", "want"),
    [
        ({"select": "max"}, {"selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 60},
            {"type": "Percent", "value": 100, "periodSeconds": 60}]}),
        ({"select": "min", "max_percent": 0}, {"selectPolicy": "Disabled"}),
        ({"select": "max", "max_percent": 0}, {"selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 60}]}),
        ({"select": "min", "max_pods": 2, "max_percent": 10}, {"selectPolicy": "Min", "policies": [
            {"type": "Pods", "value": 2, "periodSeconds": 60}, {"type": "Percent", "value": 10, "periodSeconds": 60}]}),
    ],
    ids=["max", "min-with-a-zero-is-disabled", "max-with-a-zero-keeps-the-other", "min"],
)  # fmt: skip
def test_select_becomes_the_hpa_select_policy(render, limit, want):
    """The same choice as autoscaler.decide.allowed_change, for the keda and hpa modes."""
    values = {"scaling": {"mode": "hpa"}, "autoscaler": {"policy": {"scale_down": limit}}}
    behavior = render(values=values).one("HorizontalPodAutoscaler")["spec"]["behavior"]["scaleDown"]
    assert {k: v for k, v in behavior.items() if k != "stabilizationWindowSeconds"} == want
    rendered = render(values={"autoscaler": {"policy": {"scale_down": limit}}})
    config = yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml"))
    assert parse_scaler(config["scaler"]).scale_down.select == limit["select"]
