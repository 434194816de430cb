"""model.py chooses how torch's OpenMP workers wait before torch loads it, and a server's choice wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Loads model.py as the stub does (pb_utils is the stub's own module: an empty one stands in), with
# libgomp printing the settings it read when torch loads it.
PROBE = """
import runpy, sys, types
sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
runpy.run_path(sys.argv[1])
import torch
torch.ones(1 << 16).sum()
"""


# libgomp shows an unset policy as PASSIVE too; its spin count tells them apart (300,000 when unset).
@pytest.mark.parametrize(
    ("server_sets", "spin_count"),
    [(None, "0"), ("ACTIVE", "30000000000"), ("PASSIVE", "0")],
    ids=["model-default-sleeps", "server-active-spins", "server-passive-sleeps"],
)
def test_openmp_wait_policy(server_sets: str | None, spin_count: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    env["PYTHONPATH"] = str(ROOT)
    if server_sets is not None:
        env["OMP_WAIT_POLICY"] = server_sets
    model = ROOT / "model_repository" / "gpt2" / "1" / "model.py"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(model)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"GOMP_SPINCOUNT = '{spin_count}'" in done.stderr
