"""The line parser of Triton's exposition against the reference (prometheus-client's parser plus the
old mapping), on a real tritonserver scrape, on the fleet benchmark's pods, and on randomized text
with the odd cases of the format; then the rules where the two differ on purpose."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client import generate_latest

from autoscaler.aggregate import PodSample
from autoscaler.collect.exposition import ExpositionError, gauge_totals, parse_exposition
from benchmarks import fleet_pods
from benchmarks.reference_exposition import reference_parse_exposition


def comparable(sample: PodSample) -> str:
    """The sample as text, where NaN equals NaN (it does not as a float)."""
    histograms = {name: (h.buckets, h.sum, h.count) for name, h in sample.histograms.items()}
    return repr((sorted(histograms.items()), sorted(sample.gauges.items()), sorted(sample.counters.items())))


def same(text: str, model: str) -> None:
    assert comparable(parse_exposition(text, model)) == comparable(reference_parse_exposition(text, model))


def test_a_real_tritonserver_scrape_parses_as_the_reference_does():
    text = fleet_pods.TRITON_SCRAPE.read_text()
    same(text, "gpt2")
    sample = parse_exposition(text, "gpt2")
    assert set(sample.histograms) == {"request", "pertoken", "ttft", "itl"}
    assert set(sample.counters) == {"prompt_tokens", "generation_tokens", "finished"}


@pytest.mark.parametrize("seed", range(5))
def test_the_fleet_benchmarks_pods_parse_as_the_reference_does(seed):
    pod = fleet_pods.FleetPod(seed, random.Random(seed))
    for _ in range(3):
        pod.advance()
        same(pod.exposition(), "gpt2")


def random_exposition(rng: random.Random) -> str:
    """Our families with several versions, instances and models, label values that need escaping or
    hold braces and commas, timestamps, NaN and Inf, untouched families between them."""
    models = ["gpt2", 'we"ird}, model', "other"]
    lines = ["# HELP nv_inference_count Number of inferences", "# TYPE nv_inference_count counter"]
    lines += [f'nv_inference_count{{model="{m}",version="1"}} 3' for m in ("gpt2", "other")]

    def value() -> str:
        return rng.choice(["1", "2.5", "0", "1e3", "NaN", "+Inf", "17", "3"])

    def labels(model: str, **extra: str) -> str:
        escaped = model.replace("\\", "\\\\").replace('"', '\\"')
        pairs = [f'model="{escaped}"', f'version="{rng.randrange(1, 3)}"']
        pairs += [f'{k}="{v}"' for k, v in extra.items()]
        if rng.random() < 0.3:
            pairs.append('note="a}b,\\"c\\" \\\\ d"')
        rng.shuffle(pairs)
        return "{" + ",".join(pairs) + ("," if rng.random() < 0.1 else "") + "}"

    def stamp() -> str:
        return " 1700000000000" if rng.random() < 0.2 else ""

    for family in fleet_pods.HISTOGRAMS:
        lines.append(f"# TYPE {family} histogram")
        for _ in range(rng.randrange(1, 4)):
            model = rng.choice(models)
            for le in ("0.01", "0.1", "1.0", "+Inf"):
                lines.append(f"{family}_bucket{labels(model, le=le)} {value()}{stamp()}")
            lines.append(f"{family}_sum{labels(model)} {value()}")
            lines.append(f"{family}_count{labels(model)} {value()}")
    for family in fleet_pods.GAUGES:
        lines.append(f"# TYPE {family} gauge")
        for i in range(rng.randrange(1, 3)):
            lines.append(f"{family}{labels(rng.choice(models), model_instance=f'i{i}')} {value()}{stamp()}")
    for sample in fleet_pods.COUNTERS:
        lines.append(f"# TYPE {sample.removesuffix('_total')} counter")
        lines.append(f"{sample}{labels(rng.choice(models), finish_reason='stop')} {value()}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_randomized_expositions_parse_as_the_reference_does(seed):
    rng = random.Random(seed)
    text = random_exposition(rng)
    for model in ("gpt2", 'we"ird}, model', "absent"):
        same(text, model)


def test_prometheus_clients_own_exposition_parses_as_the_reference_does():
    from autoscaler_testkit import PodMetrics

    pod = PodMetrics()
    try:
        pod.serve_requests(3, prompt=10, output=5, ttft_s=0.2, pertoken_s=0.03)
        pod.waiting.set(2)
        same(generate_latest(pod.registry).decode(), "gpt2")
    finally:
        pod.stop()


@pytest.mark.parametrize(
    "line",
    [
        'nlg_requests_waiting{model="gpt2" 1',
        'nlg_requests_waiting{model="gpt2"} one',
        'nlg_requests_waiting{model="gpt2"} 1 2 3',
        'nlg_requests_waiting{model="gpt2"} 1 later',
        "nlg_requests_waiting{model=gpt2} 1",
        'nlg_requests_waiting{model="gpt2",,} 1',
        'nlg_requests_waiting{model="gpt2"}',
        'nlg_time_per_output_token_seconds_bucket{model="gpt2",le="fast"} 1',
    ],
    ids=["no-closing-brace", "value", "extra-fields", "timestamp", "unquoted", "double-comma", "no-value", "bad-le"],
)
def test_a_malformed_line_of_a_family_we_read_is_an_error(line):
    with pytest.raises(ExpositionError):
        parse_exposition(f"# TYPE x gauge\nx 1\n{line}\n", "gpt2")


def test_lines_of_other_families_are_not_read_at_all():
    """Where the two parsers differ on purpose: a broken line of a family the policies do not read
    costs nothing and fails nothing (the reference parsed it, and failed the whole scrape)."""
    text = (
        'nv_gpu_utilization{gpu_uuid="GPU-1" 0.5\nnlg_preemptions_total{model="gpt2" 1\n'
        'nlg_requests_waiting{model="gpt2"} 4\n'
    )
    with pytest.raises(ExpositionError):
        reference_parse_exposition(text, "gpt2")
    assert parse_exposition(text, "gpt2").gauges == {"waiting": 4.0}


def test_histograms_are_recognised_by_their_sample_names_without_type_lines():
    """The other difference: prometheus-client files untyped ``_bucket`` lines under a family of that
    name, so the reference missed a histogram whose ``# TYPE`` line was left out."""
    family = "nlg_time_per_output_token_seconds"
    text = "".join(
        f'{family}_{part}{{model="gpt2"{labels}}} {v}\n'
        for part, labels, v in (
            ("bucket", ',le="0.02"', 1),
            ("bucket", ',le="+Inf"', 2),
            ("sum", "", 0.05),
            ("count", "", 2),
        )
    )
    assert reference_parse_exposition(text, "gpt2").histograms == {}
    hist = parse_exposition(text, "gpt2").histograms["pertoken"]
    assert (hist.buckets, hist.sum, hist.count) == (((0.02, 1.0), (math.inf, 2.0)), 0.05, 2.0)


def test_gauge_totals_read_only_the_named_families():
    text = fleet_pods.TRITON_SCRAPE.read_text()
    assert gauge_totals(text, "gpt2", ("nv_inference_pending_request_count", "nlg_requests_running")) == {
        "nv_inference_pending_request_count": 0.0,
        "nlg_requests_running": 1.0,
    }
