"""values.schema.json and the chart's `fail` checks reject bad values, naming the key and the rule.

The policy's rules are shared with the autoscaler (test_helm_autoscaler.py checks both reject the same
policies); here are the exact messages a user sees, and the rest of the values.
"""

from __future__ import annotations

import re

import pytest
from helm_testkit import CHART, ROOT, Helm, HelmError

REJECTED = [
    # (id, --set assignments, the message helm prints)
    (
        "negative-threshold",
        ["autoscaler.policy.threshold=-5"],
        "at '/autoscaler/policy/threshold': exclusiveMinimum: got -5, want 0",
    ),
    (
        "negative-decimal-threshold",
        ["autoscaler.policy.threshold=-2.5"],
        "at '/autoscaler/policy/threshold': '-2.5' does not match pattern",
    ),
    (
        "zero-threshold",
        ["autoscaler.policy.threshold=0"],
        "at '/autoscaler/policy/threshold': exclusiveMinimum: got 0, want 0",
    ),
    (
        "zero-decimal-threshold",
        ["autoscaler.policy.threshold=0.0"],
        "autoscaler.policy.threshold (0) must be greater than 0",
    ),
    (
        "text-threshold",
        ["autoscaler.policy.threshold=fast"],
        "at '/autoscaler/policy/threshold': 'fast' does not match pattern",
    ),
    (
        "min-above-max",
        ["autoscaler.policy.min_deployment_count=5", "autoscaler.policy.max_deployment_count=2"],
        "autoscaler.policy.min_deployment_count (5) must be less than or equal to "
        "autoscaler.policy.max_deployment_count (2)",
    ),
    (
        "unknown-policy-type",
        ["autoscaler.policy.type=latency"],
        "at '/autoscaler/policy/type': value must be one of 'request', 'pertoken'",
    ),
    (
        "misspelled-policy-key",
        ["autoscaler.policy.treshold=25"],
        "at '/autoscaler/policy': additional properties 'treshold' not allowed",
    ),
    (
        "tolerance-one",
        ["autoscaler.policy.tolerance=1"],
        "at '/autoscaler/policy/tolerance': exclusiveMaximum: got 1, want 1",
    ),
    (
        "tolerance-above-one",
        ["autoscaler.policy.tolerance=1.5"],
        "at '/autoscaler/policy/tolerance': '1.5' does not match pattern",
    ),
    (
        "fractional-replicas",
        ["autoscaler.policy.max_deployment_count=2.5"],
        "at '/autoscaler/policy/max_deployment_count': got string, want integer",
    ),
    (
        "autoscaler-cannot-scale-from-zero",
        ["autoscaler.policy.min_deployment_count=0"],
        "autoscaler.policy.min_deployment_count (0) must be at least 1 with scaling.mode=autoscaler",
    ),
    (
        "hpa-cannot-scale-to-zero",
        ["scaling.mode=hpa", "autoscaler.policy.min_deployment_count=0"],
        "autoscaler.policy.min_deployment_count (0) must be at least 1 with scaling.mode=hpa",
    ),
    (
        "hpa-period-limit",
        ["scaling.mode=keda", "autoscaler.policy.scale_down.period=3600"],
        "autoscaler.policy.scale_down.period (3600) must be between 1 and 1800 s with scaling.mode=keda",
    ),
    (
        "hpa-stabilization-limit",
        ["scaling.mode=hpa", "autoscaler.policy.stabilization_window=7200"],
        "autoscaler.policy.stabilization_window (7200) must be at most 3600 with scaling.mode=hpa",
    ),
    (
        "unknown-mode",
        ["scaling.mode=vpa"],
        "at '/scaling/mode': value must be one of 'autoscaler', 'keda', 'hpa'",
    ),
    ("unknown-preset", ["model.preset=gpt3"], "at '/model/preset': value must be one of"),
    ("unknown-setting", ["model.settings.dtype=int8"], "at '/model/settings/dtype': value must be one of"),
    ("unknown-top-level-key", ["replicaCount=2"], "at '': additional properties 'replicaCount' not allowed"),
    ("service-port-zero", ["service.ports.http=0"], "at '/service/ports/http': minimum: got 0, want 1"),
    (
        "prometheus-url-without-scheme",
        ["prometheus.url=prometheus:9090"],
        "at '/prometheus/url': 'prometheus:9090' does not match pattern",
    ),
    (
        "no-stream-budget",
        ["triton.drain.maxStreamSeconds=0"],
        "at '/triton/drain/maxStreamSeconds': minimum: got 0, want 1",
    ),
    (
        "unknown-monitor-kind",
        ["monitoring.enabled=true", "monitoring.kind=Probe"],
        "at '/monitoring/kind': value must be one of 'ServiceMonitor', 'PodMonitor'",
    ),
    (
        "zero-loop-interval",
        ["autoscaler.loop.interval=0.0"],
        "autoscaler.loop.interval (0.0) must be greater than 0",
    ),
]


@pytest.mark.parametrize(("assignments", "message"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_bad_values_are_rejected_with_the_key_named(helm: Helm, assignments, message):
    with pytest.raises(HelmError) as error:
        helm.template(*[a for s in assignments for a in ("--set", s)])
    assert message in str(error.value)


def test_a_number_where_a_string_belongs_is_named(helm: Helm):
    """`tag: 24.10` unquoted in a values file is the number 24.1, not the NGC release 24.10."""
    with pytest.raises(HelmError, match=r"at '/triton/image/tag': got number, want string"):
        helm.template(values={"triton": {"image": {"tag": 24.10}}})


def test_lint_reports_schema_errors_too(helm: Helm):
    with pytest.raises(HelmError, match=r"exclusiveMinimum: got -5, want 0"):
        helm.run("lint", "--strict", str(CHART), "--set", "autoscaler.policy.threshold=-5")


def test_messages_quoted_in_the_docs_are_what_helm_prints(helm: Helm):
    """docs/helm.md shows three rejected upgrades; each quoted message must be helm's own."""
    doc = (ROOT / "docs" / "helm.md").read_text(encoding="utf-8")
    block = (
        doc.split("Bad values fail before anything is applied", 1)[1]
        .split("```text", 1)[1]
        .split("```", 1)[0]
    )
    lines = block.strip().splitlines()
    pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)]
    assert len(pairs) == 3
    for command, message in pairs:
        assignments = re.findall(r"--set (\S+)", command)
        with pytest.raises(HelmError) as error:
            helm.template(*[a for s in assignments for a in ("--set", s)])
        assert message.lstrip("- ") in str(error.value), command
