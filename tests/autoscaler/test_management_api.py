"""The thesis's Table 6.1 REST API: create, read, list, delete; bearer auth; errors; OpenAPI."""

from __future__ import annotations

import pytest
from autoscaler_testkit import FakeClock
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from autoscaler.actuate import RecordingActuator
from autoscaler.api import create_app
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.config import ScalerSpec
from autoscaler.loop import Controller
from autoscaler.telemetry import Telemetry

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {
    "instance_type": "g4dn.12xlarge",
    "model_id": "gpt2-xl",
    "engine_type": "triton",
    "scaler": {"min_deployment_count": 1, "max_deployment_count": 4, "type": "pertoken",
               "time_window": 60, "threshold": 25},
}  # fmt: skip


@pytest.fixture
def controller():
    # No pod listens: every read fails, which is what a target without traffic looks like here.
    source = DirectSource(StaticTargets([]), timeout=0.5, stale_after=10)
    ctl = Controller(source, RecordingActuator(initial=2), Telemetry(CollectorRegistry()),
                     source_kind="direct", clock=FakeClock())  # fmt: skip
    ctl.set_config_target("gpt2", ScalerSpec(), "gpt2")
    yield ctl
    source.close()


@pytest.fixture
def api(controller):
    with TestClient(create_app(controller, TOKEN)) as client:
        yield client


def test_create_read_list_delete(api, controller):
    created = api.post("/deployment/", json=BODY, headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json()["model_id"] == "gpt2-xl"
    assert created.json()["instance_type"] == "g4dn.12xlarge"
    assert created.json()["scaler"]["threshold"] == 25
    controller.run_once()
    read = api.get("/deployment/gpt2-xl/", headers=AUTH)
    assert read.status_code == 200
    view = read.json()
    assert view["replicas"] == {"current": 2, "desired": 2}
    assert view["targets"] == {"pertoken_mean": 25.0}
    assert view["decisions"][0]["reason"].startswith("no data for pertoken_mean; holding 2 replicas")
    assert view["decisions"][0]["direction"] == "no_data"
    listed = api.get("/deployment/", headers=AUTH).json()
    assert {v["model_id"] for v in listed} == {"gpt2", "gpt2-xl"}
    assert api.delete("/deployment/gpt2-xl/", headers=AUTH).json() == {"model_id": "gpt2-xl", "deleted": True}
    assert api.get("/deployment/gpt2-xl/", headers=AUTH).status_code == 404
    assert api.delete("/deployment/gpt2-xl/", headers=AUTH).status_code == 404


def test_registering_again_replaces_the_policy(api):
    api.post("/deployment/", json=BODY, headers=AUTH)
    body = {**BODY, "scaler": {**BODY["scaler"], "threshold": 30}}
    assert api.post("/deployment/", json=body, headers=AUTH).json()["scaler"]["threshold"] == 30


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"Authorization": "Bearer wrong"}, 401), ({"Authorization": TOKEN}, 401), (AUTH, 200)],
    ids=["none", "wrong-token", "not-bearer", "right-token"],
)
def test_bearer_token_is_required(api, headers, status):
    response = api.get("/deployment/", headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "api.token_file" in response.json()["detail"]


def test_no_token_means_no_auth(controller):
    with TestClient(create_app(controller, None)) as client:
        assert client.get("/deployment/").status_code == 200


def test_every_body_error_is_named(api):
    body = {"scaler": {"threshold": -1, "type": "latency", "treshold": 3}, "engine_type": 7}
    response = api.post("/deployment/", json=body, headers=AUTH)
    assert response.status_code == 422
    errors = response.json()["detail"]["errors"]
    assert "model_id: required, the Triton model to scale (e.g. 'gpt2')" in errors
    assert "scaler.threshold = -1.0: must be greater than 0" in errors
    assert "scaler.type = 'latency': must be one of request, pertoken" in errors
    assert "scaler.treshold: unknown key; did you mean 'threshold'?" in errors
    assert "engine_type = 7: must be a string" in errors


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"{not json", "body: not JSON"), (b"[1, 2]", "must be a JSON object")],
    ids=["malformed", "not-an-object"],
)
def test_non_object_bodies(api, content, match):
    response = api.post("/deployment/", content=content, headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 422
    assert match in response.json()["detail"]["errors"][0]


def test_the_config_file_target_is_read_only(api):
    assert api.get("/deployment/gpt2/", headers=AUTH).json()["origin"] == "config"
    assert api.post("/deployment/", json={**BODY, "model_id": "gpt2"}, headers=AUTH).status_code == 409
    response = api.delete("/deployment/gpt2/", headers=AUTH)
    assert response.status_code == 409
    assert "config file" in response.json()["detail"]


def test_openapi_document_describes_the_listing_6_1_body(api):
    doc = api.get("/openapi.json").json()
    assert set(doc["paths"]) >= {"/deployment/", "/deployment/{model_id}/", "/healthz"}
    body = doc["paths"]["/deployment/"]["post"]["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["properties"]) >= {"instance_type", "model_id", "engine_type", "scaler"}
    assert body["example"]["scaler"]["type"] == "pertoken"
    assert "ScalerSpec" in doc["components"]["schemas"]
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert api.get("/healthz").json() == {"status": "ok", "leader": True}
