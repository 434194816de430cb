"""The management API's token Secret: created with a random token, kept across upgrades, or named.

The upgrade case renders with ``helm template --dry-run=server`` against a small HTTP server of the
test's own that answers like the API server (version, discovery, one Secret), so the chart's
``lookup`` reads the Secret a previous release created.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from helm_testkit import CHART, NAMESPACE, RELEASE, Helm, Rendered, container, pod_spec, validate_manifest

from autoscaler.config import parse_config

SECRET = f"{RELEASE}-nlg-serving-api-token"
#: What the fake API server's discovery lists: the kinds the chart renders (helm maps each one).
KINDS = {
    "v1": [("configmaps", "ConfigMap"), ("pods", "Pod"), ("secrets", "Secret"), ("services", "Service"),
           ("serviceaccounts", "ServiceAccount")],
    "apps/v1": [("deployments", "Deployment")],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget")],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy")],
    "rbac.authorization.k8s.io/v1": [("roles", "Role"), ("rolebindings", "RoleBinding")],
}  # fmt: skip


class FakeApiServer:
    """Answers GET like kube-apiserver for /version, discovery and the Secrets in ``secrets``."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.requests.append(self.path)
                status, body = owner.answer(self.path.split("?")[0])
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str) -> tuple[int, dict]:
        prefix = f"/api/v1/namespaces/{NAMESPACE}/secrets/"
        if path == "/version":
            return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            groups = [{"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                       "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                      for gv in KINDS if "/" in gv]  # fmt: skip
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        group_version = path.removeprefix("/api/").removeprefix("/apis/")
        if group_version in KINDS:
            resources = [{"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                          "verbs": ["get", "list", "create", "patch"]}
                         for plural, kind in KINDS[group_version]]  # fmt: skip
            return 200, {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}
        if path.startswith(prefix) and path[len(prefix) :] in self.secrets:
            name = path[len(prefix) :]
            # As the release's first install left it: owned by Helm, so an upgrade may take it over.
            metadata = {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "Helm"},
                        "annotations": {"meta.helm.sh/release-name": RELEASE,
                                        "meta.helm.sh/release-namespace": NAMESPACE}}  # fmt: skip
            return 200, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
                         "data": self.secrets[name]}  # fmt: skip
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "test"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))  # fmt: skip
        return path


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer({}) as server:
        yield server


def render_against(helm: Helm, server: FakeApiServer, tmp_path: Path) -> str:
    """The Secret as an upgrade renders it: lookups answered by ``server`` (it serves no OpenAPI
    document, so the manifests are not validated against one here; the other tests do that)."""
    return helm.run(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=server",
        "--disable-openapi-validation", "--kubeconfig", str(server.kubeconfig(tmp_path)),
        "--show-only", "templates/autoscaler-token-secret.yaml",
    )  # fmt: skip


def token_of(rendered: Rendered) -> str:
    secret = rendered.one("Secret", "-api-token")
    return base64.b64decode(secret["data"]["token"]).decode()


def test_the_chart_creates_a_random_token_and_the_autoscaler_reads_it(render):
    rendered = render()
    secret = rendered.one("Secret", "-api-token")
    validate_manifest(secret)
    assert secret["metadata"]["name"] == SECRET
    token = token_of(rendered)
    assert len(token) == 43 and token.isalnum()
    deployment = rendered.one("Deployment", "-autoscaler")
    spec = pod_spec(deployment)
    volume = next(v for v in spec["volumes"] if v["name"] == "api-token")
    assert volume["secret"] == {"secretName": SECRET, "items": [{"key": "token", "path": "token"}]}
    mount = next(m for m in container(spec, "autoscaler")["volumeMounts"] if m["name"] == "api-token")
    config = parse_config(yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml")))
    assert config.api.token_file == f"{mount['mountPath']}/token"
    assert (config.api.host, config.api.auth) == ("0.0.0.0", "token")


def test_two_installs_get_different_tokens(helm):
    first = Rendered.parse(helm.template("--show-only", "templates/autoscaler-token-secret.yaml"))
    second = Rendered.parse(helm.template("--show-only", "templates/autoscaler-token-secret.yaml"))
    assert token_of(first) != token_of(second)


def test_an_upgrade_keeps_the_token_the_release_has(helm, tmp_path):
    kept = base64.b64encode(b"the-token-from-the-first-install").decode()
    with FakeApiServer({SECRET: {"token": kept}}) as server:
        text = render_against(helm, server, tmp_path)
        assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}" in server.requests
    assert token_of(Rendered.parse(text)) == "the-token-from-the-first-install"


def test_an_upgrade_without_the_secret_creates_one(helm, tmp_path, api_server):
    text = render_against(helm, api_server, tmp_path)
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}" in api_server.requests
    assert len(token_of(Rendered.parse(text))) == 43


def test_a_named_secret_is_used_and_none_created(render):
    rendered = render("--set", "autoscaler.api.tokenSecret.name=my-token", "--set", "autoscaler.api.tokenSecret.key=t")
    assert rendered.maybe("Secret", "-api-token") is None
    volume = next(v for v in pod_spec(rendered.one("Deployment", "-autoscaler"))["volumes"] if v["name"] == "api-token")
    assert volume["secret"] == {"secretName": "my-token", "items": [{"key": "t", "path": "token"}]}


@pytest.mark.parametrize(
    "args",
    [("--set", "autoscaler.api.port=0"), ("--set", "scaling.mode=keda")],
    ids=["api-off", "keda-mode"],
)
def test_no_api_no_secret(render, args):
    rendered = render(*args)
    assert rendered.maybe("Secret", "-api-token") is None
    for deployment in rendered.all("Deployment"):
        assert all(v["name"] != "api-token" for v in pod_spec(deployment).get("volumes", []))
    if args[1] == "autoscaler.api.port=0":
        config = parse_config(yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml")))
        assert config.api.token_file == ""


def test_every_rendered_config_is_valid_for_the_autoscaler(render):
    """The config validation refuses a non-loopback API without a token: the chart never renders one."""
    for args in [(), ("--set", "autoscaler.api.port=0"), ("--set", "autoscaler.api.tokenSecret.name=x")]:
        parse_config(yaml.safe_load(render(*args).config_map_file("-autoscaler", "config.yaml")))
