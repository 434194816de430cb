"""The soak benchmark's parts on synthetic data (reading /proc, the plateau verdict, the flags), and
the committed soak report is what its results file renders to."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import soak

ROOT = Path(__file__).resolve().parents[2]


def fake_process(proc: Path, pid: int, ppid: int, argv0: str, rss_kb: int | None) -> None:
    directory = proc / str(pid)
    directory.mkdir()
    status = [f"Name:\t{Path(argv0).name[:15]}", f"PPid:\t{ppid}"]
    if rss_kb is not None:
        status.append(f"VmRSS:\t{rss_kb:8d} kB")
    (directory / "status").write_text("\n".join(status) + "\n")
    (directory / "cmdline").write_bytes(argv0.encode() + b"\0--model=gpt2\0")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A server (100) with two stubs, one started through a shell, beside unrelated processes."""
    fake_process(tmp_path, 1, 0, "/sbin/init", 9000)
    fake_process(tmp_path, 2, 0, "[kthreadd]", None)
    fake_process(tmp_path, 100, 1, "/x/bin/tritonserver", 200_000)
    fake_process(tmp_path, 101, 100, "/cache/backends/python/triton_python_backend_stub", 600_000)
    fake_process(tmp_path, 102, 100, "/bin/bash", 3000)
    fake_process(tmp_path, 103, 102, "/cache/backends/python/triton_python_backend_stub", 700_000)
    fake_process(tmp_path, 200, 1, "/cache/backends/python/triton_python_backend_stub", 5)  # not this server's
    (tmp_path / "self").mkdir()
    return tmp_path


def test_the_stubs_are_found_at_any_depth_below_their_server_only(proc: Path):
    assert soak.descendants(100, proc) == [101, 102, 103]
    assert soak.stub_pids(100, proc) == [101, 103]
    assert soak.memory_sample(100, proc) == {"tritonserver": 200_000, "stub 101": 600_000, "stub 103": 700_000}


def test_a_process_that_is_gone_or_has_no_memory_is_left_out(proc: Path):
    (proc / "101" / "status").unlink()
    (proc / "101" / "cmdline").unlink()
    assert soak.rss_kb(2, proc) is None
    assert soak.rss_kb(999, proc) is None
    assert soak.memory_sample(100, proc) == {"tritonserver": 200_000, "stub 103": 700_000}


def samples(stub_mb: list[float], idle_mb: list[float] = (), interval: float = 10.0) -> list[dict]:
    load = [{"t": i * interval, "phase": "load", "rss_kb": {"stub 7": mb * 1024}} for i, mb in enumerate(stub_mb)]
    after = len(stub_mb)
    idle = [
        {"t": (after + i) * interval, "phase": "idle", "rss_kb": {"stub 7": mb * 1024}} for i, mb in enumerate(idle_mb)
    ]
    return load + idle


def test_memory_that_rises_then_levels_off_is_a_plateau():
    # The shape of the report in the issue: steps up early, then flat (within noise) for the second half.
    rss = [618, 930, 1146, 1210] + [1210 + (i % 3) for i in range(16)]
    v = soak.verdict(samples(rss, idle_mb=[1205, 1205]), "stub 7")
    assert (v.start_mb, v.peak_mb, v.idle_mb) == (618, 1212, 1205)
    assert v.plateau is True and v.label == "plateau"
    assert abs(v.growth_mb) <= 2


def test_a_steady_leak_is_still_growing_however_slow_the_start():
    rss = [600 + 4 * i for i in range(60)]  # 4 MB every 10 s: 108 MB over the second half, against 8
    v = soak.verdict(samples(rss), "stub 7")
    assert v.plateau is False and v.label == "still growing"
    assert v.slope_mb_per_hour == pytest.approx(4 * 360)
    assert v.growth_mb == pytest.approx(4 * (58 - 31))
    assert v.bound_mb == soak.PLATEAU_FLOOR_MB


def test_a_large_process_is_held_to_a_fraction_of_itself():
    rss = [6000.0] * 10 + [6000.0 + 5 * i for i in range(12)]  # 6 GB: 40 MB over the second half, against 60
    v = soak.verdict(samples(rss), "stub 7")
    assert v.growth_mb == pytest.approx(40)
    assert v.bound_mb == pytest.approx(0.01 * 6010)
    assert v.plateau is True
    assert soak.verdict(samples(rss), "stub 7", fraction=0.005).plateau is False


def test_growth_is_split_into_heap_files_and_shared_memory_as_the_verdict_halves_the_load(tmp_path: Path):
    # Heap flat, the shared-memory pool growing 2 MB a sample, files constant; a sample without the split
    # (an older results file) gives no split at all.
    load = [
        {"t": i * 10.0, "phase": "load", "rss_kb": {"stub 7": 0},
         "rss_parts_kb": {"stub 7": {"anon": 500 * 1024, "file": 80 * 1024, "shmem": (10 + 2 * i) * 1024}}}
        for i in range(20)
    ]  # fmt: skip
    growth = soak.growth_by_part(load)["stub 7"]
    assert growth == {"anon": 0.0, "file": 0.0, "shmem": pytest.approx(2 * (18 - 11))}
    assert soak.growth_by_part([{**s, "rss_parts_kb": {}} for s in load]) == {}
    fake_process(tmp_path, 5, 0, "/x/bin/tritonserver", 100)
    status = tmp_path / "5" / "status"
    status.write_text(status.read_text() + "RssAnon:\t  60 kB\nRssFile:\t  30 kB\nRssShmem:\t  10 kB\n")
    assert soak.rss_parts(5, tmp_path) == {"tritonserver": {"anon": 60, "file": 30, "shmem": 10}}


def test_the_bound_decides_at_its_edge():
    rss = [1000.0] * 10 + [1000.0 + 10 * i for i in range(10)]  # second half grows 70 MB over ~1010
    v = soak.verdict(samples(rss), "stub 7")
    assert v.growth_mb == pytest.approx(70)
    edge = v.growth_mb / v.half_mb
    assert soak.verdict(samples(rss), "stub 7", fraction=edge + 0.001, floor_mb=0).plateau is True
    assert soak.verdict(samples(rss), "stub 7", fraction=edge - 0.001, floor_mb=0).plateau is False
    assert soak.verdict(samples(rss), "stub 7", fraction=0, floor_mb=70.5).plateau is True


def test_too_few_samples_give_no_verdict():
    assert soak.verdict(samples([600, 700, 800, 900, 1000]), "stub 7").plateau is None
    with pytest.raises(ValueError, match="no load samples of 'stub 9'"):
        soak.verdict(samples([600]), "stub 9")


def test_token_rates_and_processes_come_from_the_samples():
    data = [
        {"t": 0, "tokens": 0, "rss_kb": {"stub 5": 1}},
        {"t": 10, "tokens": 500, "rss_kb": {"tritonserver": 1, "stub 5": 1}},
        {"t": 30, "tokens": 1500, "rss_kb": {"stub 6": 1}},
    ]
    assert soak.token_rates(data) == [(5.0, 50.0), (20.0, 50.0)]
    assert soak.processes(data) == ["tritonserver", "stub 5", "stub 6"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--duration", "30"], "--duration: must be in [60, 14400] seconds, got 30"),
        (["--duration", "half an hour"], "--duration: must be a number of seconds, got 'half an hour'"),
        (["--prompt", "128-16"], "must be LOW-HIGH with 1 <= LOW <= HIGH <= 512, got '128-16'"),
    ],
    ids=["duration-too-short", "duration-not-a-number", "prompt-range-reversed"],
)
def test_bad_flags_are_refused_naming_the_flag(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        soak.main(flags)
    assert message in capsys.readouterr().err


def test_the_soak_report_is_what_its_results_render_to():
    results = ROOT / "benchmarks" / "results" / "soak.json"
    command = [sys.executable, "-m", "benchmarks.soak", "--render", str(results)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120, cwd=ROOT)
    assert done.stdout == (ROOT / "benchmarks" / "soak.md").read_text() + "\n"
    # The figure the report shows is committed beside the results.
    assert (ROOT / "benchmarks" / "results" / "soak.png").is_file()
    assert json.loads(results.read_text())["setup"]["streams"] == 64


SMAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 08:01 1234                       /x/bin/triton_python_backend_stub
Size:                132 kB
Rss:                 128 kB
55d0c1000000-55d0f9000000 rw-p 00000000 00:00 0                          [heap]
Size:             917504 kB
KernelPageSize:        4 kB
Rss:              655360 kB
Pss:              655360 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0100000000 rw-p 00000000 00:00 0
Size:            4194304 kB
Rss:             4194304 kB
"""


def test_the_heap_is_read_from_its_own_mapping_only(proc: Path):
    (proc / "101" / "smaps").write_text(SMAPS)
    (proc / "100" / "smaps").write_text(SMAPS.split("55d0c1000000")[0])  # a process without a heap
    assert soak.heap_kb(101, proc) == {"size": 917504, "rss": 655360}
    assert soak.heap_kb(100, proc) is None
    assert soak.heap_kb(999, proc) is None
    assert soak.heap_sample(100, proc) == {"stub 101": {"size": 917504, "rss": 655360}}


def test_rss_that_grows_into_a_flat_claimed_heap_is_told_apart_from_a_growing_heap():
    # RSS rises 2 MB a sample in the second half while the claimed heap stays at 900 MB: pages of the
    # heap being touched for the first time. A heap claiming 2 MB a sample is growth of its own.
    def run(claimed: Callable[[int], float]) -> list[dict[str, Any]]:
        return [
            {"t": i * 10.0, "phase": "load", "rss_kb": {"stub 7": (5000 + 2 * i) * 1024},
             "heap_kb": {"stub 7": {"size": int(claimed(i) * 1024), "rss": (600 + 2 * i) * 1024}}}
            for i in range(40)
        ]  # fmt: skip

    flat, growing = run(lambda i: 900.0), run(lambda i: 900.0 + 2 * i)
    assert soak.verdict(flat, "stub 7", floor_mb=0, fraction=0).plateau is False  # RSS itself grows
    assert soak.verdict(flat, "stub 7", read=soak.heap_mb("stub 7")).plateau is True
    heap = soak.verdict(growing, "stub 7", read=soak.heap_mb("stub 7"), fraction=0.01)
    assert heap.plateau is False and heap.growth_mb == pytest.approx(2 * (38 - 21))
    assert soak.verdict(flat, "stub 7", read=soak.heap_mb("stub 7", "rss")).end_mb == pytest.approx(600 + 2 * 38)
    assert soak.has_heap(flat, "stub 7") and not soak.has_heap(flat, "tritonserver")
    text = soak.render(
        {"setup": {"streams": 64, "duration_s": 400, "idle_s": 0, "interval_s": 10, "prompt_tokens": [1, 2],
                   "output_tokens": [1, 2], "preset": "gpt2", "nice": 0, "malloc_arena_max": "1"},
         "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 1, "python": "3"}, "date": "d", "code": "c",
         "samples": [{**s, "tokens": i, "kv_usage": None} for i, s in enumerate(flat)], "requests_finished": 1,
         "requests_sent": 1, "errors": 0, "first_error": None, "kv_bytes_per_page": 1, "kv_pages": 1}
    )  # fmt: skip
    assert "| stub 7 | 900 | 900 | +0.0 MB | 676 | - | - | **plateau** |" in text
