"""Removes the shared-memory regions that a dead tritonserver's Python backend left in /dev/shm.

Each model instance's stub talks to the server through a region named
`triton_python_backend_shm_region_<uuid>` (the backend's default prefix; `--backend-config=
python,shm-region-prefix-name=...` changes it). The server removes it when it unloads the model; a
server killed with SIGKILL (or by the OOM killer, with its stubs) leaves it, and a memory-backed
/dev/shm (the chart's) keeps it across container restarts until the pod's memory is full of them.

The name carries no pid, so a region's owner is proven dead by the kernel instead: a live server and
its stubs keep the region open and mapped from the moment they create it, so a region that no
process maps or holds open has no owner. Only regions of this user are considered (no other can
remove them), none younger than `min_age` seconds, and none at all while a tritonserver or stub of
this user cannot be inspected (a process that cannot is no owner unless its command line is one of
those). What cannot be seen cannot be proven: where /dev/shm is shared with
processes outside this pid namespace (`docker --ipc=host` without `--pid=host`, a pod with
hostIPC), their regions look ownerless here, so such deployments set NLG_SHM_SWEEP=off.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from triton_backend.server_stop import DEFAULT_SHM_REGION_PREFIX

log = logging.getLogger(__name__)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
MIN_AGE_SECONDS = 10.0
SWEEP_VARIABLE = "NLG_SHM_SWEEP"
_OWNERS = (b"tritonserver", b"triton_python_backend_stub")


class Unprovable(Exception):
    """A process of this user could not be inspected: whether a region is in use is unknown."""


def _regions(shm_dir: Path, prefixes: Iterable[str]) -> list[Path]:
    pattern = re.compile("|".join(f"{re.escape(p)}{_UUID}" for p in prefixes))
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    return [shm_dir / name for name in sorted(names) if pattern.fullmatch(name)]


def _in_use(shm_dir: Path, proc: Path, uid: int) -> set[str]:
    """Names of the files in `shm_dir` that some process maps or holds open."""
    used: set[str] = set()
    prefix = f"{os.path.realpath(shm_dir)}/"
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            maps = (entry / "maps").read_text(errors="replace")
            fds = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except FileNotFoundError:
            continue  # it ended meanwhile
        except OSError as err:
            if _may_own_regions(entry, uid):
                raise Unprovable(f"cannot inspect process {entry.name}: {err}") from err
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
            path = fields[5] if len(fields) == 6 else ""
            if path.startswith(prefix):
                used.add(path[len(prefix) :].removesuffix(" (deleted)"))
        used.update(path[len(prefix) :] for path in fds if path.startswith(prefix))
    return used


def _may_own_regions(process: Path, uid: int) -> bool:
    """Whether a process that cannot be inspected could hold a region of this user: only tritonserver
    and its stubs open them, and only as this user (another user cannot open them read-write)."""
    try:
        owner = (process / "status").stat().st_uid
        argv0 = (process / "cmdline").read_bytes().split(b"\0", 1)[0]
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return owner == uid and os.path.basename(argv0) in _OWNERS


def stale_regions(
    shm_dir: Path = Path("/dev/shm"),
    proc: Path = Path("/proc"),
    prefixes: Iterable[str] = (DEFAULT_SHM_REGION_PREFIX,),
    min_age: float = MIN_AGE_SECONDS,
    now: float | None = None,
) -> list[Path]:
    """The Python-backend regions in `shm_dir` whose owners are gone (see the module's rule)."""
    uid = os.geteuid()
    now = time.time() if now is None else now
    candidates = []
    for region in _regions(shm_dir, tuple(prefixes)):
        try:
            stat = region.stat()
        except OSError:
            continue
        if stat.st_uid == uid and now - max(stat.st_mtime, stat.st_ctime) >= min_age:
            candidates.append(region)
    if not candidates:
        return []
    used = _in_use(shm_dir, proc, uid)
    return [region for region in candidates if region.name not in used]


def sweep(
    shm_dir: Path = Path("/dev/shm"),
    proc: Path = Path("/proc"),
    prefixes: Iterable[str] = (DEFAULT_SHM_REGION_PREFIX,),
    min_age: float = MIN_AGE_SECONDS,
    environ: dict[str, str] | None = None,
) -> list[Path]:
    """Removes the stale regions and returns them; never raises (a failed sweep must not stop a server)."""
    setting = (os.environ if environ is None else environ).get(SWEEP_VARIABLE, "on").strip().lower()
    if setting in ("off", "false", "0"):
        return []
    try:
        stale = stale_regions(shm_dir, proc, prefixes, min_age)
    except Unprovable as err:
        log.warning("left /dev/shm as it is: %s", err)
        return []
    removed = []
    for region in stale:
        try:
            size = region.stat().st_size
            region.unlink()
        except OSError:
            continue
        removed.append(region)
        log.warning("removed %s (%.0f MiB), left by a tritonserver that is gone", region, size / 2**20)
    return removed
