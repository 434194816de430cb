"""Fixtures of the Helm chart's tests: `helm` (the binary) and `render` (`helm template` -> manifests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import yaml
from external_tools import HELM, require
from helm_testkit import CHART, Helm, Rendered


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(require(HELM))


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., Rendered]:
    """render(*helm_args, values=None) -> Rendered, cached: many tests read the same rendering."""
    cache: dict[tuple[tuple[str, ...], str], Rendered] = {}

    def _render(*args: str, values: Mapping[str, Any] | None = None) -> Rendered:
        key = (args, yaml.safe_dump(dict(values or {}), sort_keys=True))
        if key not in cache:
            cache[key] = Rendered.parse(helm.template(*args, values=values))
        return cache[key]

    return _render


@pytest.fixture(scope="session")
def chart_values() -> dict[str, Any]:
    """The chart's default values.yaml."""
    data = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data
