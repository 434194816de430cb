"""The model's threads carry their names into the kernel, where /proc and `top -H` show them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from engine_testkit import make_engine, tiny_model

from triton_backend.engine_loop import EngineLoop
from triton_backend.thread_names import name_this_thread


def thread_names() -> set[str]:
    return {p.read_text().strip() for p in Path("/proc/self/task").glob("*/comm")}


def kernel_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


@pytest.mark.parametrize(
    ("name", "shown"),
    [("nlg-engine", "nlg-engine"), ("nlg-responses-longer", "nlg-responses-l")],
    ids=["fits", "cut-to-15-bytes"],
)
def test_a_thread_names_itself(name: str, shown: str) -> None:
    seen: list[str] = []

    def run() -> None:
        assert name_this_thread(name)
        seen.append(kernel_name(threading.get_native_id()))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen == [shown]
    assert kernel_name(threading.get_native_id()) != shown  # the caller's own name is untouched


def test_the_engine_thread_is_named_in_the_kernel() -> None:
    loop = EngineLoop(make_engine(tiny_model(), max_num_seqs=2), lambda _: None)
    loop.start()
    try:
        deadline = time.monotonic() + 30  # the thread names itself as it starts
        while "nlg-engine" not in (names := thread_names()) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        loop.stop(timeout=30)
    assert "nlg-engine" in names
