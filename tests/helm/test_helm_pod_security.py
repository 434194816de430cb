"""Every pod the chart renders meets the Pod Security Standard "restricted", in every rendering the
schema's choices give (the `helm test` pod included), and the check itself catches each rule broken."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from helm_testkit import CHART, Rendered
from pod_security import violations
from variants import every_rendering

SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
RENDERINGS = every_rendering(SCHEMA)


def pod_templates(node: Any) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(metadata, pod spec) of every pod a manifest holds, whatever its kind: a Pod itself, or the
    template of a Deployment, Job, CronJob or any other workload (a spec with containers)."""
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield node.get("metadata") or {}, spec
        for value in node.values():
            yield from pod_templates(value)
    elif isinstance(node, list):
        for item in node:
            yield from pod_templates(item)


def pods(rendered: Rendered) -> dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """The rendered pods by ``kind/name`` of the manifest holding them."""
    found = {}
    for doc in rendered.docs:
        for metadata, spec in pod_templates(doc):
            found[f"{doc['kind']}/{doc['metadata']['name']}"] = (metadata, spec)
    return found


@pytest.mark.parametrize("rendering", RENDERINGS, ids=list(RENDERINGS))
def test_every_rendered_pod_is_restricted(render, rendering):
    rendered = render(values=RENDERINGS[rendering])
    found = pods(rendered)
    assert found, "no pod rendered"
    broken = {where: v for where, (meta, spec) in found.items() if (v := violations(spec, meta.get("annotations")))}
    assert broken == {}


def test_the_renderings_cover_every_pod_and_container_the_chart_can_make(render):
    """Not vacuous: together the renderings hold each pod and container this chart knows of."""
    seen: set[str] = set()
    for values in RENDERINGS.values():
        for where, (_, spec) in pods(render(values=values)).items():
            seen |= {f"{where}:{c['name']}" for key in ("initContainers", "containers") for c in spec.get(key, [])}
    assert seen >= {
        "Deployment/demo-nlg-serving-triton:package", "Deployment/demo-nlg-serving-triton:weights",
        "Deployment/demo-nlg-serving-triton:triton", "Deployment/demo-nlg-serving-autoscaler:autoscaler",
        "Deployment/demo-nlg-serving-balancer:haproxy", "Pod/demo-nlg-serving-test-stream:generate-stream",
    }  # fmt: skip
    assert "networkPolicy.enabled=False" in RENDERINGS, "the schema's switches are swept"


def test_the_triton_pod_runs_as_the_images_non_root_user_with_only_its_volumes_writable(render, chart_values):
    spec = pods(render())["Deployment/demo-nlg-serving-triton"][1]
    assert spec["securityContext"]["runAsUser"] == chart_values["triton"]["runAsUser"] == 1000  # triton-server
    for key in ("initContainers", "containers"):
        for c in spec[key]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
    triton = next(c for c in spec["containers"] if c["name"] == "triton")
    mounts = {m["mountPath"]: m["name"] for m in triton["volumeMounts"] if not m.get("readOnly")}
    assert mounts == {"/dev/shm": "dshm", "/tmp": "tmp"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": chart_values["triton"]["shmSize"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": chart_values["triton"]["tmpSize"]}
    assert {"name": "HOME", "value": "/tmp"} in triton["env"]  # caches under HOME land in the emptyDir


def test_the_platform_may_choose_the_user(render):
    """OpenShift assigns a user from the namespace's range: null leaves runAsUser to it."""
    rendered = render(values={"triton": {"runAsUser": None, "runAsGroup": None}})
    spec = pods(rendered)["Deployment/demo-nlg-serving-triton"][1]
    assert "runAsUser" not in spec["securityContext"] and "runAsGroup" not in spec["securityContext"]
    assert violations(spec) == []


# --- the check itself ------------------------------------------------------------------------------

RESTRICTED_POD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{
        "name": "app", "image": "x",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "ports": [{"name": "http", "containerPort": 8000}],
    }],
    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "w", "persistentVolumeClaim": {"claimName": "w"}}],
}  # fmt: skip


def broken(path: str, value: Any) -> dict[str, Any]:
    """RESTRICTED_POD with ``value`` set at ``path`` ("containers.0.securityContext.privileged"); a path
    ending in a list ("volumes.+") appends it."""
    pod = copy.deepcopy(RESTRICTED_POD)
    *parents, last = path.split(".")
    node: Any = pod
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node.append(value)
    else:
        node[last] = value
    return pod


BREACHES = {
    "host-network": ("hostNetwork", True, "Host Namespaces"),
    "host-pid": ("hostPID", True, "Host Namespaces"),
    "privileged": ("containers.0.securityContext.privileged", True, "Privileged Containers"),
    "capability-beyond-baseline": ("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"], "baseline: Cap"),
    "capability-in-baseline": ("containers.0.securityContext.capabilities.add", ["CHOWN"], "restricted: Cap"),
    "no-drop-all": ("containers.0.securityContext.capabilities.drop", ["NET_RAW"], "must include ALL"),
    "host-path": ("volumes.+", {"name": "h", "hostPath": {"path": "/"}}, "HostPath Volumes"),
    "nfs-volume": ("volumes.+", {"name": "n", "nfs": {"server": "s", "path": "/"}}, "Volume Types"),
    "host-port": ("containers.0.ports.0.hostPort", 8000, "Host Ports"),
    "escalation": ("containers.0.securityContext.allowPrivilegeEscalation", True, "Privilege Escalation"),
    "escalation-unset": ("containers.0.securityContext.allowPrivilegeEscalation", None, "Privilege Escalation"),
    "root-container": ("containers.0.securityContext.runAsNonRoot", False, "Running as Non-root"),
    "root-pod": ("securityContext.runAsNonRoot", None, "Running as Non-root"),
    "uid-0": ("containers.0.securityContext.runAsUser", 0, "Non-root user"),
    "unconfined": ("containers.0.securityContext.seccompProfile", {"type": "Unconfined"}, "Seccomp"),
    "no-seccomp": ("securityContext.seccompProfile", None, "Seccomp"),
    "proc-mount": ("containers.0.securityContext.procMount", "Unmasked", "/proc Mount Type"),
    "selinux-user": ("securityContext.seLinuxOptions", {"user": "system_u"}, "SELinux"),
    "unsafe-sysctl": ("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}], "Sysctls"),
    "apparmor": ("securityContext.appArmorProfile", {"type": "Unconfined"}, "AppArmor"),
    "host-process": ("securityContext.windowsOptions", {"hostProcess": True}, "HostProcess"),
    "init-container": ("initContainers", [{"name": "init", "image": "x"}], "initContainers[init]"),
}


def test_a_restricted_pod_passes():
    assert violations(RESTRICTED_POD) == []
    assert violations(broken("containers.0.securityContext.capabilities.add", ["NET_BIND_SERVICE"])) == []


@pytest.mark.parametrize("breach", BREACHES, ids=list(BREACHES))
def test_each_rule_broken_is_named(breach):
    path, value, rule = BREACHES[breach]
    found = violations(broken(path, value))
    assert found and any(rule in v for v in found), found


def test_an_apparmor_annotation_other_than_the_runtimes_is_named():
    annotations = {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
    assert violations(RESTRICTED_POD, annotations) == [
        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app] = 'unconfined': must be "
        "runtime/default or localhost/* (baseline: AppArmor)"
    ]
