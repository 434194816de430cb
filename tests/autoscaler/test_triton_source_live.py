"""The ``triton`` metric backend against a real tritonserver serving this project's model: Triton's own
``nv_inference_*`` counters and gauge read through the scraper and the windows, and the model scaled
in place on queue time alone.

On this model Triton's queue time is the wait in front of ``execute()``, which hands each request to
the engine thread and returns (docs/backends.md): it grows when requests arrive together faster than
``execute()`` takes them, not with the engine's own queue. A burst of simultaneous requests makes it.
"""

from __future__ import annotations

import math
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.actuate.triton import TritonInstanceScaler
from autoscaler.collect.backends import BACKENDS, detect
from autoscaler.collect.direct import DirectSource, StaticTargets
from autoscaler.config import RateLimit, ScalerSpec, Signal
from autoscaler.loop import Controller
from autoscaler.telemetry import Telemetry
from nlg_demo.load import PoissonLoad
from nlgsim.workload import SIMPLE
from triton_backend.launch import TritonServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def triton():
    extra = ["--model-control-mode=explicit", "--load-model=gpt2"]
    with TritonServer(env={"NLG_PRESET": "tiny"}, extra_args=extra) as server:
        yield server


def target(server) -> str:
    return server.metrics_url.removeprefix("http://").removesuffix("/metrics")


def burst(load: PoissonLoad, count: int) -> list:
    """``count`` requests sent at once, each on its own thread; their records once all finished."""
    records: list = []
    threads = [threading.Thread(target=lambda: records.append(load.send(SIMPLE, max_tokens=4))) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return records


def test_tritons_own_metrics_of_a_real_server_through_the_windows(triton):
    source = DirectSource(StaticTargets([target(triton)]), timeout=2.0, stale_after=30.0, backend="triton")
    load = PoissonLoad(triton.grpc_url, rate=1.0)
    try:
        source.read(0.0, "gpt2", 60)
        records = [load.send(SIMPLE, max_tokens=8) for _ in range(3)]
        for now in range(1, 40):
            window = source.read(float(now), "gpt2", 60)
            if window.latency("request").count == 3:
                break
            time.sleep(0.05)
    finally:
        load.join()
        source.close()
    assert all(r.complete for r in records), [r.error for r in records]
    request, queue = window.latency("request"), window.latency("queue")
    assert (request.count, queue.count) == (3, 3)
    assert 0 < queue.mean < request.mean < 5.0
    assert math.isnan(queue.p99)  # a counter's mean: no quantiles
    assert window.gauges == {"waiting": 0.0}  # nv_inference_pending_request_count, nothing pending now
    assert "pertoken" not in window.latencies


def test_a_real_page_of_this_model_is_detected_as_nlg(triton):
    import httpx

    page = httpx.get(triton.metrics_url).text
    assert detect(page, "gpt2") is BACKENDS["nlg"]
    assert detect(page.replace("nlg_", "other_"), "gpt2") is BACKENDS["triton"]


def calm_queue_ms(server, load: PoissonLoad) -> tuple[float, list]:
    """Triton's mean queue time (ms) of CALM requests sent one by one, and their records: what one
    request waits in front of ``execute()`` on this machine now, whatever its speed and load."""
    source = DirectSource(StaticTargets([target(server)]), timeout=2.0, stale_after=30.0, backend="triton")
    try:
        source.read(0.0, "gpt2", 600)
        records = [load.send(SIMPLE, max_tokens=4) for _ in range(CALM)]
        for now in range(1, 40):
            window = source.read(float(now), "gpt2", 600)
            if window.latency("queue").count >= CALM:
                break
            time.sleep(0.05)
    finally:
        source.close()
    return window.latency("queue").mean * 1000, records


#: Requests sent one by one for the calm baseline, and at once for the burst.
CALM, BURST = 8, 96
#: The queue-time target as a multiple of the calm baseline. A burst of BURST requests waits behind up
#: to BURST - 1 calls of execute() each, a calm request behind none: its mean grows with the burst
#: while the calm one stays what the machine's scheduling costs, slow machine or fast.
OVER_CALM = 3.0


@pytest.mark.e2e
def test_the_triton_source_scales_the_model_on_queue_time(triton):
    interval = 1.0
    load = PoissonLoad(triton.grpc_url, rate=1.0)
    try:
        calm_ms, one_by_one = calm_queue_ms(triton, load)
    except BaseException:
        load.join()
        raise
    queue_target = OVER_CALM * calm_ms
    # Request latency cannot drive it (an hour's target); queue time over the target does.
    spec = ScalerSpec(
        type="request", threshold=3_600_000.0, time_window=5.0, stabilization_window=60.0,
        min_deployment_count=1, max_deployment_count=2,
        signals=(Signal(metric="queue_mean", target=queue_target),),
        scale_up=RateLimit(1, 0, interval), scale_down=RateLimit(1, 0, interval),
    )  # fmt: skip
    source = DirectSource(StaticTargets([target(triton)]), timeout=2.0, stale_after=3 * interval, backend="triton")
    actuator = TritonInstanceScaler(f"http://{triton.http_url}", triton.metrics_url, load_timeout=60, load_wait=60)
    ctl = Controller(source, actuator, Telemetry(CollectorRegistry()), source_kind="direct")
    ctl.targets.set_config_target("gpt2", spec, "gpt2")
    rounds: list[tuple[dict, dict]] = []  # (newest decision, the values it used) per round

    def round_() -> None:
        ctl.run_once()
        view = ctl.targets.view("gpt2")
        rounds.append((view["decisions"][0], view["metrics"]))

    try:
        round_()
        records: list = []
        # Rounds go on during the burst: a pod unseen for a whole window starts afresh from its next
        # sample, so a round only after the burst would see no increase at all.
        sender = threading.Thread(target=lambda: records.extend(burst(load, BURST)))
        sender.start()
        deadline = time.time() + 60
        while time.time() < deadline and actuator.observe("gpt2").replicas < 2:
            round_()
            time.sleep(interval)
        sender.join(120)
        replicas = actuator.observe("gpt2").replicas
        if replicas != 1:  # leave the module's server as it was
            actuator.scale("gpt2", 1, replicas)
    finally:
        load.join()
        source.close()
        actuator.close()
    assert all(r.complete for r in one_by_one + records), [r.error for r in records if not r.complete]
    assert calm_ms > 0, calm_ms
    assert replicas == 2, (calm_ms, [(d["reason"], m) for d, m in rounds])
    scaled, values = next((d, v) for d, v in rounds if d["desired"] == 2)
    assert values["queue_mean"] > queue_target, (scaled, values)
    assert "queue_mean" in scaled["reason"]
