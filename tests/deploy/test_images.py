"""The images that the chart pulls are the ones docker/ builds, with the paths the chart reads."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerfile_kit import DOCKER_DIR, PROJECT_ROOT, parse
from external_tools import HELM, require
from helm_testkit import CHART, Helm, Rendered

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy's dependency on 3.10
    import tomli as tomllib

PROJECT_IMAGE = DOCKER_DIR / "nlg-serving.Dockerfile"


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return Rendered.parse(Helm(require(HELM)).template())


def pod_spec(rendered: Rendered, suffix: str) -> dict[str, Any]:
    spec: dict[str, Any] = rendered.one("Deployment", suffix)["spec"]["template"]["spec"]
    return spec


def container(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in containers if c["name"] == name)


def build_tags() -> list[str]:
    """The tags of the `docker build` commands that docs/helm.md and the Dockerfile's header give."""
    texts = [(PROJECT_ROOT / "docs" / "helm.md").read_text(), PROJECT_IMAGE.read_text()]
    return [
        m for text in texts for m in re.findall(r"docker build -f docker/nlg-serving\.Dockerfile -t (\S+) \.", text)
    ]


def test_the_chart_pulls_the_tag_that_the_build_commands_make(rendered):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
    autoscaler = container(pod_spec(rendered, "-autoscaler")["containers"], "autoscaler")
    init = container(pod_spec(rendered, "-triton")["initContainers"], "package")
    assert chart["appVersion"] == version
    assert autoscaler["image"] == init["image"] == f"ghcr.io/nlg-serving/nlg-serving:{version}"
    tags = build_tags()
    assert len(tags) == 2, "docs/helm.md and the Dockerfile's header each give the build command"
    assert set(tags) == {autoscaler["image"]}


def test_the_package_is_built_on_the_triton_image_that_the_chart_runs(rendered):
    dockerfile = parse(PROJECT_IMAGE)
    triton = container(pod_spec(rendered, "-triton")["containers"], "triton")
    assert dockerfile.stage("package").base == triton["image"]
    # That image brings torch: the layer built on it must not bring another one.
    serving = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [r for r in serving["serving"] if re.match(r"torch\b", r)]


def test_the_init_container_finds_what_the_image_holds(rendered):
    values = yaml.safe_load((CHART / "values.yaml").read_text())["package"]
    dockerfile = parse(PROJECT_IMAGE)
    final = dockerfile.final
    assert final.copies[values["modelRepository"]] == "model_repository"
    assert final.copied_from_stages[values["sitePackages"]] == f"package:{values['sitePackages']}"
    (install,) = dockerfile.stage("package").pip_installs()
    assert install.option("--target") == values["sitePackages"]
    init = container(pod_spec(rendered, "-triton")["initContainers"], "package")
    assert init["command"][0] == "/bin/sh", "the image needs a shell and cp: not a distroless base"


def test_the_autoscaler_image_holds_the_autoscaler_and_no_demo():
    """The demo (nlg_demo) needs tritonserver and the simulator: the image gets neither it nor its script."""
    final = parse(PROJECT_IMAGE).final
    assert "autoscaler" in final.copies.values()
    assert not [source for source in final.copies.values() if source.split("/")[0] in ("nlg_demo", "nlgsim")]
    assert "/usr/local/bin/nlg-demo" in final.removed(), "pip writes every console script of the project"


def test_the_autoscaler_runs_as_the_user_the_chart_names(rendered):
    security = pod_spec(rendered, "-autoscaler")["securityContext"]
    user = next(line.split()[1] for line in PROJECT_IMAGE.read_text().splitlines() if line.startswith("USER "))
    assert user == f"{security['runAsUser']}:{security['runAsGroup']}"


def test_the_build_context_holds_every_file_the_dockerfile_copies():
    ignore = (DOCKER_DIR / "nlg-serving.Dockerfile.dockerignore").read_text().splitlines()
    sent = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {source for stage in parse(PROJECT_IMAGE).stages for source in stage.copies.values()}
    assert copied == sent
    assert all((PROJECT_ROOT / path).exists() for path in copied)


def test_every_dockerfile_in_docker_is_read_by_these_tests():
    assert sorted(p.name for p in Path(DOCKER_DIR).glob("*Dockerfile")) == [PROJECT_IMAGE.name]
