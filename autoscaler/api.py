"""The management REST API of the thesis's Table 6.1, on FastAPI (which serves the OpenAPI document).

This module owns HTTP and nothing else; the targets live in :class:`autoscaler.targets.Targets`.

=========  ==============================  ==================================================
method     path                            does
=========  ==============================  ==================================================
POST       ``/deployment/``                registers a scaling target (Listing 6.1 body) -> 201
PUT        ``/deployment/{model_id}/``     registers or replaces that model's target -> 201 or 200
GET        ``/deployment/``                lists the targets
GET        ``/deployment/{model_id}/``     replicas, metric values, last decisions and reasons
DELETE     ``/deployment/{model_id}/``     stops scaling that model
GET        ``/healthz``                    liveness (no auth)
GET        ``/openapi.json``, ``/docs``    the OpenAPI document and its browser (no auth)
=========  ==============================  ==================================================

With a token every ``/deployment`` call needs ``Authorization: Bearer <token>`` (401 otherwise).
Without one (the config keeps the API on loopback then) reads are open and writes are refused (403)
unless ``auth`` is ``"none"``. A body over :data:`MAX_BODY_BYTES` is a 413; one that does not parse,
nests deeper than :data:`MAX_DEPTH` or breaks a rule is a 422 whose ``detail.errors`` lists every
problem, each naming its key (``scaler.threshold = -1.0: must be greater than 0``). A model already
registered (POST), the config file's model (POST, PUT, DELETE), and a Deployment or Triton model
another target already scales are 409s, checked against the stored set of targets (see
:mod:`autoscaler.target_store`), which every replica reads.

Writes go to the leader. A standby (leader election on, and this replica does not lead by its own
clock) answers a write 503 with ``Retry-After`` and ``detail.leader`` naming the replica that leads
(null if none is known; never itself, even while the Lease still names it after it stepped down).
So does any replica when the stored targets cannot be reached (``detail.error`` says why), the
leader naming itself. Reads answer on any replica, from the targets it read last.
"""

# No ``from __future__ import annotations``: FastAPI resolves the dependency annotations of the
# handlers at runtime, and they refer to names local to create_app().
import hashlib
import math
import secrets
from typing import Annotated, Any, Final, Literal

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter

from autoscaler import __version__
from autoscaler._schema import show
from autoscaler.config import ConfigError, Registration, parse_registration
from autoscaler.loop import Controller
from autoscaler.safe_parse import loads_json
from autoscaler.target_store import StoreUnavailable, Unstorable
from autoscaler.targets import TargetConflict

#: A Listing 6.1 body is a few hundred bytes; this leaves room for every signal and long names.
MAX_BODY_BYTES: Final = 64 * 1024
#: The body's deepest legitimate nesting is 4 (body, scaler, signals, a signal).
MAX_DEPTH: Final = 8

_EXAMPLE = {
    "instance_type": "g4dn.12xlarge",
    "model_id": "gpt2",
    "engine_type": "triton",
    "scaler": {"min_deployment_count": 1, "max_deployment_count": 4, "type": "pertoken",
               "time_window": 60, "threshold": 25},
}  # fmt: skip


def _body_schema() -> dict[str, Any]:
    schema = TypeAdapter(Registration).json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


def _component_schemas() -> dict[str, Any]:
    defs: dict[str, Any] = TypeAdapter(Registration).json_schema(ref_template="#/components/schemas/{model}")
    return dict(defs.get("$defs", {}))


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _depth(data: Any) -> int:
    """How deep lists and objects nest in ``data`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def _bad_body(message: str) -> HTTPException:
    return HTTPException(422, {"errors": [f"body: {message}"]})


async def _read_json(request: Request) -> Any:
    """The body as JSON, at most :data:`MAX_BODY_BYTES` read whatever Content-Length claims."""
    too_large = HTTPException(413, {"errors": [f"body: larger than {MAX_BODY_BYTES} bytes"]})
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 12 or int(declared) > MAX_BODY_BYTES):
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise too_large
    try:
        data = loads_json(body)
    except RecursionError as e:
        raise _bad_body(f"nested deeper than {MAX_DEPTH} levels") from e
    except ValueError as e:  # malformed or not UTF-8 (a huge integer is a value, refused by its key's bound)
        raise _bad_body(f"not JSON ({str(e).split(';')[0]})") from e
    if _depth(data) > MAX_DEPTH:
        raise _bad_body(f"nested deeper than {MAX_DEPTH} levels")
    return data


def _parse(data: Any) -> Registration:
    try:
        return parse_registration(data)
    except ConfigError as e:
        raise HTTPException(422, {"errors": e.errors}) from e


def create_app(
    controller: Controller,
    token: str | None = None,
    *,
    auth: Literal["token", "none"] = "token",
    retry_after: float = 5.0,
    deployments: tuple[str, ...] = (),
) -> FastAPI:
    """The API over ``controller``. With ``token`` every /deployment call needs it; without one reads
    are open and writes are refused unless ``auth`` is ``"none"`` (config.ApiSpec keeps that on loopback).
    A 503 asks the client to come back in ``retry_after`` seconds (the loop interval). With
    ``deployments`` (config ``api.deployments``) a target must name one of them.
    """
    targets = controller.targets
    come_back = {"Retry-After": str(max(1, math.ceil(retry_after)))}
    app = FastAPI(
        title="nlg-autoscaler",
        version=__version__,
        description="Scales NLG serving on per-token latency (thesis Table 6.1 management API).",
    )
    bearer = HTTPBearer(auto_error=False, description="The token from api.token_file")

    def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if not token:
            return
        given = credentials.credentials if credentials else ""
        # Digests have one length, so the comparison's time says nothing about the token's length.
        if not secrets.compare_digest(_digest(given), _digest(token)):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing or wrong bearer token: send 'Authorization: Bearer <token from api.token_file>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def authorize_write(_: Annotated[None, Depends(authorize)]) -> None:
        if not token and auth != "none":
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                "writes need a bearer token: set api.token_file, or api.auth: none to allow "
                "anonymous writes (the API then listens on loopback only)",
            )

    def leading(_: Annotated[None, Depends(authorize_write)]) -> None:
        elector = controller.elector
        leader = controller.leader()
        if elector is None or leader == elector.identity:
            return
        if leader:
            why = f"{leader!r} leads: send it again (the Service picks a replica) or to {leader!r}"
        else:
            cause = elector.error or ("its own renewal is overdue" if elector.leading else "the Lease is free")
            why = f"no leader is known ({cause}); send it again"
        message = f"this replica ({elector.identity!r}) is a standby and does not take writes; {why}"
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, {"error": message, "leader": leader or None},
                            headers=come_back)  # fmt: skip

    def unavailable(e: StoreUnavailable) -> HTTPException:
        """The stored targets cannot be reached: ``leader`` still names who leads (this replica, as a rule)."""
        detail = {"error": str(e), "leader": controller.leader() or None}
        return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail, headers=come_back)

    read_auth = [Depends(authorize)]
    write_auth = [Depends(leading)]
    body_doc = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _body_schema(), "example": _EXAMPLE}},
        }
    }
    errors_doc: dict[int | str, dict[str, Any]] = {
        403: {"description": "no token configured and api.auth is not none"},
        409: {"description": "the config file or another target owns this model or its Deployment"},
        413: {"description": f"body over {MAX_BODY_BYTES} bytes"},
        422: {"description": "bad body: every problem named in detail.errors"},
        503: {"description": "a standby (detail.leader names the leader), or the stored targets cannot be "
                             "reached (detail.error); Retry-After says when to try again"},
    }  # fmt: skip

    def register(registration: Registration, replace: bool) -> tuple[dict[str, Any], bool]:
        if deployments and registration.target_name not in deployments:
            allowed = ", ".join(show(name) for name in deployments)
            raise HTTPException(422, {"errors": [
                f"deployment = {show(registration.target_name)}: the autoscaler may scale only {allowed} "
                "(api.deployments; with the chart, add it to autoscaler.api.deployments)"]})  # fmt: skip
        try:
            return targets.register(registration, replace=replace)
        except TargetConflict as e:
            raise HTTPException(409, str(e)) from e
        except StoreUnavailable as e:
            raise unavailable(e) from e
        except Unstorable as e:
            raise HTTPException(422, {"errors": [str(e)]}) from e

    @app.post(
        "/deployment/",
        status_code=status.HTTP_201_CREATED,
        dependencies=write_auth,
        summary="CREATE: register a model and its scaling policy (Listing 6.1)",
        openapi_extra=body_doc,
        responses=errors_doc,
    )
    async def create(request: Request) -> JSONResponse:
        registration = _parse(await _read_json(request))
        # On a worker thread: a write may wait out conflicts for its whole budget (autoscaler.backoff),
        # and the event loop must answer /healthz meanwhile.
        view, _ = await run_in_threadpool(register, registration, False)
        return JSONResponse(view, status_code=status.HTTP_201_CREATED)

    @app.put(
        "/deployment/{model_id}/",
        dependencies=write_auth,
        summary="UPSERT: register the model, or replace its policy (201 created, 200 replaced)",
        openapi_extra=body_doc,
        responses={201: {"description": "registered"}, **errors_doc},
    )
    async def upsert(model_id: str, request: Request) -> JSONResponse:
        data = await _read_json(request)
        if isinstance(data, dict):
            data.setdefault("model_id", model_id)
        registration = _parse(data)
        if registration.model_id != model_id:
            detail = f"model_id = {show(registration.model_id)}: must match the path's {show(model_id)}"
            raise HTTPException(422, {"errors": [detail]})
        view, created = await run_in_threadpool(register, registration, True)
        return JSONResponse(view, status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @app.get("/deployment/", dependencies=read_auth, summary="LIST: every model being scaled")
    def list_targets() -> list[dict[str, Any]]:
        return targets.views()

    @app.get(
        "/deployment/{model_id}/",
        dependencies=read_auth,
        summary="READ: replicas, current metric values and the last decisions with their reasons",
        responses={404: {"description": "no such model"}},
    )
    def read(model_id: str) -> dict[str, Any]:
        view = targets.view(model_id)
        if view is None:
            hint = "POST /deployment/ registers one"
            raise HTTPException(404, f"no scaling target for model {show(model_id)}; {hint}")
        return view

    @app.delete(
        "/deployment/{model_id}/",
        dependencies=write_auth,
        summary="DELETE: stop scaling a model (its replicas stay as they are)",
        responses={404: {"description": "no such model"}, 409: {"description": "the config file owns it"},
                   503: errors_doc[503]},
    )
    def delete(model_id: str) -> dict[str, Any]:
        try:
            removed = targets.unregister(model_id)
        except TargetConflict as e:
            raise HTTPException(409, str(e)) from e
        except StoreUnavailable as e:
            raise unavailable(e) from e
        if not removed:
            raise HTTPException(404, f"no scaling target for model {show(model_id)}")
        return {"model_id": model_id, "deleted": True}

    @app.get("/healthz", summary="Liveness; says whether this replica leads")
    def healthz() -> dict[str, Any]:
        leading = controller.elector.leading if controller.elector else True
        return {"status": "ok", "leader": leading}

    schema = app.openapi()
    schema.setdefault("components", {}).setdefault("schemas", {}).update(_component_schemas())
    return app
