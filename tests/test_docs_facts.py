"""Facts the docs state that the code or the repository also holds: each must say the same in both."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _exported_metrics() -> set[str]:
    source = (ROOT / "triton_backend" / "triton_metrics.py").read_text()
    return set(re.findall(r'"(nlg_[a-z_]+)"', source))


def test_every_metric_the_model_exports_is_documented_and_listed_in_the_readme():
    exported = _exported_metrics()
    assert len(exported) >= 10
    documented = set(re.findall(r"^\| `(nlg_[a-z_]+)` \|", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    assert exported == documented
    readme = (ROOT / "README.md").read_text()
    assert {name for name in exported if f"`{name}" not in readme} == set()


def test_the_simulator_docs_list_every_shipped_profile_as_what_it_is():
    text = (ROOT / "docs" / "simulator.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.-]+\.json)` \| \*\*(measured|derived)\*\*", text, re.M))
    shipped = {p.name: json.loads(p.read_text())["source"] for p in (ROOT / "benchmarks" / "profiles").glob("*.json")}
    assert rows == shipped


def test_the_docs_name_the_charts_scaling_mode_key():
    values = (ROOT / "helm" / "nlg-serving" / "values.yaml").read_text()
    assert re.search(r"^scaling:\n(?:  .*\n)*?  mode: ", values, re.M)
    for doc in ("README.md", "docs/autoscaler.md", "docs/helm.md"):
        assert "autoscaler.mode" not in (ROOT / doc).read_text(), doc


def test_the_readme_gives_the_idle_time_after_which_the_model_returns_memory():
    from triton_backend.engine_loop import IDLE_SECONDS

    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"once it has been idle for {IDLE_SECONDS:.0f} s" in readme


def test_the_demo_quick_start_names_every_option_of_nlg_demo_and_no_other():
    from nlg_demo.run import build_parser

    options = {o for a in build_parser()._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    text = (ROOT / "docs" / "autoscaler.md").read_text()
    quick_start = text[text.index("## Quick start") : text.index("In a cluster:")]
    assert options - set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", quick_start)) == set()
    listed = " ".join(quick_start[quick_start.index("Options:") :].split("(`nlg-demo --help`)")[0].split())
    assert set(re.findall(r"`(--[a-z-]+)`", listed)) - options == set()


def test_the_autoscaler_docs_list_every_metric_it_exports_and_no_other():
    from prometheus_client import CollectorRegistry

    from autoscaler.telemetry import Telemetry

    registry = CollectorRegistry()
    telemetry = Telemetry(registry)
    telemetry.bind("m", "direct", {})
    exported = {
        family.name + ("_total" if family.type == "counter" else "") for family in registry.collect()
    }
    text = (ROOT / "docs" / "autoscaler.md").read_text()
    table = text[text.index("## The autoscaler's own metrics") : text.index("## Compared with HPA")]
    assert set(re.findall(r"^\| `(nlg_autoscaler_\w+)` \|", table, re.M)) == exported
