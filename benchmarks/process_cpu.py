"""CPU time of processes and of their threads, read from /proc: what each part of a served run costs,
with no profiler attached.

A process's own line in /proc/<pid>/stat counts its ended threads too; a thread's line, under
task/<tid>/, counts that thread alone, and its `comm` is the name the kernel shows for it (the model
names its engine and response threads: triton_backend/thread_names.py). Between two snapshots, time
of threads that ended meanwhile shows only in the process's total: `split` reports it apart.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")
ENDED = "ended threads"


def stat_seconds(stat: str) -> float:
    """User plus system seconds from a stat line. The command name, in parentheses, may hold spaces and
    parentheses itself: the fields are counted after its last ')'; utime and stime are the 12th and
    13th of them (proc(5) fields 14 and 15)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class Snapshot:
    total: float  # the process's CPU seconds, its ended threads included
    threads: dict[int, tuple[str, float]]  # thread id -> (kernel name, CPU seconds)


def snapshot(pid: int, proc: Path = PROC) -> Snapshot:
    threads = {}
    for task in (proc / str(pid) / "task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            threads[int(task.name)] = (name, stat_seconds((task / "stat").read_text()))
        except (FileNotFoundError, ProcessLookupError):  # the thread ended while we looked
            continue
    return Snapshot(stat_seconds((proc / str(pid) / "stat").read_text()), threads)


def split(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds between the snapshots by thread name, and the ended threads' under ENDED (never
    negative: a tick may land on either side of the two reads)."""
    by_name: dict[str, float] = defaultdict(float)
    for tid, (name, seconds) in after.threads.items():
        by_name[name] += seconds - before.threads.get(tid, (name, 0.0))[1]
    ended = (after.total - before.total) - sum(by_name.values())
    by_name[ENDED] += max(ended, 0.0)
    return dict(by_name)


def children(pid: int, proc: Path = PROC) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found
