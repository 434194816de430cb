"""The thesis's Table 6.1 REST API: create, read, list, delete; bearer auth; errors; OpenAPI."""

from __future__ import annotations

import json

import pytest
from autoscaler_testkit import FakeClock
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from autoscaler.actuate import RecordingActuator
from autoscaler.api import MAX_BODY_BYTES, MAX_DEPTH, create_app
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
    ctl.targets.set_config_target("gpt2", ScalerSpec(), "gpt2")
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


def test_posting_a_registered_model_again_is_a_conflict_and_put_replaces_it(api):
    assert api.post("/deployment/", json=BODY, headers=AUTH).status_code == 201
    body = {**BODY, "scaler": {**BODY["scaler"], "threshold": 30}}
    again = api.post("/deployment/", json=body, headers=AUTH)
    assert again.status_code == 409
    assert again.json()["detail"] == "model 'gpt2-xl' is already registered: PUT /deployment/gpt2-xl/ replaces it"
    assert api.get("/deployment/gpt2-xl/", headers=AUTH).json()["scaler"]["threshold"] == 25
    replaced = api.put("/deployment/gpt2-xl/", json=body, headers=AUTH)
    assert replaced.status_code == 200
    assert replaced.json()["scaler"]["threshold"] == 30
    created = api.put("/deployment/bert/", json={"scaler": {"threshold": 40}}, headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json()["model_id"] == "bert" and created.json()["scaler"]["threshold"] == 40
    mismatch = api.put("/deployment/bert/", json=BODY, headers=AUTH)
    assert mismatch.status_code == 422
    assert mismatch.json()["detail"]["errors"] == ["model_id = 'gpt2-xl': must match the path's 'bert'"]
    assert api.put("/deployment/gpt2/", json={}, headers=AUTH).status_code == 409  # the config file's


@pytest.mark.parametrize(
    ("body", "holder"),
    [({"model_id": "bert", "deployment": "gpt2"}, "'gpt2' is already scaled for model 'gpt2' (config)"),
     ({"model_id": "gpt2-xl"}, "'gpt2-xl' is already scaled for model 'other' (api)")],
    ids=["config-target", "api-target"],
)  # fmt: skip
def test_a_deployment_scaled_by_another_target_is_refused(api, body, holder):
    """Reported: a second target on the Triton Deployment flipped its replicas 3 -> 1 -> 3 each round."""
    assert api.post("/deployment/", json={"model_id": "other", "deployment": "gpt2-xl"}, headers=AUTH).is_success
    response = api.post("/deployment/", json=body, headers=AUTH)
    assert response.status_code == 409
    assert response.json()["detail"].startswith(holder)
    assert api.get(f"/deployment/{body['model_id']}/", headers=AUTH).status_code in (404, 200)
    assert {v["model_id"] for v in api.get("/deployment/", headers=AUTH).json()} == {"gpt2", "other"}


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


@pytest.mark.parametrize("method", ["post", "delete"])
def test_writes_need_the_token(api, method):
    """Reported: an anonymous POST got 201 and an anonymous DELETE removed a target."""
    assert api.post("/deployment/", json=BODY, headers=AUTH).status_code == 201
    if method == "post":
        response = api.post("/deployment/", json={**BODY, "model_id": "bert"})
    else:
        response = api.delete("/deployment/gpt2-xl/", headers={"Authorization": "Bearer s3cret-tokeN"})
    assert response.status_code == 401
    assert {v["model_id"] for v in api.get("/deployment/", headers=AUTH).json()} == {"gpt2", "gpt2-xl"}


def test_without_a_token_reads_are_open_and_writes_refused(controller):
    with TestClient(create_app(controller, None)) as client:
        assert client.get("/deployment/").status_code == 200
        for response in (client.post("/deployment/", json=BODY), client.put("/deployment/x/", json={}),
                         client.delete("/deployment/gpt2/")):  # fmt: skip
            assert response.status_code == 403
            assert "set api.token_file, or api.auth: none" in response.json()["detail"]
        assert client.get("/deployment/").json()[0]["model_id"] == "gpt2"


def test_auth_none_allows_anonymous_writes(controller):
    with TestClient(create_app(controller, None, auth="none")) as client:
        assert client.post("/deployment/", json=BODY).status_code == 201
        assert client.delete("/deployment/gpt2-xl/").status_code == 200


def test_every_body_error_is_named(api):
    body = {"scaler": {"threshold": -1, "type": "latency", "treshold": 3}, "engine_type": 7}
    response = api.post("/deployment/", json=body, headers=AUTH)
    assert response.status_code == 422
    errors = response.json()["detail"]["errors"]
    assert "model_id: required, the Triton model to scale (e.g. 'gpt2')" in errors
    assert "scaler.threshold = -1.0: must be greater than 0" in errors
    assert "scaler.type = 'latency': must be one of request, pertoken, planner" in errors
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


def nested(depth: int) -> str:
    return '{"model_id": "x", "scaler": {"signals": ' + "[" * (depth - 2) + "]" * (depth - 2) + "}}"


ODD_BODIES = [
    (json.dumps({**BODY, "scaler": {"max_deployment_count": 10**400}}), 422,
     "scaler.max_deployment_count = 1000000000"),
    (json.dumps({**BODY, "scaler": {"threshold": 10**400}}), 422, "scaler.threshold = 1000000000"),
    (json.dumps({**BODY, "scaler": {"threshold": 1e308 * 10}}), 422, "scaler.threshold = inf: must be a finite"),
    ('{"model_id": "x", "scaler": {"threshold": NaN}}', 422, "scaler.threshold = nan: must be a finite"),
    ('{"model_id": ' + "9" * 5000 + "}", 422, "model_id = <an integer of 5000 digits>: must be a string"),
    ('{"model_id": "x", "scaler": {"min_deployment_count": ' + "9" * 5000 + "}}", 422,
     "scaler.min_deployment_count = <an integer of 5000 digits>: must be at most 1000"),
    (json.dumps({**BODY, "model_id": "m" * 10_000}), 422, "model_id = 'mmmmmmmmmmmmmmmmmmmmmmmmmmm...mmmm"),
    (json.dumps({**BODY, "instance_type": "i" * 60_000}), 422, "instance_type = 'iiiiiiiiiiiiiiiiiiiiiiiiiii...iii"),
    (json.dumps({**BODY, "instance_type": "i" * 5_000_000}), 413, f"body: larger than {MAX_BODY_BYTES} bytes"),
    (nested(MAX_DEPTH + 1), 422, f"body: nested deeper than {MAX_DEPTH} levels"),
    ("[" * 50_000 + "]" * 50_000, 413, "body: larger than"),
    ("[" * 30_000 + "]" * 30_000, 422, f"body: nested deeper than {MAX_DEPTH} levels"),
    (json.dumps({"model_id": "x", **{f"k{i}": 1 for i in range(5000)}}), 422, "k0: unknown key"),
    (b'{"model_id": "gpt\xff"}'.decode("unicode_escape").encode("latin-1"), 422, "body: not JSON"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "status", "message"),
    ODD_BODIES,
    ids=["count-10e400", "threshold-10e400", "threshold-inf", "nan", "5000-digits", "count-5000-digits", "model-id-10k",
         "field-60k", "field-5mb", "nesting-9", "nesting-50k", "nesting-30k", "many-keys", "not-utf-8"],
)  # fmt: skip
def test_odd_bodies_are_refused_with_a_named_error_never_a_500(api, content, status, message):
    """Reported: 500s for 10**400 and deep nesting; a 10,000-character model_id and a 5 MB field stored."""
    for method, path in (("POST", "/deployment/"), ("PUT", "/deployment/x/")):
        response = api.request(method, path, content=content, headers={**AUTH, "Content-Type": "application/json"})
        assert response.status_code == status, response.text[:300]
        errors = response.json()["detail"]["errors"]
        assert errors[0].startswith(message) or message in errors[0], errors
        assert len(response.content) < 8000  # at most 50 short messages
    assert [v["model_id"] for v in api.get("/deployment/", headers=AUTH).json()] == ["gpt2"]


def test_the_size_limit_holds_whatever_content_length_says(api):
    def chunks():
        for _ in range(100):
            yield b" " * 1024  # no Content-Length: sent chunked

    response = api.post("/deployment/", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 413
    small = json.dumps(BODY).encode()
    assert len(small) < MAX_BODY_BYTES
    assert api.post("/deployment/", content=small, headers=AUTH).status_code == 201


def test_a_long_model_id_in_the_path_is_not_echoed(api):
    response = api.get("/deployment/" + "m" * 10_000 + "/", headers=AUTH)
    assert response.status_code == 404
    assert len(response.text) < 300


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


def test_the_docs_state_the_limits_the_code_applies():
    from pathlib import Path

    from autoscaler._schema import MAX_MODEL_NAME

    text = (Path(__file__).resolve().parents[2] / "docs" / "autoscaler.md").read_text()
    assert f"a body over {MAX_BODY_BYTES // 1024} KiB is 413" in text
    assert f"nests deeper than {MAX_DEPTH} levels" in text
    assert f"at most {MAX_MODEL_NAME} characters" in text


def test_a_target_may_name_only_the_deployments_the_autoscaler_may_scale(controller):
    with TestClient(create_app(controller, TOKEN, deployments=("gpt2", "gpt2-xl"))) as client:
        refused = client.post("/deployment/", json={**BODY, "model_id": "bert"}, headers=AUTH)
        assert refused.status_code == 422, refused.text
        (error,) = refused.json()["detail"]["errors"]
        assert error.startswith("deployment = 'bert': the autoscaler may scale only 'gpt2', 'gpt2-xl'")
        assert "autoscaler.api.deployments" in error
        renamed = client.put("/deployment/bert/", json={**BODY, "model_id": "bert", "deployment": "gpt2-xl"},
                             headers=AUTH)  # fmt: skip
        assert renamed.status_code == 201, renamed.text
        assert client.get("/deployment/bert/", headers=AUTH).status_code == 200


def test_api_deployments_must_be_kubernetes_names():
    from autoscaler.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as caught:
        parse_config({"model_id": "gpt2", "api": {"deployments": ["ok", "Not_A_Name"]}})
    wanted = "api.deployments[1] = 'Not_A_Name': must be a Kubernetes name"
    assert any(e.startswith(wanted) for e in caught.value.errors)
