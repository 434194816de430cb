"""The serving latency buckets: defined once (triton_backend.buckets), listed in docs/metrics.md, and
importable with plain data and no torch (the simulator and the autoscaler's tests use them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from triton_backend.buckets import LATENCY_BUCKETS, TOKEN_BUCKETS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _documented(kind: str) -> tuple[float, ...]:
    text = DOCS.read_text()
    listed = re.search(rf"- {kind} \([^)]*\): ([\d., \n]+)", text)
    assert listed, f"docs/metrics.md lists no {kind} buckets"
    return tuple(float(edge) for edge in re.findall(r"\d+(?:\.\d+)?", listed.group(1)))


def test_the_docs_list_the_buckets_the_instruments_use():
    assert _documented("latency-like") == LATENCY_BUCKETS
    assert _documented("token-like") == TOKEN_BUCKETS


def test_the_outputs_the_metrics_and_the_simulated_pods_import_without_torch():
    code = (
        "import sys; import triton_backend.metrics, triton_backend.outputs, nlgsim.instruments; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
