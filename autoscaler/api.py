"""The management REST API of the thesis's Table 6.1, on FastAPI (which serves the OpenAPI document).

This module owns HTTP and nothing else; the targets live in :class:`autoscaler.loop.Controller`.

=========  ==============================  ==================================================
method     path                            does
=========  ==============================  ==================================================
POST       ``/deployment/``                registers a scaling target (Listing 6.1 body) -> 201
GET        ``/deployment/``                lists the targets
GET        ``/deployment/{model_id}/``     replicas, metric values, last decisions and reasons
DELETE     ``/deployment/{model_id}/``     stops scaling that model
GET        ``/healthz``                    liveness (no auth)
GET        ``/openapi.json``, ``/docs``    the OpenAPI document and its browser (no auth)
=========  ==============================  ==================================================

With a token configured every ``/deployment`` call needs ``Authorization: Bearer <token>`` (401
otherwise). A body that does not parse is a 422 whose ``detail.errors`` lists every problem, each
naming its key (``scaler.threshold = -1.0: must be greater than 0``). The config file's target can
be read but neither replaced nor deleted through the API (409): the file owns it.
"""

# No ``from __future__ import annotations``: FastAPI resolves the dependency annotations of the
# handlers at runtime, and they refer to names local to create_app().
import secrets
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter

from autoscaler import __version__
from autoscaler.config import ConfigError, Registration, parse_registration
from autoscaler.loop import Controller, TargetConflict

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


def create_app(controller: Controller, token: str | None = None) -> FastAPI:
    """The API over ``controller``; ``token`` None or empty turns authentication off."""
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
        if not secrets.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing or wrong bearer token: send 'Authorization: Bearer <token from api.token_file>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    auth = [Depends(authorize)]

    @app.post(
        "/deployment/",
        status_code=status.HTTP_201_CREATED,
        dependencies=auth,
        summary="CREATE: register a model and its scaling policy (Listing 6.1)",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _body_schema(), "example": _EXAMPLE}},
            }
        },
        responses={409: {"description": "the config file owns this model"}, 422: {"description": "bad body"}},
    )
    async def create(request: Request) -> JSONResponse:
        try:
            data = await request.json()
        except ValueError as e:
            raise HTTPException(422, {"errors": [f"body: not JSON ({e})"]}) from e
        try:
            registration = parse_registration(data)
        except ConfigError as e:
            raise HTTPException(422, {"errors": e.errors}) from e
        try:
            view = controller.register(registration)
        except TargetConflict as e:
            raise HTTPException(409, str(e)) from e
        return JSONResponse(view, status_code=status.HTTP_201_CREATED)

    @app.get("/deployment/", dependencies=auth, summary="LIST: every model being scaled")
    def list_targets() -> list[dict[str, Any]]:
        return controller.views()

    @app.get(
        "/deployment/{model_id}/",
        dependencies=auth,
        summary="READ: replicas, current metric values and the last decisions with their reasons",
        responses={404: {"description": "no such model"}},
    )
    def read(model_id: str) -> dict[str, Any]:
        view = controller.view(model_id)
        if view is None:
            hint = "POST /deployment/ registers one"
            raise HTTPException(404, f"no scaling target for model {model_id!r}; {hint}")
        return view

    @app.delete(
        "/deployment/{model_id}/",
        dependencies=auth,
        summary="DELETE: stop scaling a model (its replicas stay as they are)",
        responses={404: {"description": "no such model"}, 409: {"description": "the config file owns it"}},
    )
    def delete(model_id: str) -> dict[str, Any]:
        try:
            removed = controller.unregister(model_id)
        except TargetConflict as e:
            raise HTTPException(409, str(e)) from e
        if not removed:
            raise HTTPException(404, f"no scaling target for model {model_id!r}")
        return {"model_id": model_id, "deleted": True}

    @app.get("/healthz", summary="Liveness; says whether this replica leads")
    def healthz() -> dict[str, Any]:
        leading = controller.elector.leading if controller.elector else True
        return {"status": "ok", "leader": leading}

    schema = app.openapi()
    schema.setdefault("components", {}).setdefault("schemas", {}).update(_component_schemas())
    return app
