"""A test whose program is missing skips under plain pytest with one line, and fails under CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from external_tools import ROOT, TOOLS, Tool, require

ABSENT = Tool("nlg-no-such-program", "`bash scripts/setup --with-system` installs it", ROOT / ".tools/bin/nlg-absent")


@pytest.mark.parametrize("ci", ["", "0", "false"])
def test_a_missing_program_skips_with_one_line_outside_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require(ABSENT)
    message = str(skipped.value)
    assert message == (
        "nlg-no-such-program not found (.tools/bin/nlg-absent nor on PATH): "
        "`bash scripts/setup --with-system` installs it"
    )
    assert "\n" not in message


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_a_missing_program_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"^nlg-no-such-program not found .*CI is set"):
        require(ABSENT)


def test_a_program_found_is_its_path(tmp_path: Path):
    program = tmp_path / "tool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert require(Tool("tool", "", program)) == str(program)


def test_scripts_check_makes_every_program_required():
    script = (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    assert re.search(r'^export CI="\$\{CI:-true\}"$', script, flags=re.M)
    assert script.index("scripts/setup --with-system") < script.index("export CI=") < script.index("-m pytest")
    assert "apt-get install -y -qq $missing" in setup and "install_helm.py" in setup
    assert all(f'missing="$missing {package}"' in setup for package in ("prometheus", "haproxy"))


def test_the_tests_find_these_programs_only_through_require():
    """No test looks one up by itself (a hard-coded path fails with FileNotFoundError, not a skip)."""
    names = "|".join(re.escape(t.name) for t in TOOLS)
    lookup = re.compile(rf"""which\(\s*["']({names})["']|["']/usr/(local/)?bin/({names})["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "external_tools.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if lookup.search(line)
    ]
    assert found == []
