"""autoscaler.policy.type planner in the chart: its engine profile shipped in a ConfigMap (the chart's,
from plannerProfile.json, or the user's), mounted where the rendered config points, and refused in
the keda and hpa modes, which cannot plan from a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_testkit import ROOT, HelmError, container, pod_spec

from autoscaler.config import PlannerSpec, parse_config

PROFILE = ROOT / "benchmarks" / "profiles" / "cpu-gpt2-fp32.json"
AUTOSCALER = "-nlg-serving-autoscaler"


def planner_values(**profile: str) -> dict[str, Any]:
    return {"autoscaler": {"policy": {"type": "planner"}, "plannerProfile": profile}}


def rendered_config(rendered) -> dict[str, Any]:
    data = yaml.safe_load(rendered.config_map_file(AUTOSCALER, "config.yaml"))
    assert isinstance(data, dict)
    return data


def mounted_files(rendered, tmp_path: Path) -> dict[str, str]:
    """The pod's view: each file the autoscaler container mounts from a ConfigMap, by its path."""
    spec = pod_spec(rendered.one("Deployment", AUTOSCALER))
    volumes = {v["name"]: v for v in spec["volumes"]}
    files = {}
    for mount in container(spec, "autoscaler")["volumeMounts"]:
        source = volumes[mount["name"]].get("configMap")
        if source is None:
            continue
        for item in source.get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = f"{source['name']}:{item['key']}"
    return files


def test_the_profile_json_ships_in_a_configmap_mounted_where_the_config_points(render, tmp_path):
    rendered = render(values=planner_values(json=PROFILE.read_text()))
    config = rendered_config(rendered)
    path = config["scaler"]["planner"]["profile"]
    name, key = mounted_files(rendered, tmp_path)[path].split(":")
    shipped = rendered.one("ConfigMap", "-profile")
    assert shipped["metadata"]["name"] == name
    assert shipped["data"][key].strip() == PROFILE.read_text().strip()
    # The autoscaler accepts the rendered config with the file where the pod would see it.
    local = tmp_path / key
    local.write_text(shipped["data"][key])
    config["scaler"]["planner"]["profile"] = str(local)
    parsed = parse_config(config)
    assert parsed.scaler.type == "planner"
    assert parsed.scaler.planner == PlannerSpec(profile=str(local))  # values.yaml's numbers are the defaults


def test_a_users_configmap_is_mounted_and_no_profile_configmap_is_made(render, tmp_path):
    rendered = render(values=planner_values(configMap="my-profiles", key="h100.json"))
    config = rendered_config(rendered)
    assert mounted_files(rendered, tmp_path)[config["scaler"]["planner"]["profile"]] == "my-profiles:h100.json"
    assert rendered.maybe("ConfigMap", "-profile") is None


def test_a_new_profile_rolls_the_autoscaler_pod(render):
    def checksum(text: str) -> str:
        deployment = render(values=planner_values(json=text)).one("Deployment", AUTOSCALER)
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/planner-profile"])

    assert checksum(PROFILE.read_text()) != checksum(PROFILE.read_text().replace("29.922", "30.5"))


def test_other_policies_mount_no_profile(render, tmp_path):
    rendered = render()
    assert not any("profile" in path for path in mounted_files(rendered, tmp_path))
    assert "profile" not in rendered_config(rendered)["scaler"]["planner"]


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({}, "autoscaler.plannerProfile: policy.type planner plans from an engine profile"),
        ({"json": "{}", "configMap": "mine"}, "set json or configMap, not both"),
        ({"json": "{not json"}, "autoscaler.plannerProfile.json is not JSON"),
    ],
    ids=["none", "both", "not-json"],
)
def test_a_planner_without_one_usable_profile_is_refused(helm, profile, message):
    with pytest.raises(HelmError) as error:
        helm.template(values=planner_values(**profile))
    assert message in str(error.value)


@pytest.mark.parametrize("mode", ["keda", "hpa"])
def test_keda_and_hpa_modes_refuse_the_planner_saying_why(helm, mode):
    values = planner_values(json=PROFILE.read_text())
    values["scaling"] = {"mode": mode}
    with pytest.raises(HelmError) as error:
        helm.template(values=values)
    assert "planner runs in scaling.mode=autoscaler only: KEDA and HPA scale on a metric" in str(error.value)
