"""Checks that this interpreter's environment holds exactly the locked versions: every installed
distribution is in the lock at its pinned version (a local label such as torch's `+cpu` aside), so a
setup that drifted from the lock fails where it happens, not later in a type check.

    python scripts/verify_lock.py locks/requirements.txt
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.version import Version

#: Installed by the interpreter's venv or by setup itself, not by a dependency group.
NOT_LOCKED = {"pip", "nlg-serving"}


def normalise(name: str) -> str:
    """PEP 503's normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(lock: Path) -> dict[str, Version]:
    """The lock's pins that apply to this interpreter and platform, by normalised name."""
    pins: dict[str, Version] = {}
    for line in lock.read_text().splitlines():
        requirement, _, marker = line.partition(";")
        if not requirement or requirement[0] in "# -":
            continue
        name, _, version = requirement.strip().partition("==")
        if not version:
            raise ValueError(f"{lock}: {line!r} is not a pin (name==version)")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        pins[normalise(name)] = Version(version)
    return pins


def drift(lock: Path) -> list[str]:
    """One line per installed distribution that is not in the lock or not at its locked version."""
    pins = locked(lock)
    problems = []
    for dist in importlib.metadata.distributions():
        name = normalise(dist.metadata["Name"])
        if name in NOT_LOCKED:
            continue
        have = Version(dist.version)
        want = pins.get(name)
        if want is None:
            problems.append(f"{name} {have} is installed but not in {lock}")
        elif Version(have.public) != want:
            problems.append(f"{name} {have} is installed where {lock} pins {want}")
    return sorted(problems)


def main() -> int:
    lock = Path(sys.argv[1] if len(sys.argv) > 1 else "locks/requirements.txt")
    problems = drift(lock)
    for problem in problems:
        print(f"verify_lock: {problem}", file=sys.stderr)
    if problems:
        hint = "run `bash scripts/setup` in a fresh .venv, or refresh the lock with scripts/lock"
        print(f"verify_lock: {hint}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
