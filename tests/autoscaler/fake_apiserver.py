"""A small Kubernetes API server of the tests' own: namespaced objects over real HTTP with resourceVersions.

Unlike kmock's emulator it keeps optimistic concurrency as kube-apiserver does: every write gives the
object a new ``resourceVersion``, and a PUT or a merge PATCH that carries an older one is refused
with 409 Conflict, so two autoscaler replicas racing on one ConfigMap or Lease meet what they would
meet in a cluster. Enough for ConfigMaps, Leases and a Deployment's ``scale`` subresource:

- ``GET .../<plural>/<name>``; ``POST .../<plural>`` (409 AlreadyExists); ``PUT .../<plural>/<name>``
  (a replace); ``PATCH`` with ``application/merge-patch+json`` (RFC 7386);
- ``GET``/``PATCH .../deployments/<name>/scale`` read and change the Deployment's ``spec.replicas``.

``stop()`` closes the port (clients see connection refused, as when the API server is down) and
``start()`` opens the same port again. ``requests`` records (method, path) of every request.
``storm()`` lets another writer change an object just before each of the next writes to it, so each
of those writes, carrying the version read before, is refused 409 as the API server refuses it.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)

Key = tuple[str, str, str]  # (plural, namespace, name)


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True  # start() after stop() takes the same port again
    daemon_threads = True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip


def deployment(name: str, replicas: int) -> dict[str, Any]:
    """An apps/v1 Deployment as the API server returns it (the client requires selector and template)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": name, "image": "x"}]}},
        },
        "status": {"replicas": replicas},
    }


class FakeApiServer:
    """Namespaced objects in memory, served on a loopback port; ``objects[(plural, ns, name)]``."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._storms: dict[Key, float] = {}  # key -> writes still to be overtaken
        self._version = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the objects -----------------------------------------------------------------------------

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def put(self, plural: str, namespace: str, obj: dict[str, Any]) -> None:
        """Stores ``obj`` as it would be after a create (what ``kubectl apply`` or the chart made)."""
        with self._lock:
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {}).update(namespace=namespace, resourceVersion=self._next_version())
            self.objects[plural, namespace, obj["metadata"]["name"]] = obj

    def add_config_map(self, name: str, data: dict[str, str] | None = None, namespace: str = "default") -> None:
        self.put("configmaps", namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                           "data": dict(data or {})})  # fmt: skip

    def add_deployment(self, name: str, replicas: int, namespace: str = "default") -> None:
        self.put("deployments", namespace, deployment(name, replicas))

    def annotations(self, plural: str, name: str, namespace: str = "default") -> dict[str, str]:
        return dict(self.objects[plural, namespace, name]["metadata"].get("annotations") or {})

    def replicas(self, name: str, namespace: str = "default") -> int:
        return int(self.objects["deployments", namespace, name]["spec"]["replicas"])

    def data(self, name: str, namespace: str = "default") -> dict[str, str]:
        return dict(self.objects["configmaps", namespace, name].get("data") or {})

    def storm(self, plural: str, name: str, writes: float = float("inf"), namespace: str = "default") -> None:
        """Another writer (an operator's script, a controller) changes the object just before each of
        the next ``writes`` writes to it: each of them is refused with 409 Conflict."""
        with self._lock:
            self._storms[plural, namespace, name] = writes

    def _overtaken(self, key: Key, obj: dict[str, Any]) -> None:
        """The other writer's change, if a storm is on: a new resourceVersion (the lock is held)."""
        if self._storms.get(key, 0) > 0:
            self._storms[key] -= 1
            obj["metadata"]["resourceVersion"] = self._next_version()

    # -- HTTP ------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        match = _PATH.match(path.split("?")[0])
        if match is None:
            return 404, status(404, "NotFound", f"no route {path}")
        plural, ns, name, sub = match["plural"], match["ns"], match["name"], match["sub"]
        with self._lock:
            if method == "POST" and name is None:
                name = (body.get("metadata") or {}).get("name", "")
                if (plural, ns, name) in self.objects:
                    return 409, status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                obj = copy.deepcopy(body)
                obj["metadata"].update(namespace=ns, resourceVersion=self._next_version())
                self.objects[plural, ns, name] = obj
                return 201, obj
            key = (plural, ns, name or "")
            obj = self.objects.get(key)
            if obj is None:
                return 404, status(404, "NotFound", f'{plural} "{name}" not found')
            if method != "GET":
                self._overtaken(key, obj)
            if sub == "scale":
                return self._scale(method, obj, body)
            if method == "GET":
                return 200, obj
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != obj["metadata"]["resourceVersion"]:
                message = (f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; '
                           "please apply your changes to the latest version and try again")  # fmt: skip
                return 409, status(409, "Conflict", message)
            if method == "PUT":
                new = copy.deepcopy(body)
            elif method == "PATCH":
                new = merge_patch(obj, body)
            else:
                return 405, status(405, "MethodNotAllowed", method)
            new.setdefault("metadata", {}).update(name=name, namespace=ns, resourceVersion=self._next_version())
            self.objects[key] = new
            return 200, new

    def _scale(self, method: str, deployment: dict[str, Any], body: Any) -> tuple[int, dict[str, Any]]:
        if method == "PATCH":
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != deployment["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", "the object has been modified")
            deployment["spec"]["replicas"] = body["spec"]["replicas"]
            deployment["metadata"]["resourceVersion"] = self._next_version()
        meta, replicas = deployment["metadata"], deployment["spec"]["replicas"]
        return 200, {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {key: meta[key] for key in ("name", "namespace", "resourceVersion")},
            "spec": {"replicas": replicas}, "status": {"replicas": replicas},
        }  # fmt: skip

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                fake.requests.append((self.command, self.path))
                code, answer = fake.handle(self.command, self.path, body)
                data = json.dumps(answer).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (its timeout): as an API server, answer no one

            do_GET = do_POST = do_PUT = do_PATCH = _serve

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
