"""The load generator (nlgsim.replay) and the GPU benchmark run on a GPU machine that holds only the
client's packages (scripts/pack_gpu_bundle.py): importing them must not pull in the simulator, the
autoscaler or the Kubernetes client."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

HEAVY = ("nlgsim.simulator", "autoscaler", "kubernetes", "pydantic", "fastapi")


@pytest.mark.parametrize("module", ["nlgsim.replay", "nlgsim.workload"])
def test_the_load_generator_imports_without_the_simulator_or_the_autoscaler(module: str) -> None:
    probe = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == ""


def test_the_package_still_offers_its_names() -> None:
    import nlgsim

    assert set(nlgsim.__all__) == set(nlgsim._HOMES)
    for name in nlgsim.__all__:
        assert getattr(nlgsim, name) is getattr(importlib.import_module(nlgsim._HOMES[name]), name)
    with pytest.raises(AttributeError, match="no_such_name"):
        nlgsim.no_such_name  # noqa: B018
