"""The demo's pure parts: Table 4.2 queries and their mix, the ramp, the plot, the demo's configuration."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nlg_demo.capacity import STEP_S
from nlg_demo.config import demo_config
from nlg_demo.load import MAX_IN_FLIGHT, LoadRecord, PoissonLoad, mix_of
from nlg_demo.plot import Round, Signal, draw, offered, plot_run
from nlg_demo.run import build_parser, reached, served_of

PERTOKEN = Signal("pertoken_mean", "window mean (autoscaler)", 25.0, "target 25 ms (mean)")


@pytest.mark.parametrize(
    ("fraction", "want"),
    [(0.0, (34, 30, 1)), (1.0, (82, 62, 4)), (0.5, (58, (30 + 4 * 62) / 5, 2.5))],
    ids=["all-simple", "all-complex", "half"],
)
def test_mix_of_the_load_weights_tokens_by_choices(fraction, want):
    mix = mix_of(fraction)
    assert (mix.prompt_tokens, mix.output_tokens, mix.choices) == pytest.approx(want)


@pytest.mark.parametrize(
    ("ramp", "elapsed", "want"),
    [(0, 0, 2.0), (0, 100, 2.0), (40, 0, 0.0), (40, 10, 0.5), (40, 40, 2.0), (40, 90, 2.0), (40, -1, 0.0)],
)
def test_the_rate_ramps_linearly_then_holds(ramp, elapsed, want):
    load = PoissonLoad("127.0.0.1:1", rate=2.0, ramp=ramp)
    try:
        assert load.rate_at(elapsed) == pytest.approx(want)
    finally:
        load.join()


class HeldLoad(PoissonLoad):
    """A load whose streams stay open until ``release`` is set (no server), counting how many are open."""

    def __init__(self, max_in_flight: int, shed: bool = False) -> None:
        super().__init__("127.0.0.1:1", rate=500.0, seed=3, max_in_flight=max_in_flight, shed=shed)
        self.release = threading.Event()
        self.open = self.most_open = 0
        self._count_lock = threading.Lock()

    def _send(self, record: LoadRecord, prompt: str) -> None:
        with self._count_lock:
            self.open += 1
            self.most_open = max(self.most_open, self.open)
        self.release.wait(30)
        with self._count_lock:
            self.open -= 1
        record.complete, record.end = True, time.monotonic()


def test_arrivals_beyond_the_streams_in_flight_wait_in_the_client_and_are_all_sent():
    load = HeldLoad(max_in_flight=3).start()
    try:
        deadline = time.monotonic() + 10
        while len(load.records) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        load.stop_arrivals()
        assert load.in_flight >= 12  # every arrival is recorded, waiting: none was dropped at the cap
        assert load.most_open <= 3  # the cap holds the rest in the client
    finally:
        load.release.set()
        load.join()
    assert all(r.complete for r in load.records) and load.most_open <= 3


def test_a_load_that_sheds_drops_the_arrivals_beyond_the_streams_in_flight_and_counts_them():
    load = HeldLoad(max_in_flight=3, shed=True).start()
    try:
        deadline = time.monotonic() + 10
        while load.dropped < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        load.stop_arrivals()
        assert load.dropped >= 5 and len(load.records) == 3  # a dropped arrival leaves no record
    finally:
        load.release.set()
        load.join()
    assert all(r.complete for r in load.records)


def test_the_summary_counts_the_requests_served_of_those_sent_and_the_instances_reached():
    cut = LoadRecord("complex", 1.0, 62, 4, end=3.0, error="cut")
    records = [LoadRecord("simple", 0.0, 30, 1, end=1.0, complete=True)] * 4 + [cut]
    assert served_of(records, measuring=2) == "requests served 4/5 (2 of them measuring capacity), 1 failed or cut"
    rounds = [Round(0, 0.1, 1, 1), Round(2, 2.1, 1, 2), Round(4, 4.1, 3, 3), Round(9, 9.1, 2, 1),
              Round(12, 12.1, 1, 1)]  # fmt: skip
    assert reached(rounds, load_stopped=8.0) == "instances reached 3 under load, 1 at the end"
    assert reached([], None) == "instances reached: no round ran"


def test_per_token_latency_of_a_record():
    record = LoadRecord("simple", start=10.0, max_tokens=20, choices=1, end=10.5, complete=True)
    assert record.per_token_ms == pytest.approx(25.0)
    assert LoadRecord("simple", start=10.0, max_tokens=20, choices=1, end=10.5).per_token_ms is None


RECORDS = [
    LoadRecord("simple", 100.5, 30, 1, end=101.0, complete=True),
    LoadRecord("complex", 101.0, 62, 4, end=103.0, complete=True),
    LoadRecord("complex", 101.0, 62, 4, end=104.0, complete=False, error="cut"),
    LoadRecord("simple", 99.0, 30, 1, end=99.5, complete=True),  # calibration, before the start
]


def test_plot_is_written(tmp_path):
    rounds = [Round(0, 0.1, 1, 1), Round(2, 2.1, 1, 2, {"pertoken_mean": 40.0}),
              Round(4, 9.0, 2, 2, {"pertoken_mean": 30.0}), Round(10, 10.1, 2, 1, {"pertoken_mean": 0.0}),
              Round(12, 13.0, 1, 1, {"pertoken_mean": 0.0})]  # fmt: skip
    path = plot_run(tmp_path / "out" / "demo.png", rounds, RECORDS, t0=100.0, signal=PERTOKEN, load_stopped_at=8)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_the_plot_of_a_policy_without_a_forecast_has_no_demand_panel():
    fig = draw([Round(0, 0.1, 1, 1, {"pertoken_mean": 20.0})], RECORDS, 100.0, PERTOKEN, None, "t")
    assert len(fig.axes) == 2
    assert "window mean (autoscaler)" in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]


def test_offered_load_counts_choices_per_second_in_bins_from_the_start():
    starts, rates = offered(RECORDS, t0=100.0, bin_s=1.0)
    assert starts == [0.0, 1.0]
    assert rates == [1.0, 8.0]  # the simple at 100.5; two complex of 4 choices at 101; not the one at 99


def test_demo_config_is_valid_and_scales_one_instance_at_a_time():
    args = build_parser().parse_args(["--max-instances", "3", "--interval", "2"])
    server = SimpleNamespace(metrics_url="http://127.0.0.1:8002/metrics", http_url="127.0.0.1:8000")
    config = demo_config(args, server, threshold=12.5)
    assert config.validate() == []
    assert config.source.static_targets == ("127.0.0.1:8002",)
    assert config.actuator.kind == "triton" and config.actuator.triton_url == "http://127.0.0.1:8000"
    assert (config.scaler.type, config.scaler.threshold) == ("pertoken", 12.5)
    assert (config.scaler.scale_up.max_pods, config.scaler.scale_up.max_percent) == (1, 0)
    assert (config.api.port, config.metrics.port) == (0, 0)


def test_the_quick_start_states_the_sweep_step_and_the_streams_in_flight_the_code_uses():
    docs = Path(__file__).parents[2] / "docs" / "autoscaler.md"
    text = " ".join(docs.read_text().split())
    assert f"{STEP_S:g} s a step (`--sweep-step`)" in text
    assert f"at most {MAX_IN_FLIGHT} streams are open at once" in text
    assert "The planner's start-up is the reload that adds an instance in place" in text
    assert "`--duration 300` shows them go" in text
