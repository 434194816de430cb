"""Markers of the autoscaler's tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: depends on a loaded machine's timing (real clocks, threads)")
