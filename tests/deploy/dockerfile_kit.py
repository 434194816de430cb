"""Reading the project's Dockerfiles, and running their `pip install` lines here into a directory.

Only what the project's Dockerfiles use is understood: ARG defaults, `FROM image AS name`, WORKDIR,
COPY (without --from: a repository path to an image path) and RUN lines, one instruction a line.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = PROJECT_ROOT / "docker"


@dataclass
class Stage:
    base: str
    name: str = ""
    workdir: str = "/"
    copies: dict[str, str] = field(default_factory=dict)  # image path -> repository path
    copied_from_stages: dict[str, str] = field(default_factory=dict)  # image path -> "stage:path"
    runs: list[tuple[str, str]] = field(default_factory=list)  # (WORKDIR, command)

    def removed(self) -> list[str]:
        """The image paths the stage's RUN lines remove (`rm`, its options skipped)."""
        found = []
        for _, run in self.runs:
            for part in run.split("&&"):
                words = shlex.split(part)
                if words and words[0] == "rm":
                    found += [w for w in words[1:] if not w.startswith("-")]
        return found

    def pip_installs(self) -> list[PipInstall]:
        """Each `pip install` of the stage's RUN lines."""
        found = []
        for workdir, run in self.runs:
            for part in run.split("&&"):
                words = shlex.split(part)
                if "pip" in words and "install" in words[words.index("pip") :]:
                    found.append(PipInstall(self, workdir, words[words.index("install", words.index("pip")) + 1 :]))
        return found


@dataclass(frozen=True)
class PipInstall:
    stage: Stage
    workdir: str
    args: list[str]  # after `install`

    def option(self, name: str) -> str:
        return self.args[self.args.index(name) + 1]


@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(path: Path) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif instruction == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            stages.append(Stage(base=base, name=words[2] if len(words) == 3 and words[1].upper() == "AS" else ""))
        elif instruction == "WORKDIR":
            stages[-1].workdir = posixpath.join(stages[-1].workdir, rest)
        elif instruction == "COPY":
            _copy(stages[-1], shlex.split(rest))
        elif instruction == "RUN":
            stages[-1].runs.append((stages[-1].workdir, rest))
    return Dockerfile(path, args, stages)


def _copy(stage: Stage, words: list[str]) -> None:
    source_stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
    paths = [w for w in words if not w.startswith("--")]
    *sources, dest = paths
    dest = posixpath.join(stage.workdir, dest)
    for source in sources:
        target = posixpath.join(dest, posixpath.basename(source)) if dest.endswith("/") else dest
        if source_stage is not None:
            stage.copied_from_stages[target] = f"{source_stage}:{source}"
        else:
            stage.copies[posixpath.normpath(target)] = source


def run_pip_install(install: PipInstall, python: str, target: Path) -> subprocess.CompletedProcess[str]:
    """One `pip install` as written, with the image's paths read as the repository's and
    its install location replaced by `target` (`--target`; an install into the interpreter gets one).

    `--no-cache-dir` is dropped: the cache changes nothing that is installed, and keeps CI's runs short.
    """
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", "--target", str(target)]
    rest = iter(install.args)
    for word in rest:
        if word == "--no-cache-dir":
            continue
        if word == "--target":
            next(rest)
            continue
        if word in ("-c", "--constraint", "-r", "--requirement"):
            command += [word, str(_repository_path(install, next(rest)))]
        elif word.startswith("-"):
            command.append(word)
        else:
            path, extras = re.fullmatch(r"([^\[]+)(\[.*\])?", word).groups()  # type: ignore[union-attr]
            is_path = path.startswith((".", "/"))
            command.append(f"{_repository_path(install, path)}{extras or ''}" if is_path else word)
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def _repository_path(install: PipInstall, image_path: str) -> Path:
    """The repository file that `image_path` (read in the install's WORKDIR) was copied from."""
    stage = install.stage
    absolute = posixpath.normpath(posixpath.join(install.workdir, image_path))
    if absolute in stage.copies:
        return PROJECT_ROOT / stage.copies[absolute]
    if any(posixpath.dirname(dest) == absolute for dest in stage.copies):
        # A directory that the stage filled with repository files under their own names.
        return PROJECT_ROOT
    raise AssertionError(f"{image_path} in stage {stage.name or stage.base} was not copied from the repository")
