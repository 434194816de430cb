"""Connecting to the Kubernetes API, and the one kind of error every call through it raises.

This module owns building the official client's :class:`kubernetes.client.ApiClient` (in-cluster
service account first, else a kubeconfig file) and :func:`call`, through which discovery, the
Deployment actuator and leader election make every request. Tests hand them an ApiClient pointed at
an emulator instead.

Whatever goes wrong in a call (an HTTP status, a refused connection, no answer in time; with
``kubernetes`` 37 and urllib3 2.x a refused connection is ``urllib3.exceptions.MaxRetryError``, not
``OSError``) reaches the caller as :class:`KubeError` with a one-line message, so one ``except``
covers an outage. Every call carries a ``_request_timeout``, and a client made here sends no
retries (a failed call fails at once; the loop's next round is the retry), so a call never outlasts
its timeout. Requests name the autoscaler in their User-Agent (:data:`USER_AGENT`), so the API
server's audit log attributes its writes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from autoscaler import __version__

log = logging.getLogger(__name__)

USER_AGENT = f"nlg-autoscaler/{__version__}"

T = TypeVar("T")


class KubeConfigError(RuntimeError):
    """Neither an in-cluster service account nor a kubeconfig was found."""


class KubeError(RuntimeError):
    """A Kubernetes API call failed; ``status`` is the HTTP status, None when no answer came."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def identify(api: k8s.ApiClient) -> k8s.ApiClient:
    """Names the autoscaler in the User-Agent of every request ``api`` sends."""
    api.user_agent = USER_AGENT
    return api


def new_client(configuration: k8s.Configuration) -> k8s.ApiClient:
    """An ApiClient that sends no retries and names the autoscaler."""
    configuration.retries = 0
    return identify(k8s.ApiClient(configuration))


def api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In a pod: its service account; elsewhere ``kubeconfig`` (default ~/.kube/config)."""
    configuration = k8s.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            log.info("Kubernetes API: in-cluster service account")
            return new_client(configuration)
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
    return new_client(configuration)


def call(what: str, method: Callable[..., T], *args: Any, timeout: float, **kwargs: Any) -> T:
    """``method(*args, **kwargs)`` within ``timeout`` seconds; any failure is a :class:`KubeError`
    whose message starts with ``what`` (e.g. "cannot read lease default/x")."""
    try:
        return method(*args, _request_timeout=timeout, **kwargs)
    except k8s.ApiException as e:
        raise KubeError(f"{what}: {describe(e, timeout)}", e.status or None) from e
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
        raise KubeError(f"{what}: {describe(e, timeout)}") from e


def describe(e: BaseException, timeout: float) -> str:
    """One line for a failed call: the status and the server's message, or why no answer came."""
    if isinstance(e, k8s.ApiException):
        if not e.status:  # the client's own wrapping of a TLS failure
            return f"Kubernetes API: {e.reason}"
        message = _status_message(e.body)
        return f"HTTP {e.status} {e.reason or ''}".rstrip() + (f" ({message})" if message else "")
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        return describe(e.reason, timeout)
    if isinstance(e, urllib3.exceptions.NewConnectionError):
        cause = e.__cause__
        why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause or e)
        return f"Kubernetes API unreachable ({why})"
    if isinstance(e, urllib3.exceptions.TimeoutError):
        return f"Kubernetes API did not answer within {timeout:g} s"
    if isinstance(e, urllib3.exceptions.ProtocolError):
        return f"Kubernetes API connection lost ({e.args[-1] if e.args else e})"
    if isinstance(e, OSError):
        return f"Kubernetes API: {e.strerror or e}"
    if isinstance(e, ValueError):
        return f"unexpected answer from the Kubernetes API ({str(e)[:200]})"
    return f"Kubernetes API: {type(e).__name__}: {str(e)[:200]}"


def _status_message(body: Any) -> str:
    """The ``message`` of a ``Status`` body, cut short; "" if there is none."""
    try:
        message = json.loads(body).get("message", "") if body else ""
    except (TypeError, ValueError, AttributeError):
        return ""
    return str(message)[:200]
