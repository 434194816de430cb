"""The serving benchmark's CPU split, read from a /proc laid out as the kernel lays it out."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from benchmarks import process_cpu

TICKS = os.sysconf("SC_CLK_TCK")


def stat_line(pid: int, name: str, ppid: int, utime: int, stime: int) -> str:
    # proc(5): pid (comm) state ppid ... utime is field 14, stime 15.
    return f"{pid} ({name}) S {ppid} 1 1 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 1 1 1\n"


def lay_out(proc: Path, pid: int, ppid: int, total: int, threads: dict[int, tuple[str, int]]) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "stat").write_text(stat_line(pid, "tritonserver", ppid, total, 0))
    for tid, (name, ticks) in threads.items():
        task = proc / str(pid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "comm").write_text(name + "\n")
        (task / "stat").write_text(stat_line(tid, name, ppid, ticks, 0))


@pytest.mark.parametrize(
    ("name", "seconds"),
    [("python", 3.0), ("a b) (c", 3.0), ("", 3.0)],
    ids=["plain", "spaces-and-parentheses", "empty"],
)
def test_cpu_seconds_are_counted_after_the_command_name(name: str, seconds: float) -> None:
    assert process_cpu.stat_seconds(stat_line(7, name, 1, 2 * TICKS, TICKS)) == seconds


def test_the_split_names_threads_and_keeps_ended_ones_apart(tmp_path: Path) -> None:
    lay_out(tmp_path, 10, 1, 10 * TICKS, {10: ("main", 2 * TICKS), 11: ("nlg-engine", 5 * TICKS), 12: ("gone", TICKS)})
    before = process_cpu.snapshot(10, tmp_path)
    # The engine and its new OpenMP worker worked, thread 12 ended after 2 more seconds, main idled.
    (tmp_path / "10" / "task" / "12" / "stat").unlink()
    (tmp_path / "10" / "task" / "12" / "comm").unlink()
    (tmp_path / "10" / "task" / "12").rmdir()
    later = {10: ("main", 2 * TICKS), 11: ("nlg-engine", 9 * TICKS), 13: ("nlg-engine", 4 * TICKS)}
    lay_out(tmp_path, 10, 1, 20 * TICKS, later)
    after = process_cpu.snapshot(10, tmp_path)
    assert process_cpu.split(before, after) == {"main": 0.0, "nlg-engine": 8.0, process_cpu.ENDED: 2.0}


def test_children_are_found_by_their_parent(tmp_path: Path) -> None:
    lay_out(tmp_path, 10, 1, 0, {})
    lay_out(tmp_path, 11, 10, 0, {})
    lay_out(tmp_path, 12, 10, 0, {})
    lay_out(tmp_path, 13, 11, 0, {})
    (tmp_path / "self").mkdir()  # not a process
    assert sorted(process_cpu.children(10, tmp_path)) == [11, 12]


def test_a_busy_thread_of_this_process_shows_under_its_name() -> None:
    stop = threading.Event()

    def spin() -> None:
        from triton_backend.thread_names import name_this_thread

        name_this_thread("cpu-probe")
        while not stop.is_set():
            sum(range(1000))

    before = process_cpu.snapshot(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    deadline = time.monotonic() + 30
    try:
        while process_cpu.split(before, process_cpu.snapshot(os.getpid())).get("cpu-probe", 0.0) < 0.05:
            assert time.monotonic() < deadline, "the busy thread's CPU time never showed"
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join()
