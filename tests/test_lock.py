"""The committed locks against pyproject.toml and this environment: every requirement of every group is
pinned within its range for each supported Python, the Triton image's lock keeps within that image's
constraints, and scripts/setup installed exactly the locked versions."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy's dependency on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "locks" / "requirements.txt"
TRITON_LOCK = ROOT / "locks" / "triton-24.10.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SUPPORTED = ["3.10", "3.11", "3.12", "3.13"]

_spec = importlib.util.spec_from_file_location("verify_lock", ROOT / "scripts" / "verify_lock.py")
assert _spec and _spec.loader
verify_lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verify_lock)


def pins(lock: Path, python: str) -> dict[str, Version]:
    """The lock's pins on Linux x86_64 under `python`, by normalised name."""
    environment = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    found: dict[str, Version] = {}
    for line in lock.read_text().splitlines():
        requirement, _, marker = line.partition(";")
        if not requirement or requirement[0] in "# -":
            continue
        if marker.strip() and not Marker(marker.strip()).evaluate(environment):
            continue
        name, _, version = requirement.strip().partition("==")
        assert name not in found, f"{lock.name} pins {name} twice for Python {python}"
        found[verify_lock.normalise(name)] = Version(version)
    return found


def group_requirements() -> list[tuple[str, Requirement]]:
    own = PYPROJECT["project"]["name"]
    return [
        (group, Requirement(text))
        for group, texts in PYPROJECT["project"]["optional-dependencies"].items()
        for text in texts
        if Requirement(text).name != own
    ]


@pytest.mark.parametrize("python", SUPPORTED)
def test_every_requirement_of_every_group_is_pinned_within_its_range(python):
    locked = pins(LOCK, python)
    for group, requirement in group_requirements():
        name = verify_lock.normalise(requirement.name)
        assert name in locked, f"[{group}] {requirement} is not in {LOCK.name} for Python {python}: run scripts/lock"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"[{group}] {requirement}: {LOCK.name} pins {locked[name]} for Python {python}: run scripts/lock"
        )


def test_every_pin_is_exact():
    for lock in (LOCK, TRITON_LOCK):
        for line in lock.read_text().splitlines():
            if line and line[0] not in "# -":
                assert re.fullmatch(r"[A-Za-z0-9._-]+==[^ ;]+( ; .+)?", line), f"{lock.name}: {line!r}"


def test_the_triton_image_lock_keeps_within_that_images_constraints():
    locked = pins(TRITON_LOCK, "3.10")
    constraints = (ROOT / "docker" / "triton-24.10.constraints.txt").read_text().splitlines()
    for text in (line for line in constraints if line and not line.startswith("#")):
        constraint = Requirement(text)
        assert constraint.specifier.contains(locked[verify_lock.normalise(constraint.name)])
    for group, requirement in group_requirements():
        if group == "serving":
            assert requirement.specifier.contains(locked[verify_lock.normalise(requirement.name)])
    assert "torch" not in locked, "the Triton image brings its own torch"


def test_this_environment_holds_exactly_the_locked_versions():
    assert verify_lock.drift(LOCK) == []


def test_a_version_off_the_lock_is_reported(tmp_path):
    lock = tmp_path / "requirements.txt"
    lock.write_text(
        "".join(f"{name}=={version}\n" for name, version in verify_lock.locked(LOCK).items() if name != "pyyaml")
        + "pyyaml==0.0.1\n"
    )
    assert verify_lock.drift(lock) == [f"pyyaml {importlib.metadata.version('pyyaml')} is installed where "
                                       f"{lock} pins 0.0.1"]
