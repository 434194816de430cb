"""``nlg-demo --policy planner``: the profile it ships or measures, the serving overhead it fits on the
live server, the configuration it builds, and the planner's forecast as the demo reports and plots it."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from autoscaler.app import App
from autoscaler.policy import build_policy
from autoscaler.profile import EngineProfile, load_profile
from nlg_demo.config import demo_config
from nlg_demo.load import LoadRecord
from nlg_demo.plot import draw
from nlg_demo.run import (
    build_parser,
    engine_profile,
    line_of,
    main,
    output_path,
    round_of,
    signal_of,
)
from nlg_demo.served_profile import (
    PROFILE_REPS,
    SHIPPED,
    Overhead,
    fit_overhead,
    measure_engine_profile,
    mismatches,
    profile_command,
    served_profile,
)
from nlgsim.cli import build_parser as nlgsim_parser
from tests.autoscaler.autoscaler_testkit import FakeClock, FakeTriton, PodMetrics, write_profile
from triton_backend.launch import PROJECT_ROOT

OVERHEAD = Overhead(first_token_s=0.05, step_s=0.003, per_sequence_s=0.001)


def planner_args(tmp_path, *extra):
    return build_parser().parse_args(["--policy", "planner", "--out", str(tmp_path / "demo.png"), *extra])


def lone(engine: EngineProfile, prompt: int, tokens: int, choices: int, overhead: Overhead) -> LoadRecord:
    """A lone request as a server that adds ``overhead`` to ``engine`` would serve it, from t = 0."""
    ttft = engine.prefill_time_s(prompt) + overhead.first_token_s
    step = engine.decode_step_s(choices, prompt + tokens / 2) + overhead.step_s + overhead.per_sequence_s * choices
    end = ttft + (tokens - 1) * step
    return LoadRecord("lone", 0.0, tokens, choices, end=end, first=ttft, prompt_tokens=prompt, complete=True)


def table_4_2_lone(engine: EngineProfile, overhead: Overhead) -> list[LoadRecord]:
    return [lone(engine, 34, 30, 1, overhead), lone(engine, 34, 34, 1, overhead), lone(engine, 34, 10, 1, overhead),
            lone(engine, 82, 64, 4, overhead), lone(engine, 82, 15, 4, overhead)]  # fmt: skip


# -- the profile -----------------------------------------------------------------------------------


def test_the_shipped_profile_describes_the_instance_the_demo_serves():
    profile = load_profile(SHIPPED)
    defaults = build_parser().parse_args([])
    assert mismatches(profile, defaults.preset, defaults.max_num_seqs) == []
    assert profile.source == "measured"
    assert profile.hardware.startswith("cpu: ")  # the machine it was measured on is named
    assert profile.extra["reps"] == PROFILE_REPS  # by the command the demo runs for --profile-first


def test_the_profile_command_is_nlgsim_profile_of_the_served_instance(tmp_path):
    argv = profile_command("tiny", 4, tmp_path / "p.json")
    assert argv[:3] == [sys.executable, "-m", "nlgsim"]
    args = nlgsim_parser().parse_args(argv[3:])
    got = (args.command, args.preset, args.max_num_seqs, args.reps, args.out)
    assert got == ("profile", "tiny", 4, PROFILE_REPS, tmp_path / "p.json")


def test_the_readme_regenerates_the_shipped_profile_with_the_demos_command():
    argv = profile_command("tiny", 4, SHIPPED.relative_to(PROJECT_ROOT))
    command = " ".join(["python", *argv[1:]])
    assert command in (PROJECT_ROOT / "README.md").read_text()
    profile = load_profile(SHIPPED)
    assert (profile.preset, profile.max_batch, profile.extra["reps"]) == ("tiny", 4, PROFILE_REPS)


@pytest.mark.parametrize(
    ("preset", "seqs", "want"),
    [
        ("tiny", 4, []),
        ("gpt2", 4, ["preset 'tiny', the demo serves 'gpt2'"]),
        ("tiny", 8, ["max_batch 4, the demo runs --max-num-seqs 8"]),
        ("gpt2", 8, ["preset 'tiny', the demo serves 'gpt2'", "max_batch 4, the demo runs --max-num-seqs 8"]),
    ],
    ids=["same", "preset", "batch", "both"],
)
def test_a_profile_of_another_instance_is_named_as_such(preset, seqs, want):
    assert mismatches(load_profile(SHIPPED), preset, seqs) == want


def test_the_planner_takes_the_shipped_profile_unless_told_otherwise(tmp_path):
    profile, path = engine_profile(planner_args(tmp_path))
    assert path == SHIPPED and profile == load_profile(SHIPPED)
    assert engine_profile(build_parser().parse_args([])) is None  # pertoken reads none


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--profile", "{other}"], ["preset 'test'", "max_batch 16", "--profile-first"]),
        (["--profile", "{missing}"], ["not found"]),
        (["--profile", "{other}", "--profile-first"], ["not both"]),
    ],
    ids=["another-instance", "missing", "both-flags"],
)
def test_a_profile_the_planner_cannot_use_stops_the_demo_saying_why(tmp_path, argv, says):
    other = write_profile(tmp_path / "other.json", max_batch=16)
    argv = [a.format(other=other, missing=tmp_path / "missing.json") for a in argv]
    with pytest.raises(SystemExit) as stop:
        engine_profile(planner_args(tmp_path, *argv))
    for text in says:
        assert text in str(stop.value)


def test_profile_options_belong_to_the_planner(tmp_path):
    with pytest.raises(SystemExit, match="for --policy planner"):
        engine_profile(build_parser().parse_args(["--profile-first"]))


# -- the serving overhead --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overhead",
    [OVERHEAD, Overhead(0.0, 0.0, 0.0), Overhead(0.02, 0.004, 0.0), Overhead(0.0, 0.0, 0.002)],
    ids=["all", "none", "per-step", "per-sequence"],
)
def test_the_fit_recovers_what_serving_adds_to_the_engine(overhead):
    engine = load_profile(SHIPPED)
    fitted = fit_overhead(engine, table_4_2_lone(engine, overhead))
    assert fitted.first_token_s == pytest.approx(overhead.first_token_s, abs=1e-9)
    assert fitted.step_s == pytest.approx(overhead.step_s, abs=1e-9)
    assert fitted.per_sequence_s == pytest.approx(overhead.per_sequence_s, abs=1e-9)


def test_a_machine_faster_than_the_profile_adds_nothing():
    engine = load_profile(SHIPPED)
    faster = Overhead(first_token_s=-0.001, step_s=-0.0005, per_sequence_s=-0.0001)
    assert fit_overhead(engine, table_4_2_lone(engine, faster)) == Overhead(0.0, 0.0, 0.0)


def test_one_batch_size_gives_no_per_sequence_part():
    engine = load_profile(SHIPPED)
    fitted = fit_overhead(engine, [lone(engine, 34, 30, 1, OVERHEAD)])
    assert fitted.per_sequence_s == 0
    assert fitted.step_s == pytest.approx(OVERHEAD.step_s + OVERHEAD.per_sequence_s)


def test_requests_that_did_not_finish_are_not_fitted():
    engine = load_profile(SHIPPED)
    cut = LoadRecord("lone", 0.0, 30, 1, end=0.5, first=0.1, prompt_tokens=34, complete=False)
    unstarted = LoadRecord("lone", 0.0, 30, 1, end=0.5, prompt_tokens=34, complete=True)
    with pytest.raises(ValueError, match="no complete lone request"):
        fit_overhead(engine, [cut, unstarted])
    assert fit_overhead(engine, [cut, lone(engine, 34, 30, 1, OVERHEAD)]).first_token_s == pytest.approx(0.05)


def test_the_served_profile_is_the_engine_plus_the_overhead_and_reloads(tmp_path):
    engine = load_profile(SHIPPED)
    served = served_profile(engine, OVERHEAD, 12.5, SHIPPED)
    assert served.validate() == []
    assert (served.source, served.startup_s, served.max_batch) == ("derived", 12.5, engine.max_batch)
    assert served.decode_step_s(4, 100) == pytest.approx(engine.decode_step_s(4, 100) + 0.003 + 4 * 0.001)
    assert served.prefill_time_s(34) == pytest.approx(engine.prefill_time_s(34) + 0.05)
    assert served.extra["serving_overhead_s"] == {"first_token": 0.05, "step": 0.003, "per_sequence": 0.001}
    served.save(tmp_path / "served.json")
    assert load_profile(tmp_path / "served.json") == served


# -- the configuration and the planner it runs -----------------------------------------------------


#: The lead the demo gives the planner: the reload that adds an instance in place, as it times it when it
#: measures capacity with two (a few seconds on a quiet CPU).
RELOAD_S = 3.0


def served_file(args) -> str:
    path = output_path(args, ".served-profile.json")
    served_profile(load_profile(SHIPPED), OVERHEAD, RELOAD_S, SHIPPED).save(path)
    return path


def test_the_planner_configuration_names_the_served_profile_and_slo(tmp_path):
    args = planner_args(tmp_path)
    path = served_file(args)
    server = SimpleNamespace(metrics_url="http://127.0.0.1:8002/metrics", http_url="127.0.0.1:8000")
    config = demo_config(args, server, threshold=6.6, profile=path)
    assert config.validate() == []
    planner = config.scaler.planner
    assert (config.scaler.type, planner.profile, planner.per_token_slo) == ("planner", str(path), 6.6)
    assert (config.scaler.scale_up.max_pods, config.scaler.scale_down.max_pods) == (1, 1)
    policy = build_policy(config.scaler)
    assert policy.name == "planner" and policy.targets["pertoken_p99"] == pytest.approx(6.6)
    with pytest.raises(SystemExit, match="needs an engine profile"):
        demo_config(args, server, threshold=6.6)


@pytest.mark.integration
def test_the_demo_reports_and_plots_the_forecast_of_the_live_planner(tmp_path):
    """The demo's configuration in an App: the direct scrape of a pod's /metrics (the test's server),
    the Triton actuator (the test's model-control server), a fake clock; a rising load."""
    args = planner_args(tmp_path)
    path = served_file(args)
    pod = PodMetrics()
    try:
        with FakeTriton() as triton:
            server = SimpleNamespace(
                http_url=triton.url.removeprefix("http://"), metrics_url=f"http://{pod.target}/metrics"
            )
            config = demo_config(args, server, threshold=6.6, profile=path)
            clock = FakeClock()
            app = App(config, clock=clock)
            try:
                app.controller.run_once()
                rounds, lines = [], []
                for i in range(10):
                    pod.serve_requests(4 * (i + 1), prompt=58, output=40, ttft_s=0.05, pertoken_s=0.005)
                    clock.advance(args.interval)
                    app.controller.run_once()
                    view = app.controller.targets.view("gpt2")
                    rounds.append(round_of(view, 2.0 * i, 2.0 * i + 0.1, config.scaler.planner.headroom))
                    lines.append(line_of(view, rounds[-1], signal_of(view), in_flight=0))
            finally:
                app.stop()
            assert triton.count > 1  # scaled out in place
    finally:
        pod.stop()
    last = rounds[-1].metrics
    assert last["planned"] >= last["demand"] > 0  # the forecast or the burst floor, at least the demand
    fleet = last["per_replica"] * last["capacity"] * config.scaler.planner.headroom * rounds[-1].current
    assert last["fleet_capacity"] == pytest.approx(fleet)
    assert f"planned {last['planned']:5.2f}/s" in lines[-1]
    assert signal_of(view).key == "pertoken_p99"
    fig = draw(rounds, [], 0.0, signal_of(view), None, "planner")
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert len(fig.axes) == 3
    assert "planned for: the work, or the burst floor" in legend and "demand (planner, from the pods)" in legend


@pytest.mark.integration
def test_the_demos_planner_returns_to_one_instance_within_the_runs_tail_after_its_peak(tmp_path):
    """A peak the planner scales out for, then no load for as long as the demo's default run leaves
    (half of its 180 s): with the reload of a quiet machine, the instances come back to one before the
    run ends (the burst floor remembers ten reloads, and the stabilization window follows)."""
    args = planner_args(tmp_path)
    path = served_file(args)
    pod = PodMetrics()
    desired = []
    try:
        with FakeTriton() as triton:
            server = SimpleNamespace(
                http_url=triton.url.removeprefix("http://"), metrics_url=f"http://{pod.target}/metrics"
            )
            app = App(demo_config(args, server, threshold=6.6, profile=path), clock=(clock := FakeClock()))
            try:
                for i in range(int(args.duration / args.interval)):
                    if i < 45:  # 90 s of load at 8 requests a second
                        pod.serve_requests(16, prompt=58, output=40, ttft_s=0.05, pertoken_s=0.005)
                    clock.advance(args.interval)
                    app.controller.run_once()
                    desired.append(app.controller.targets.view("gpt2")["decisions"][0]["desired"])
            finally:
                app.stop()
    finally:
        pod.stop()
    assert max(desired[:45]) >= 2 and desired[-1] == 1, desired


# -- for real --------------------------------------------------------------------------------------


@pytest.mark.integration
def test_profile_first_measures_the_served_instance(tmp_path):
    out = measure_engine_profile("tiny", 2, tmp_path / "engine.json", PROJECT_ROOT, reps=1)
    profile = load_profile(out)
    assert mismatches(profile, "tiny", 2) == []
    assert profile.source == "measured"


@pytest.mark.e2e
@pytest.mark.integration
def test_the_planner_demo_serves_every_request_on_a_real_tritonserver(tmp_path, capsys):
    png = tmp_path / "demo.png"
    rc = main(["--policy", "planner", "--duration", "40", "--rate", "1.5", "--ramp", "10", "--out", str(png)])
    said = capsys.readouterr().out
    assert rc == 0, said
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    served = json.loads((tmp_path / "demo.served-profile.json").read_text())
    assert served["source"] == "derived" and served["extra"]["engine_profile"] == str(SHIPPED)
    assert ", 0 failed or cut;" in said and "planned" in said
