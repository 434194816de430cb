"""The Dockerfile's `pip install` lines, run here into a directory: what each image would hold.

No image is built (CI has no docker daemon); the install commands are the Dockerfile's own, read
from it, with the package index. The autoscaler's must bring no torch and start `nlg-autoscaler`
from nothing but the standard library and what it installed, and hold no `nlg-demo`. The Triton-side
layer is laid out as the chart's init container lays it out and served by a real tritonserver, next to
a torch that stands for the one of the Triton image.
"""

from __future__ import annotations

import importlib.metadata
import os
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_kit import DOCKER_DIR, PROJECT_ROOT, parse, run_pip_install
from serving_testkit import http_generate_stream

from triton_backend.launch import TritonServer

pytestmark = pytest.mark.integration

DOCKERFILE = parse(DOCKER_DIR / "nlg-serving.Dockerfile")
# What must stay out of the autoscaler's image: the model's stack, and its CUDA packages.
MODEL_DISTRIBUTIONS = re.compile(r"(torch|triton|transformers|tokenizers|safetensors|nvidia-.*)", re.I)


def python_of_the_images() -> str:
    """Python 3.10, as in both images, where this machine has one; else this interpreter."""
    found = shutil.which("python3.10")
    if found and subprocess.run([found, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return found
    return sys.executable


def installed(target: Path) -> set[str]:
    """The distributions in `target`, by normalised name (PEP 503)."""
    return {
        re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in importlib.metadata.distributions(path=[str(target)])
    }


def isolated_run(python: str, args: list[str], pythonpath: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -S`: no site-packages of the interpreter's, only the standard library and `pythonpath`."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([python, "-S", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_the_autoscaler_image_installs_no_torch_and_starts(tmp_path):
    python = python_of_the_images()
    (install,) = DOCKERFILE.final.pip_installs()
    target = tmp_path / "site-packages"
    done = run_pip_install(install, python, target)
    assert done.returncode == 0, done.stderr[-3000:]

    # The interpreter's scripts directory in python:3.10-slim; what the RUN line removes from it, this
    # install's bin/ loses too.
    scripts = target / "bin"
    for path in DOCKERFILE.final.removed():
        if posixpath.dirname(path) == "/usr/local/bin":
            (scripts / posixpath.basename(path)).unlink(missing_ok=True)
    assert "nlg-demo" not in {p.name for p in scripts.iterdir()}, "the image would ship nlg-demo without nlg_demo"

    names = installed(target)
    assert {"nlg-serving", "kubernetes", "prometheus-client", "fastapi"} <= names
    assert not {n for n in names if MODEL_DISTRIBUTIONS.fullmatch(n)}, "the autoscaler's image carries the model's"

    script = target / "bin" / "nlg-autoscaler"
    started = isolated_run(python, [str(script), "--help"], [target], cwd=tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert "usage: nlg-autoscaler" in started.stdout
    located = isolated_run(
        python, ["-c", "import autoscaler.cli, sys; print(autoscaler.cli.__file__)"], [target], tmp_path
    )
    assert Path(located.stdout.strip()).is_relative_to(target)


def image_site(tmp_path: Path) -> Path:
    """A directory standing for the Triton image's own packages: torch and what torch requires,
    linked from this environment (the project and its other dependencies are not there)."""
    site = tmp_path / "triton-image-site"
    site.mkdir()
    wanted, seen = ["torch"], set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        distribution = importlib.metadata.distribution(name)
        wanted += [
            re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0].lower()
            for r in distribution.requires or []
            if "extra ==" not in r
        ]
        for top in {Path(str(f)).parts[0] for f in distribution.files or []}:
            source = Path(str(distribution.locate_file(top)))
            if top not in ("..", "__pycache__") and not top.endswith(".pth") and not (site / top).exists():
                (site / top).symlink_to(source)
    return site


def test_the_init_containers_layout_serves_a_stream(tmp_path, monkeypatch):
    # The stub of nvidia-pytriton's tritonserver embeds this interpreter: the layer is built for it.
    (install,) = DOCKERFILE.stage("package").pip_installs()
    site_packages = tmp_path / "opt-nlg-site-packages"
    done = run_pip_install(install, sys.executable, site_packages)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch" not in installed(site_packages), "the Triton image brings torch"

    # The init container: `cp -a model_repository/. /models/`, site-packages to its emptyDir.
    models = tmp_path / "models"
    shutil.copytree(PROJECT_ROOT / "model_repository", models)
    pythonpath = [site_packages, image_site(tmp_path)]
    monkeypatch.chdir(tmp_path)  # nothing of the checkout on the model's path
    located = isolated_run(
        sys.executable, ["-c", "import triton_backend; print(triton_backend.__file__)"], pythonpath, tmp_path
    )
    assert Path(located.stdout.strip()).is_relative_to(site_packages), located.stderr

    env = {"PYTHONPATH": os.pathsep.join(map(str, pythonpath)), "NLG_PRESET": "tiny", "NLG_MAX_NUM_SEQS": "4"}
    with TritonServer(model_repository=models, env=env) as server:
        events = http_generate_stream(
            server.http_url,
            {"text_input": "The quick brown fox", "stream": True, "sampling_parameters": '{"max_tokens": 4}'},
        )
    assert events and not [e for e in events if "error" in e], events
    assert "".join(e["text_output"] for e in events)
