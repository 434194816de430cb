"""The demo's pure parts: Table 4.2 queries, the plot, the demo's configuration."""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

import pytest

from autoscaler.demo.load import COMPLEX, SIMPLE, LoadRecord, prompt_of
from autoscaler.demo.plot import Round, plot_run
from autoscaler.demo.run import build_parser, demo_config


@pytest.mark.parametrize("query", [SIMPLE, COMPLEX], ids=["simple", "complex"])
def test_generated_tokens_match_table_4_2(query):
    rng = random.Random(0)
    drawn = [query.draw_max_tokens(rng) for _ in range(20000)]
    assert min(drawn) == query.min_tokens
    assert max(drawn) == query.max_tokens
    assert statistics.mean(drawn) == pytest.approx(query.mean_tokens, abs=0.5)


def test_prompts_have_the_asked_number_of_words():
    assert len(prompt_of(82, random.Random(1)).split()) == 82


def test_per_token_latency_of_a_record():
    record = LoadRecord("simple", start=10.0, max_tokens=20, choices=1, end=10.5, complete=True)
    assert record.per_token_ms == pytest.approx(25.0)
    assert LoadRecord("simple", start=10.0, max_tokens=20, choices=1, end=10.5).per_token_ms is None


def test_plot_is_written(tmp_path):
    rounds = [Round(0, 0.1, 1, 1, None), Round(2, 2.1, 1, 2, 40.0), Round(4, 9.0, 2, 2, 30.0),
              Round(10, 10.1, 2, 1, 0.0), Round(12, 13.0, 1, 1, 0.0)]  # fmt: skip
    records = [
        LoadRecord("simple", 100.5, 30, 1, end=101.0, complete=True),
        LoadRecord("complex", 101.0, 62, 4, end=103.0, complete=True),
        LoadRecord("complex", 101.0, 62, 4, end=104.0, complete=False, error="cut"),
    ]
    path = plot_run(tmp_path / "out" / "demo.png", rounds, records, t0=100.0, threshold_ms=25, load_stopped_at=8)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_demo_config_is_valid_and_scales_one_instance_at_a_time():
    args = build_parser().parse_args(["--max-instances", "3", "--interval", "2"])
    server = SimpleNamespace(metrics_url="http://127.0.0.1:8002/metrics", http_url="127.0.0.1:8000")
    config = demo_config(args, server, threshold=12.5)
    assert config.validate() == []
    assert config.source.static_targets == ("127.0.0.1:8002",)
    assert config.actuator.kind == "triton" and config.actuator.triton_url == "http://127.0.0.1:8000"
    assert config.scaler.threshold == 12.5
    assert (config.scaler.scale_up.max_pods, config.scaler.scale_up.max_percent) == (1, 0)
    assert (config.api.port, config.metrics.port) == (0, 0)
