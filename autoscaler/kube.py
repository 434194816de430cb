"""Connecting to the Kubernetes API: in-cluster service account first, else a kubeconfig file.

This module owns building the official client's :class:`kubernetes.client.ApiClient`; discovery,
the Deployment actuator and leader election each take the ApiClient it returns, so tests hand them
one pointed at an emulator instead.
"""

from __future__ import annotations

import logging

from kubernetes import client as k8s
from kubernetes import config as k8s_config

log = logging.getLogger(__name__)


class KubeConfigError(RuntimeError):
    """Neither an in-cluster service account nor a kubeconfig was found."""


def api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In a pod: its service account; elsewhere ``kubeconfig`` (default ~/.kube/config)."""
    configuration = k8s.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            log.info("Kubernetes API: in-cluster service account")
            return k8s.ApiClient(configuration)
        except k8s_config.ConfigException:
            pass
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    except (k8s_config.ConfigException, OSError) as e:
        raise KubeConfigError(
            "no Kubernetes credentials: not running in a pod and no usable kubeconfig "
            f"({kubeconfig or '~/.kube/config'}: {e}); pass --kubeconfig or use source.static_targets "
            "with actuator.kind triton or none"
        ) from e
    log.info("Kubernetes API: kubeconfig %s", kubeconfig or "~/.kube/config")
    return k8s.ApiClient(configuration)
