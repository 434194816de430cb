"""The Pod Security Standards' "restricted" profile (with "baseline", which it includes) as a check of one
pod spec: :func:`violations` lists every rule a pod breaks, each naming the field and what is allowed.

The rules are those of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (policy
version "latest", Kubernetes 1.29 and newer), the ones the Pod Security admission controller enforces
in a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Baseline, "Capabilities": what a container may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
#: Baseline, "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
#: Baseline, "SELinux": the types allowed.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
#: Restricted, "Volume Types": the only kinds of volume allowed.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
#: Restricted, "Seccomp" (and baseline's "not Unconfined").
SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, container) for every container of the pod: ``containers[triton]``."""
    for key in _CONTAINER_LISTS:
        for c in spec.get(key) or []:
            yield f"{key}[{c.get('name', '?')}]", c


def violations(spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    """Every rule of "restricted" that the pod spec (and its pod template's annotations) breaks."""
    found: list[str] = []
    pod = spec.get("securityContext") or {}
    every = list(containers(spec))

    # -- baseline --------------------------------------------------------------------------------
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"spec.{key} = true: must be false or unset (baseline: Host Namespaces)")
    contexts = [("spec.securityContext", pod)] + [(f"{w}.securityContext", c.get("securityContext") or {})
                                                  for w, c in every]  # fmt: skip
    for where, context in contexts:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}.windowsOptions.hostProcess = true: must be false (baseline: HostProcess)")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES:
            found.append(f"{where}.seLinuxOptions.type = {selinux['type']!r}: must be one of "
                         f"{sorted(SELINUX_TYPES)} (baseline: SELinux)")  # fmt: skip
        for field in ("user", "role"):
            if selinux.get(field):
                found.append(f"{where}.seLinuxOptions.{field} is set: must be unset (baseline: SELinux)")
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"{where}.appArmorProfile.type = {apparmor!r}: must be RuntimeDefault, Localhost "
                         "or unset (baseline: AppArmor)")  # fmt: skip
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in SECCOMP_TYPES:
            found.append(f"{where}.seccompProfile.type = {seccomp!r}: must be RuntimeDefault or Localhost "
                         "(restricted: Seccomp)")  # fmt: skip
        user = context.get("runAsUser")
        if user == 0:
            found.append(f"{where}.runAsUser = 0: must be non-zero or unset (restricted: Running as Non-root user)")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"metadata.annotations[{key}] = {value!r}: must be runtime/default or localhost/* "
                         "(baseline: AppArmor)")  # fmt: skip
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"spec.securityContext.sysctls[{sysctl.get('name')}]: not a safe sysctl (baseline: Sysctls)")
    for where, c in every:
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{where}.securityContext.privileged = true: must be false or unset "
                         "(baseline: Privileged Containers)")  # fmt: skip
        if context.get("procMount", "Default") != "Default":
            found.append(f"{where}.securityContext.procMount = {context['procMount']!r}: must be Default "
                         "(baseline: /proc Mount Type)")  # fmt: skip
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{where}.ports[{port.get('name', port.get('containerPort'))}].hostPort = "
                             f"{port['hostPort']}: must be 0 or unset (baseline: Host Ports)")  # fmt: skip
        capabilities = context.get("capabilities") or {}
        added = set(capabilities.get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"{where}.securityContext.capabilities.add {sorted(added - BASELINE_CAPABILITIES)}: "
                         "beyond the baseline set (baseline: Capabilities)")  # fmt: skip
        # -- restricted, per container -----------------------------------------------------------
        escalation = context.get("allowPrivilegeEscalation")
        if escalation is not False:
            found.append(f"{where}.securityContext.allowPrivilegeEscalation = {escalation!r}: must be false "
                         "(restricted: Privilege Escalation)")  # fmt: skip
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{where}.securityContext.capabilities.drop = {capabilities.get('drop')!r}: must "
                         "include ALL (restricted: Capabilities)")  # fmt: skip
        if added - {"NET_BIND_SERVICE"}:
            found.append(f"{where}.securityContext.capabilities.add {sorted(added - {'NET_BIND_SERVICE'})}: "
                         "only NET_BIND_SERVICE may be added (restricted: Capabilities)")  # fmt: skip
        non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{where}: runAsNonRoot = {non_root!r} (its own, else the pod's): must be true "
                         "(restricted: Running as Non-root)")  # fmt: skip
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_TYPES:
            found.append(f"{where}: seccompProfile.type = {seccomp!r} (its own, else the pod's): must be "
                         "RuntimeDefault or Localhost (restricted: Seccomp)")  # fmt: skip

    # -- volumes ---------------------------------------------------------------------------------
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"spec.volumes[{volume['name']}].hostPath: must be unset (baseline: HostPath Volumes)")
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"spec.volumes[{volume['name']}]: {sorted(kinds - RESTRICTED_VOLUMES)[0]} is not an "
                         f"allowed volume type {sorted(RESTRICTED_VOLUMES)} (restricted: Volume Types)")  # fmt: skip
    return found
