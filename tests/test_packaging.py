"""pyproject.toml's package list and package data against the code: an install holds every package
the console scripts reach through their imports, and every file besides Python that those packages
ship (a wheel without one fails only when the code that reads it runs)."""

from __future__ import annotations

import ast
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy's dependency on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
#: The repository's top-level packages: folders with an __init__.py.
TOP_LEVEL = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def installed(package: str) -> bool:
    return any(fnmatch(package, pattern) for pattern in SETUPTOOLS["packages"]["find"]["include"])


def imported_packages(package: str) -> set[str]:
    """The repository's top-level packages that `package`'s modules import, lazily imported ones included."""
    found = set()
    for source in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {name.split(".")[0] for name in names} & set(TOP_LEVEL)
    return found


def reached() -> set[str]:
    """The packages the console scripts start in, and every package those import, transitively."""
    todo = {target.split(":")[0].split(".")[0] for target in PYPROJECT["project"]["scripts"].values()}
    seen: set[str] = set()
    while todo:
        package = todo.pop()
        seen.add(package)
        todo |= imported_packages(package) - seen
    return seen


def test_the_console_scripts_reach_packages_of_this_repository():
    assert {"triton_backend", "autoscaler", "nlgsim", "nlg_demo"} <= reached() <= set(TOP_LEVEL)


@pytest.mark.parametrize("package", TOP_LEVEL)
def test_a_package_is_installed_exactly_when_the_console_scripts_reach_it(package: str):
    assert installed(package) == (package in reached()), (
        f"{package}: {'reached' if package in reached() else 'not reached'} from [project.scripts] but "
        f"{'included' if installed(package) else 'not included'} in [tool.setuptools.packages.find]"
    )


def data_files(package: str) -> list[Path]:
    return sorted(
        p
        for p in (ROOT / package).rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    )


@pytest.mark.parametrize("package", [p for p in TOP_LEVEL if installed(p)])
def test_every_file_besides_python_in_an_installed_package_is_package_data(package: str):
    data = SETUPTOOLS["package-data"]
    assert package in data, f"[tool.setuptools.package-data] has no entry for {package} (py.typed at least)"
    assert "py.typed" in data[package], f"{package} is type-checked strictly: ship its py.typed"
    for file in data_files(package):
        shipped = any(
            file.is_relative_to(ROOT / key.replace(".", "/"))
            and any(fnmatch(str(file.relative_to(ROOT / key.replace(".", "/"))), glob) for glob in globs)
            for key, globs in data.items()
        )
        assert shipped, f"{file.relative_to(ROOT)}: not matched by [tool.setuptools.package-data]"
