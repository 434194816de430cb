"""Removing the shared memory a dead tritonserver left: only regions no live process maps or holds
open, never a live server's. The owners here are real processes; the region directory is the test's."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from triton_backend.server_stop import DEFAULT_SHM_REGION_PREFIX
from triton_backend.shm_sweep import stale_regions, sweep

# A process that opens a region, maps it (or only holds it open) and waits to be killed.
HOLDER = """
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
held = mmap.mmap(fd, 4096) if sys.argv[2] == "map" else None
if held is not None:
    os.close(fd)
print("holding", flush=True)
time.sleep(60)
"""


def region(directory: Path, prefix: str = DEFAULT_SHM_REGION_PREFIX) -> Path:
    path = directory / f"{prefix}{uuid.uuid4()}"
    path.write_bytes(b"\0" * 4096)
    return path


def hold(path: Path, how: str) -> subprocess.Popen[bytes]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), how], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
    return holder


@pytest.fixture
def holders():
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for holder in started:
        holder.kill()
        holder.wait()


def test_only_regions_whose_owners_are_gone_are_removed(tmp_path, holders):
    mapped, opened, orphan, dead = (region(tmp_path) for _ in range(4))
    other = tmp_path / "some_other_file"
    other.write_bytes(b"x")
    holders += [hold(mapped, "map"), hold(opened, "open")]
    owner = hold(dead, "map")
    owner.kill()
    owner.wait()
    removed = sweep(shm_dir=tmp_path, min_age=0, environ={})
    assert sorted(removed) == sorted([orphan, dead])
    assert mapped.exists() and opened.exists() and other.exists()
    assert not orphan.exists() and not dead.exists()


def test_a_region_just_made_is_kept_until_it_is_old_enough(tmp_path):
    young = region(tmp_path)
    assert stale_regions(tmp_path) == []  # its server may not have mapped it yet
    assert stale_regions(tmp_path, now=time.time() + 11) == [young]


def test_the_prefix_a_server_was_given_is_swept_and_nothing_else(tmp_path):
    mine, default = region(tmp_path, "pfx_"), region(tmp_path)
    not_a_uuid = tmp_path / f"{DEFAULT_SHM_REGION_PREFIX}notauuid"
    not_a_uuid.write_bytes(b"x")
    assert sweep(shm_dir=tmp_path, prefixes=("pfx_",), min_age=0, environ={}) == [mine]
    assert sweep(shm_dir=tmp_path, min_age=0, environ={}) == [default]
    assert not_a_uuid.exists()


def test_switched_off_it_removes_nothing(tmp_path):
    orphan = region(tmp_path)
    assert sweep(shm_dir=tmp_path, min_age=0, environ={"NLG_SHM_SWEEP": "off"}) == []
    assert orphan.exists()


@pytest.mark.parametrize(
    ("argv0", "kept"),
    [(b"/opt/tritonserver/bin/tritonserver", True), (b"triton_python_backend_stub", True), (b"/sbin/init", False)],
    ids=["server", "stub", "other"],
)
def test_a_server_or_stub_that_cannot_be_inspected_keeps_every_region(tmp_path, argv0, kept):
    (tmp_path / "shm").mkdir()
    orphan = region(tmp_path / "shm")
    # A /proc of one process whose maps cannot be read, as one hidden from this process.
    process = tmp_path / "proc" / "4242"
    (process / "maps").mkdir(parents=True)
    (process / "status").write_text("")
    (process / "cmdline").write_bytes(argv0 + b"\0--model-repository=m\0")
    assert sweep(shm_dir=orphan.parent, proc=process.parent, min_age=0, environ={}) == ([] if kept else [orphan])
    assert orphan.exists() is kept
