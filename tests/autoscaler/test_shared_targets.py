"""Targets kept in the cluster: two autoscaler replicas, one ConfigMap, one Lease, a failover.

Two :class:`~autoscaler.app.App` instances ("a" and "b", as two pods of the chart with
``autoscaler.replicas: 2``) talk to the test's own API server over real HTTP with the official
client; their rounds run on one fake clock, their REST APIs in process (one e2e test runs both
whole, on real ports and threads). The API server keeps resourceVersions and answers a stale
write 409, as kube-apiserver does.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from autoscaler_testkit import FakeClock, Partition, PodMetrics, free_port
from fake_apiserver import FakeApiServer
from fastapi.testclient import TestClient
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from autoscaler.actuate.kubernetes import REPLICAS_ANNOTATION
from autoscaler.api import create_app
from autoscaler.app import App
from autoscaler.backoff import Backoff, Retries
from autoscaler.config import ConfigError, Registration, parse_config
from autoscaler.kube import new_client
from autoscaler.target_store import ConfigMapStore, MemoryStore, StoreUnavailable, encode
from autoscaler.targets import TargetConflict, Targets
from autoscaler.telemetry import Telemetry

pytestmark = pytest.mark.integration

DOCS = Path(__file__).parents[2] / "docs" / "autoscaler.md"
STORE = "nlg-autoscaler-targets"
INTERVAL = 2.0  # s: each call to the API server may take half of it, room on a loaded machine
LEASE = 6.0  # s; renew deadline 4 s
BERT = {"model_id": "bert", "deployment": "bert",
        "scaler": {"type": "pertoken", "threshold": 25, "time_window": 10, "max_deployment_count": 4}}  # fmt: skip


@pytest.fixture
def cluster():
    with FakeApiServer() as server:
        server.add_config_map(STORE)  # the chart creates it
        server.add_deployment("triton", replicas=1)
        server.add_deployment("bert", replicas=1)
        yield server


@pytest.fixture
def pods():
    gpt2, bert = PodMetrics("gpt2"), PodMetrics("bert")
    yield gpt2, bert
    gpt2.stop()
    bert.stop()


def config(pods, **extra):
    return parse_config({
        "model_id": "gpt2",
        "source": {"kind": "direct", "static_targets": [p.target for p in pods], "timeout": 1.0},
        "actuator": {"kind": "kubernetes", "deployment": "triton"},
        "leader_election": {"enabled": True, "lease_duration": LEASE},
        "target_store": {"kind": "configmap", "configmap": STORE},
        "loop": {"interval": INTERVAL}, "metrics": {"port": 0}, **extra,
    })  # fmt: skip


class Replica:
    """One autoscaler pod: its App (not started: the test runs its rounds) and its REST API."""

    def __init__(self, name: str, cluster: FakeApiServer, pods, clock: FakeClock, url: str = "") -> None:
        kube = new_client(k8s.Configuration(host=url or cluster.url))
        self.app = App(config(pods), kube=kube, identity=name, clock=clock)
        self.api = TestClient(create_app(self.app.controller, "token", retry_after=INTERVAL))
        self.api.headers["Authorization"] = "Bearer token"

    @property
    def targets(self):
        return self.app.controller.targets

    def round(self) -> list[str]:
        return self.app.controller.run_once()

    def stop(self) -> None:
        self.api.close()
        self.app.stop()


@pytest.fixture
def replicas(cluster, pods):
    clock = FakeClock()
    made: list[Replica] = []

    def make(name: str, url: str = "") -> Replica:
        made.append(Replica(name, cluster, pods, clock, url))
        return made[-1]

    a, b = make("a"), make("b")
    a.round()
    b.round()
    assert (a.app.controller.elector.leading, b.app.controller.elector.leading) == (True, False)
    yield a, b, clock, make
    for replica in made:
        replica.stop()


def scale_up_bert(replica: Replica, clock: FakeClock, bert: PodMetrics) -> None:
    """Two rounds with bert's pod at 100 ms per token against a 25 ms threshold."""
    replica.round()
    bert.running.set(1)
    bert.serve(0.100, n=5)
    clock.advance(0.5)
    assert replica.round() == []


def test_a_target_registered_on_the_leader_is_stored_and_read_by_the_standby(replicas, cluster):
    a, b, clock, _ = replicas
    created = a.api.post("/deployment/", json=BERT)
    assert created.status_code == 201, created.text
    stored = json.loads(cluster.data(STORE)["bert"])
    assert stored["deployment"] == "bert" and stored["scaler"]["threshold"] == 25.0
    assert b.api.get("/deployment/bert/").status_code == 404  # not read yet
    clock.advance(0.5)
    b.round()
    assert b.api.get("/deployment/bert/").json()["origin"] == "api"


def test_a_target_survives_the_leaders_stop_and_the_standby_scales_it(replicas, cluster, pods):
    a, b, clock, _ = replicas
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    a.stop()  # releases the Lease: the standby leads from its next round
    clock.advance(0.5)
    scale_up_bert(b, clock, pods[1])
    assert b.app.controller.elector.leading
    assert cluster.replicas("bert") == 4
    assert b.api.get("/deployment/bert/").json()["replicas"] == {"current": 4, "desired": 4}


def test_a_target_survives_a_crash_of_the_leader(replicas, cluster, pods):
    a, b, clock, _ = replicas
    assert a.api.put("/deployment/bert/", json=BERT).status_code == 201
    # a dies without releasing the Lease: b takes it once it has not changed for a lease duration.
    for _ in range(int(LEASE / 0.5) + 1):
        clock.advance(0.5)
        b.round()
    assert b.app.controller.elector.leading
    scale_up_bert(b, clock, pods[1])
    assert cluster.replicas("bert") == 4


def test_a_target_survives_a_restart(replicas, cluster):
    a, b, clock, make = replicas
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    a.stop()
    b.stop()
    again = make("a")
    clock.advance(0.5)
    again.round()
    assert again.api.get("/deployment/bert/").json()["scaler"]["threshold"] == 25.0


def test_the_standby_refuses_writes_naming_the_leader_and_answers_reads(replicas):
    a, b, clock, _ = replicas
    for method, path in (("post", "/deployment/"), ("put", "/deployment/bert/"), ("delete", "/deployment/bert/")):
        kwargs = {} if method == "delete" else {"json": BERT}
        answer = getattr(b.api, method)(path, **kwargs)
        assert answer.status_code == 503, (method, answer.text)
        assert answer.headers["Retry-After"] == "2"
        assert answer.json()["detail"]["leader"] == "a"
        assert "this replica ('b') is a standby" in answer.json()["detail"]["error"]
    assert b.api.post("/deployment/", json=BERT, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    clock.advance(0.5)
    b.round()
    assert [v["model_id"] for v in b.api.get("/deployment/").json()] == ["gpt2", "bert"]
    assert b.api.get("/healthz").json() == {"status": "ok", "leader": False}


@pytest.fixture
def cut_off_leader(cluster, pods):
    """Replicas "a" (the leader, reaching the API server through a link the test cuts) and "b"."""
    clock = FakeClock()
    link = Partition(cluster.url.removeprefix("http://"))
    a, b = Replica("a", cluster, pods, clock, link.url), Replica("b", cluster, pods, clock)
    a.round()
    b.round()
    assert (a.app.controller.elector.leading, b.app.controller.elector.leading) == (True, False)
    yield a, b, clock, link
    link.cut.clear()
    for replica in (a, b):
        replica.stop()
    link.close()


def leader_named(answer: httpx.Response) -> str | None:
    assert answer.status_code == 503, answer.text
    leader: str | None = answer.json()["detail"]["leader"]
    return leader


def test_a_leader_cut_off_names_itself_until_its_renew_deadline_then_never(cut_off_leader, cluster):
    """Its renewal fails; it leads on by its own clock until the renew deadline (4 s of the 6 s
    lease), and its store errors say so. From the deadline on it never names itself, though the
    Lease still does, until it reads the Lease again and names the replica that took it over."""
    a, b, clock, link = cut_off_leader
    renewed = clock.now
    deadline = renewed + a.app.controller.elector.renew_deadline
    link.cut.set()
    clock.advance(1.0)
    a.round()  # the renewal times out: still leading (its next round is before the deadline)
    assert a.app.controller.elector.leading
    store_error = a.api.post("/deployment/", json=BERT)
    assert leader_named(store_error) == "a"
    assert store_error.json()["detail"]["error"].startswith(f"cannot read the targets in configmap default/{STORE}")
    assert a.api.get("/healthz").json()["leader"] is True

    clock.now = deadline  # no round since: by its own clock it leads no more
    standby = a.api.post("/deployment/", json=BERT)
    assert leader_named(standby) is None
    assert "this replica ('a') is a standby" in standby.json()["detail"]["error"]
    assert "no leader is known (cannot read lease default/" in standby.json()["detail"]["error"]
    a.round()  # steps down
    assert not a.app.controller.elector.leading
    assert cluster.objects["leases", "default", "nlg-autoscaler"]["spec"]["holderIdentity"] == "a"
    assert leader_named(a.api.delete("/deployment/bert/")) is None

    clock.now = renewed + LEASE + 0.5  # b saw the Lease last change at `renewed`: it takes over
    b.round()
    assert b.app.controller.elector.leading
    assert leader_named(a.api.put("/deployment/bert/", json=BERT)) is None  # a cannot read who
    link.cut.clear()
    clock.advance(0.5)
    a.round()
    assert leader_named(a.api.put("/deployment/bert/", json=BERT)) == "b"
    assert b.api.put("/deployment/bert/", json=BERT).status_code == 201


def test_after_failovers_the_leader_counts_only_a_persons_change_as_made_outside(cut_off_leader, cluster, pods):
    """a leads and sees bert at 1; cut off, it loses the Lease to b, which scales bert to 4; b stops and
    a leads again. The 4 is recorded on the Deployment as the autoscaler's, so a takes it as its
    predecessor's, not as a change made outside; a person's change after that is one."""
    a, b, clock, link = cut_off_leader
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    clock.advance(0.5)
    assert a.round() == []
    assert a.targets.view("bert")["replicas"]["current"] == 1
    link.cut.set()
    clock.advance(0.5)
    b.round()  # sees a's last renewal
    clock.advance(LEASE + 0.1)  # and no change of the Lease since: b takes it over
    b.round()
    assert b.app.controller.elector.leading
    scale_up_bert(b, clock, pods[1])
    assert cluster.replicas("bert") == 4
    assert cluster.annotations("deployments", "bert") == {REPLICAS_ANNOTATION: "4"}
    a.round()  # past its renew deadline, and the Lease is b's now
    assert not a.app.controller.elector.leading
    link.cut.clear()
    b.stop()  # releases the Lease
    clock.advance(0.5)
    pods[1].serve(0.025, n=5)  # on target: nothing to change
    a.round()
    assert a.app.controller.elector.leading
    external = 'nlg_autoscaler_external_changes_total{model="bert"}'
    assert a.targets.view("bert")["replicas"]["current"] == 4
    assert sample(a, external) == 0
    cluster.objects["deployments", "default", "bert"]["spec"]["replicas"] = 2  # kubectl scale
    clock.advance(0.5)
    a.round()
    assert sample(a, external) == 1


def sample(replica: Replica, series: str) -> float:
    """One sample of the replica's registry, named as the exposition writes it: ``name{label="value"}``."""
    name, _, labels = series.partition("{")
    pairs = dict(p.split("=") for p in labels.rstrip("}").split(",")) if labels else {}
    value = replica.app.registry.get_sample_value(name, {k: v.strip('"') for k, v in pairs.items()})
    return value or 0.0


def test_a_conflicting_target_posted_to_the_other_replica_is_refused(replicas):
    a, b, clock, _ = replicas
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    other = {**BERT, "model_id": "bert-large"}  # the same Deployment
    assert b.api.post("/deployment/", json=other).status_code == 503  # standby: a takes writes
    a.stop()
    clock.advance(0.5)
    b.round()
    refused = b.api.post("/deployment/", json=other)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        "'bert' is already scaled for model 'bert' (api); two targets would undo each other's replicas"
    )


def test_conflicts_are_checked_against_the_stored_set_not_what_this_replica_read(replicas, cluster):
    a, _, _, _ = replicas
    # Another replica stored bert since a's last round (a has not read it).
    registration = Registration(model_id="bert", deployment="bert")
    cluster.add_config_map(STORE, {"bert": encode(registration)})
    assert a.targets.view("bert") is None
    refused = a.api.put("/deployment/bert-large/", json={**BERT, "model_id": "bert-large"})
    assert refused.status_code == 409, refused.text
    assert a.api.post("/deployment/", json=BERT).json()["detail"].startswith("model 'bert' is already registered")


def test_a_write_that_raced_another_is_worked_out_again_on_the_new_set(cluster):
    """Two stores on one ConfigMap: the second writes between the first's read and write."""
    api = k8s.CoreV1Api(new_client(k8s.Configuration(host=cluster.url)))
    first, second = ConfigMapStore(api, STORE, "default"), ConfigMapStore(api, STORE, "default")
    x, y = Registration(model_id="x"), Registration(model_id="y")
    seen: list[set[str]] = []

    def add_y(stored):
        seen.append(set(stored))
        if len(seen) == 1:
            second.update(lambda s: {**s, "x": x})
        return {**stored, "y": y}

    assert first.update(add_y) == {"x": x, "y": y}
    assert seen == [set(), {"x"}]  # refused once (409), then worked out on the set holding x
    assert set(cluster.data(STORE)) == {"x", "y"}
    writes = [path for method, path in cluster.requests if method == "PATCH"]
    assert len(writes) == 3  # second's, first's refused one, first's retry


class Waits:
    """A store's clock and sleep in a test: sleeping moves the fake clock, and each wait is kept."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)


def waiting_store(cluster, waits: Waits, budget: float = INTERVAL, draw=lambda: 0.5) -> ConfigMapStore:
    api = k8s.CoreV1Api(new_client(k8s.Configuration(host=cluster.url)))
    return ConfigMapStore(api, STORE, "default", budget=budget, clock=waits.clock, sleep=waits.sleep, draw=draw)


def test_a_conflict_storm_is_retried_after_growing_jittered_waits(cluster):
    waits = Waits()
    store = waiting_store(cluster, waits)
    cluster.storm("configmaps", STORE, writes=5)  # someone else writes before each of our next 5
    x = Registration(model_id="x")
    assert store.update(lambda s: {**s, "x": x}) == {"x": x}
    # 10 ms doubling, each stretched by the jitter's draw (0.5 here: half as long again).
    assert waits.slept == pytest.approx([0.015, 0.03, 0.06, 0.12, 0.15])
    assert [method for method, _ in cluster.requests].count("PATCH") == 6
    assert set(cluster.data(STORE)) == {"x"}


@pytest.mark.parametrize(("retry", "draw", "want"), [(1, 0.0, 0.01), (1, 0.999, 0.01999), (3, 0.0, 0.04),
                                                     (5, 0.0, 0.1), (20, 0.5, 0.15)])  # fmt: skip
def test_each_wait_doubles_up_to_its_cap_and_the_jitter_stretches_it(retry, draw, want):
    assert Backoff().delay(retry, draw) == pytest.approx(want)


def test_the_jitter_draws_differ_between_writers():
    """Two writers that collided wait differently: the draws are random, not a fixed schedule."""
    first = Retries(10.0, clock=FakeClock())
    second = Retries(10.0, clock=FakeClock())
    waits = [(first.next_wait(), second.next_wait()) for _ in range(4)]
    assert any(a != b for a, b in waits)
    assert all(0.01 * 2**i <= w < 0.02 * 2**i for i, pair in enumerate(waits) for w in pair)


def test_a_storm_that_outlasts_the_budget_is_a_503_with_retry_after(replicas, cluster):
    a, _, _, _ = replicas
    assert a.targets.store.budget == INTERVAL  # the App gives a write one loop interval
    waits = Waits()
    a.targets.store = waiting_store(cluster, waits)
    cluster.storm("configmaps", STORE)
    answer = a.api.post("/deployment/", json=BERT)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "2"
    assert answer.json()["detail"] == {
        "error": f"cannot write the targets to configmap default/{STORE}: another writer changed it before each "
                 "of 16 writes in 1.9 s (409 Conflict); try again",
        "leader": "a",
    }  # fmt: skip
    # 15 ms, 30, 60, 120, then the cap's 150 ms: a 16th wait and write would end past the 2 s budget.
    assert waits.slept == pytest.approx([0.015, 0.03, 0.06, 0.12] + [0.15] * 11)
    assert sum(waits.slept) <= INTERVAL
    assert cluster.data(STORE) == {}


@pytest.mark.e2e
def test_puts_succeed_while_an_operator_patches_the_configmap_200_times_a_second(replicas, cluster):
    """The field report's storm, on real clocks: a script merge-patches the ConfigMap every 5 ms while
    PUTs go to the leader; each PUT retries its conflicts within its budget."""
    a, _, _, _ = replicas
    puts = 64
    operator = k8s.CoreV1Api(new_client(k8s.Configuration(host=cluster.url)))
    stop = threading.Event()
    patched = 0

    def patch_forever() -> None:
        nonlocal patched
        while not stop.is_set():
            body = {"metadata": {"annotations": {"example.com/touched": str(patched)}}}
            operator.patch_namespaced_config_map(STORE, "default", body, _content_type="application/merge-patch+json")
            patched += 1
            stop.wait(0.005)

    thread = threading.Thread(target=patch_forever)
    thread.start()
    started = time.monotonic()
    try:
        answers = [a.api.put(f"/deployment/m{i}/", json={**BERT, "model_id": f"m{i}", "deployment": f"m{i}"})
                   for i in range(puts)]  # fmt: skip
    finally:
        stop.set()
        thread.join()
    took = time.monotonic() - started
    codes = [r.status_code for r in answers]
    refused = [r.json()["detail"]["error"] for r in answers if r.status_code == 503]
    print(f"operator patches: {patched} in {took:.1f} s; PUTs: {codes.count(201)} stored, {len(refused)} 503")
    # What a storm faster than a read and a write cannot always win is answered as the API promises:
    # 503 with Retry-After and the reason, within the budget, nothing half-written.
    assert set(codes) <= {201, 503}
    # The budget's end: conflicts all along, or the last attempt's call cut at it (MIN_CALL past it at most).
    ended = re.compile(r"before each of \d+ writes in (1\.\d|2\.[01]) s \(409 Conflict\)|did not answer within 0\.")
    assert all(ended.search(e) for e in refused), refused
    assert all(r.headers["Retry-After"] == "2" for r in answers if r.status_code == 503)
    assert set(cluster.data(STORE)) == {f"m{i}" for i, code in enumerate(codes) if code == 201}
    assert codes.count(201) > 0


@pytest.mark.e2e
def test_health_answers_while_a_write_waits_out_a_storm(cluster, pods):
    """The running service: a write retrying conflicts for its budget holds no one else up."""
    port = free_port()
    app = App(config(pods, loop={"interval": 2.0}, api={"port": port, "auth": "none"}),
              kube=new_client(k8s.Configuration(host=cluster.url)), identity="a")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        app.start()
        deadline = time.monotonic() + 10
        while not httpx.get(f"{url}/healthz").json()["leader"]:
            assert time.monotonic() < deadline, "a never led"
            time.sleep(0.05)
        cluster.storm("configmaps", STORE)
        answers: list[httpx.Response] = []
        post = lambda: answers.append(httpx.post(f"{url}/deployment/", json=BERT, timeout=10))  # noqa: E731
        writer = threading.Thread(target=post)
        writer.start()
        time.sleep(0.3)  # the write is waiting between its retries now
        assert writer.is_alive()
        assert httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200
        writer.join()
        assert answers[0].status_code == 503 and "409 Conflict" in answers[0].json()["detail"]["error"]
    finally:
        app.stop()


class RacingStore:
    """A store that lets ``meanwhile`` write once, between its first read of the set and its write."""

    def __init__(self, inner, meanwhile) -> None:
        self.inner, self.meanwhile, self.where = inner, meanwhile, inner.where

    def read(self):
        return self.inner.read()

    def update(self, change):
        def racing(stored):
            if self.meanwhile is not None:
                self.meanwhile, meanwhile = None, self.meanwhile
                meanwhile()
            return change(stored)

        return self.inner.update(racing)


def test_a_race_for_one_deployment_is_decided_by_the_store(replicas, cluster):
    """Two replicas storing targets for one Deployment at once: the write based on the older set is
    refused (409), worked out again on the new set, and refused as a conflict."""
    a, b, _, _ = replicas
    a.targets.store = RacingStore(a.targets.store, lambda: b.targets.register(Registration("bert", deployment="bert")))
    with pytest.raises(TargetConflict, match="'bert' is already scaled for model 'bert' \\(api\\)"):
        a.targets.register(Registration(model_id="bert-large", deployment="bert"))
    assert set(cluster.data(STORE)) == {"bert"}
    assert [method for method, _ in cluster.requests].count("PATCH") == 2  # b's, and a's refused one


def test_api_server_down_writes_are_503_and_the_loop_keeps_the_targets_it_read(replicas, cluster, caplog):
    a, _, clock, _ = replicas
    assert a.api.post("/deployment/", json=BERT).status_code == 201
    registry = a.app.registry
    cluster.stop()
    for method, path in (("post", "/deployment/"), ("delete", "/deployment/bert/")):
        kwargs = {} if method == "delete" else {"json": {**BERT, "model_id": "t5", "deployment": "t5"}}
        answer = getattr(a.api, method)(path, **kwargs)
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "2"
        assert answer.json()["detail"]["error"] == (
            f"cannot read the targets in configmap default/{STORE}: Kubernetes API unreachable (Connection refused)"
        )
    clock.advance(0.5)
    with caplog.at_level(logging.WARNING, logger="autoscaler.targets"):
        errors = a.round()
    assert a.app.controller.elector.leading  # within its renew deadline
    assert f"targets: cannot read the targets in configmap default/{STORE}" in " ".join(errors)
    assert "keeping the 2 targets read before until it can be read" in caplog.text
    assert registry.get_sample_value("nlg_autoscaler_targets_stale") == 1
    assert registry.get_sample_value(documented_counter("the stored targets")) == 1
    assert a.targets.view("bert") is not None  # kept, not dropped
    assert cluster.replicas("bert") == 1  # and nothing scaled blind: the actuator cannot read either
    cluster.start()
    clock.advance(0.5)
    a.round()
    assert registry.get_sample_value("nlg_autoscaler_targets_stale") == 0
    assert a.targets.view("bert") is not None


def test_a_missing_configmap_is_a_503_that_says_how_to_create_it(replicas, cluster):
    a, _, _, _ = replicas
    del cluster.objects["configmaps", "default", STORE]
    answer = a.api.post("/deployment/", json=BERT)
    assert answer.status_code == 503
    assert answer.json()["detail"]["error"].endswith(
        f"(the chart creates it; without the chart: kubectl create configmap {STORE} -n default)"
    )


def test_a_hand_edited_key_that_does_not_parse_scales_nothing_and_is_kept(replicas, cluster, caplog):
    a, _, clock, _ = replicas
    cluster.add_config_map(STORE, {"bert": "{not json", "t5": json.dumps({"model_id": "other"})})
    with caplog.at_level(logging.WARNING, logger="autoscaler.target_store"):
        clock.advance(0.5)
        a.round()
        clock.advance(0.5)
        a.round()
    assert [v["model_id"] for v in a.targets.views()] == ["gpt2"]
    assert caplog.text.count("key 'bert' skipped: not JSON") == 1  # once, not once per round
    assert "key 't5' skipped: it holds model_id 'other'" in caplog.text
    assert a.api.post("/deployment/", json={**BERT, "model_id": "gpt-j", "deployment": "gpt-j"}).status_code == 201
    assert set(cluster.data(STORE)) == {"bert", "t5", "gpt-j"}  # what it could not read is left as it was


def test_a_model_id_that_cannot_be_a_configmap_key_is_a_named_422(replicas, cluster):
    a, _, _, _ = replicas
    answer = a.api.post("/deployment/", json={**BERT, "model_id": ".."})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"]["errors"] == [
        f"model_id = '..': cannot be a key of configmap default/{STORE}; use letters, digits, '_', '-' "
        "and at least one of them"
    ]
    assert cluster.data(STORE) == {}


def test_the_store_error_is_one_kind(cluster):
    cluster.stop()
    api = k8s.CoreV1Api(new_client(k8s.Configuration(host=cluster.url)))
    with pytest.raises(StoreUnavailable, match="Kubernetes API unreachable"):
        ConfigMapStore(api, STORE, "default", timeout=0.5).update(lambda s: s)


class OvertakenReadStore:
    """A memory store whose read returns the set as it was before ``meanwhile`` wrote."""

    where = "memory"

    def __init__(self) -> None:
        self.inner, self.meanwhile = MemoryStore(), None

    def read(self):
        before = self.inner.read()
        if self.meanwhile is not None:
            self.meanwhile, meanwhile = None, self.meanwhile
            meanwhile()
        return before

    def update(self, change):
        return self.inner.update(change)


def test_a_round_that_read_the_set_before_an_api_write_does_not_undo_it():
    store = OvertakenReadStore()
    targets = Targets(Telemetry(CollectorRegistry()), store=store)
    store.meanwhile = lambda: targets.register(Registration(model_id="bert"))
    assert targets.sync() is True
    assert targets.view("bert") is not None  # the read without bert came before the write
    targets.sync()
    assert [v["model_id"] for v in targets.views()] == ["bert"]


def documented_counter(failure: str) -> str:
    """The counter docs/autoscaler.md's failure table names for the row starting with ``failure``."""
    for row in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if row.startswith("|") and cells[0].startswith(failure):
            return cells[1].strip("`")
    raise AssertionError(f"no row for {failure!r} in the docs' failure table")


def test_the_docs_list_every_metric_the_autoscaler_exports():
    families = Telemetry(CollectorRegistry()).registry.collect()
    names = {f.name + ("_total" if f.type == "counter" else "") for f in families}
    text = DOCS.read_text(encoding="utf-8")
    table = text[text.index("## The autoscaler's own metrics") :]
    table = table[: table.index("\n## ")]
    documented = {row.split("`")[1] for row in table.splitlines() if row.startswith("| `")}
    assert documented == names


def test_two_replicas_with_the_api_on_need_a_shared_store():
    with pytest.raises(ConfigError) as error:
        parse_config({"leader_election": {"enabled": True}, "api": {"port": 8080}})
    assert error.value.errors == [
        "target_store.kind = 'memory': with leader_election.enabled and the API on, a target registered "
        "on one replica is unknown to the others; set target_store.kind: configmap"
    ]
    parse_config({"leader_election": {"enabled": True}, "api": {"port": 0}})  # no API: nothing to share


@pytest.mark.e2e
def test_two_running_replicas_hand_a_registered_target_over(cluster, pods, tmp_path):
    """The whole service twice, on real ports and threads: write through the Service's either pod,
    stop the leader, and the standby scales the target."""
    ports = {name: free_port() for name in ("a", "b")}
    apps = {
        name: App(
            # Calls get half the interval: 0.5 s, room on a loaded machine.
            config(pods, loop={"interval": 1.0}, api={"port": port, "auth": "none"}),
            kube=new_client(k8s.Configuration(host=cluster.url)), identity=name,
        )
        for name, port in ports.items()
    }  # fmt: skip
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}

    def wait_for(condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, what
            pods[1].serve(0.100, n=5)  # bert's pod: 100 ms per token against 25 ms
            time.sleep(0.1)

    try:
        apps["a"].start()
        wait_for(lambda: httpx.get(f"{url['a']}/healthz").json()["leader"], 10, "a never led")
        apps["b"].start()
        wait_for(lambda: apps["b"].controller.elector.holder == "a", 10, "b never read the Lease")
        refused = httpx.post(f"{url['b']}/deployment/", json=BERT)
        assert refused.status_code == 503 and refused.json()["detail"]["leader"] == "a", refused.text
        assert httpx.post(f"{url['a']}/deployment/", json=BERT).status_code == 201
        pods[1].running.set(1)
        wait_for(lambda: cluster.replicas("bert") > 1, 15, "the leader never scaled bert")
        apps["a"].stop()  # releases the Lease
        cluster.objects["deployments", "default", "bert"]["spec"]["replicas"] = 1  # a person scales it back
        wait_for(lambda: httpx.get(f"{url['b']}/healthz").json()["leader"], 10, "b never took the Lease")
        wait_for(lambda: cluster.replicas("bert") > 1, 15, "the new leader never scaled bert")
        view = httpx.get(f"{url['b']}/deployment/bert/").json()
        assert view["origin"] == "api" and view["replicas"]["current"] > 1
    finally:
        for app in apps.values():
            app.stop()
