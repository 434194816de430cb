"""The KV cache's budget (triton_backend/memory_budget.py): arithmetic driven with the numbers of
machines this suite does not run on, the /proc and /sys reader over trees of the test's own, and
build_engine sizing a real cache from a memory reading it is handed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from engine_testkit import tiny_model
from transformers import GPT2LMHeadModel

from triton_backend.engine_factory import build_engine
from triton_backend.memory_budget import (
    CacheDoesNotFit,
    CgroupLevel,
    Memory,
    cache_budget,
    fixed_budget,
    host_memory,
    read_host_memory,
    working_bytes,
)
from triton_backend.presets import PRESETS, VOCAB_SIZE, default_dtype, preset_config
from triton_backend.runner import cache_shape
from triton_backend.settings import load_settings

GiB = 2**30
CPU = torch.device("cpu")
UNLIMITED_V1 = 9223372036854771712  # cgroup v1's memory.limit_in_bytes without a limit


@pytest.mark.parametrize(
    ("levels", "want_total", "want_available"),
    [
        ([], 24 * GiB, 20 * GiB),
        ([CgroupLevel(None, 5 * GiB)], 24 * GiB, 20 * GiB),
        ([CgroupLevel(UNLIMITED_V1, 5 * GiB)], 24 * GiB, 20 * GiB),
        # A pod limit: its headroom, not the host's MemAvailable, is what the instance may take.
        ([CgroupLevel(16 * GiB, 4 * GiB)], 16 * GiB, 12 * GiB),
        # The host has less free than the limit leaves.
        ([CgroupLevel(32 * GiB, 1 * GiB)], 24 * GiB, 20 * GiB),
        # Nested: the tightest limit and the tightest headroom, from different levels.
        ([CgroupLevel(20 * GiB, 2 * GiB), CgroupLevel(22 * GiB, 14 * GiB)], 20 * GiB, 8 * GiB),
        ([CgroupLevel(8 * GiB, 9 * GiB)], 8 * GiB, 0),
    ],
    ids=["no-cgroup", "v2-max", "v1-unlimited", "pod-limit", "host-tighter", "nested", "over-limit"],
)
def test_host_memory_takes_the_tightest_of_host_and_cgroups(levels, want_total, want_available):
    assert host_memory(24 * GiB, 20 * GiB, levels) == Memory("cpu", want_total, want_available)


SEQ = 100 * 2**20  # one full-context sequence in the budget tests


@pytest.mark.parametrize(
    ("memory", "fraction", "want"),
    [
        # CPU: the share of what is available after the weights, less working memory, capped at 64 sequences.
        (Memory("cpu", 24 * GiB, 20 * GiB), 0.9, 64 * SEQ),
        (Memory("cpu", 24 * GiB, 4 * GiB), 0.9, int(0.9 * 4 * GiB) - GiB),
        (Memory("cpu", 24 * GiB, 4 * GiB), 0.5, 2 * GiB - GiB),
        # GPU: the share of the whole device, less the weights (3 GiB) and working memory (1 GiB).
        (Memory("cuda", 16 * GiB, 12 * GiB), 0.5, 4 * GiB),
        # ... and never more than is free: another process holds most of the device.
        (Memory("cuda", 16 * GiB, 3 * GiB), 0.9, 2 * GiB),
    ],
    ids=["cpu-capped", "cpu-bounded", "cpu-half", "gpu-share", "gpu-free"],
)
def test_the_budget_is_the_share_left_capped_at_max_num_seqs(memory, fraction, want):
    budget = cache_budget(memory, weights=3 * GiB, working=GiB, fraction=fraction, sequence_bytes=SEQ, max_num_seqs=64)
    assert budget.bytes == want
    assert budget.sequence_bytes == SEQ
    assert f"memory_utilization {fraction:g}" in budget.how


@pytest.mark.parametrize("memory", [Memory("cpu", 8 * GiB, GiB + SEQ - 1), Memory("cuda", 8 * GiB, 8 * GiB)])
def test_not_one_full_context_sequence_is_one_line_naming_the_settings(memory):
    with pytest.raises(CacheDoesNotFit) as caught:
        cache_budget(memory, weights=7 * GiB, working=GiB, fraction=1.0, sequence_bytes=SEQ, max_num_seqs=64)
    message = str(caught.value)
    assert "\n" not in message
    for needle in ("max_num_seqs (64)", "memory_utilization 1", "kv_cache_bytes", "100.0 MiB", "1.00 GiB"):
        assert needle in message, needle


def test_an_explicit_kv_cache_bytes_wins_and_must_hold_one_sequence():
    assert fixed_budget(3 * SEQ, SEQ).bytes == 3 * SEQ
    with pytest.raises(CacheDoesNotFit, match=f"^kv_cache_bytes: {SEQ - 1} is below the {SEQ} bytes one"):
        fixed_budget(SEQ - 1, SEQ)


# The machines the defaults must fit, in the numbers the probe reads there. A 24 GB CPU host: the OS,
# tritonserver and the stub with torch loaded hold about 2 GiB before the weights, and once packed for
# oneDNN the weights hold half as much again (glibc keeps the originals' blocks for reuse; gpt2-xl's
# stub measured 5.8 GiB of weights, 2.9 GiB beside them and its cache). A 16 GB T4 (the GPU the thesis
# measured on): cudaMemGetInfo reports about 14.7 GiB in all, and the CUDA context takes about 0.4 GiB.
HOST_BYTES, HOST_USED, HOST_WEIGHTS_HELD = 24 * 10**9, 2 * GiB, 1.5
T4_BYTES, T4_CONTEXT = int(14.5 * GiB), GiB // 2


def default_budget(preset: str, device: str) -> tuple[int, int, int]:
    """(cache bytes, one sequence's bytes, weights bytes) of `preset` at the default settings."""
    settings = load_settings({}, {"NLG_PRESET": preset})
    with torch.device("meta"):
        model = GPT2LMHeadModel(preset_config(preset))
    model = model.to(default_dtype(torch.device(device)))
    shape = cache_shape(model)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    sequence = shape.bytes_per_page * shape.pages_per_sequence
    if device == "cpu":
        held = int(HOST_WEIGHTS_HELD * weights)
        memory = Memory("cpu", HOST_BYTES, HOST_BYTES - HOST_USED - held)
    else:
        held = weights
        memory = Memory("cuda", T4_BYTES, T4_BYTES - T4_CONTEXT - held)
    working = working_bytes(shape, model.config.vocab_size, settings.max_num_seqs, settings.prefill_chunk_tokens)
    budget = cache_budget(
        memory,
        weights=weights,
        working=working,
        fraction=settings.memory_utilization,
        sequence_bytes=sequence,
        max_num_seqs=settings.max_num_seqs,
    )
    assert held + working + budget.bytes <= memory.total - (HOST_USED if device == "cpu" else T4_CONTEXT)
    return budget.bytes, sequence, weights


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["24GB-host", "16GB-T4"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_loads_at_its_defaults_on_the_machines_it_targets(preset, device):
    budget, sequence, _ = default_budget(preset, device)
    defaults = load_settings({}, {})
    # Room for a request of max_n choices at full context, so the default max_n stays as it is.
    assert budget // sequence >= defaults.max_n


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["24GB-host", "16GB-T4"])
def test_gpt2_xl_gets_what_fits_not_max_num_seqs_full_contexts(device):
    budget, sequence, weights = default_budget("gpt2-xl", device)
    room = HOST_BYTES if device == "cpu" else T4_BYTES
    assert weights + 64 * sequence > room  # what it asked for before: more than the machine has
    assert 8 * sequence <= budget < 64 * sequence


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_machine(tmp_path: Path, cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, sys_cgroup = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "meminfo", "MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   20000000 kB\n")
    write(proc / "self" / "cgroup", cgroup)
    for name, text in files.items():
        write(sys_cgroup / name, text)
    return proc, sys_cgroup


def test_the_reader_walks_a_cgroup_v2_hierarchy(tmp_path):
    proc, root = fake_machine(
        tmp_path,
        "not a cgroup line\n0::/kubepods/pod1/triton\n",
        {
            "kubepods/pod1/memory.max": f"{8 * GiB}\n",
            "kubepods/pod1/memory.current": f"{3 * GiB}\n",
            "kubepods/pod1/memory.stat": f"anon 1\ninactive_file {GiB}\n",
            "kubepods/pod1/triton/memory.max": "max\n",
            "kubepods/pod1/triton/memory.current": f"{GiB}\n",
            "kubepods/memory.max": "max\n",
            "kubepods/memory.current": f"{9 * GiB}\n",
        },
    )
    # The pod's 8 GiB less its 3 GiB, of which 1 GiB is inactive file cache the kernel reclaims first.
    assert read_host_memory(proc, root) == Memory("cpu", 8 * GiB, 6 * GiB)


def test_the_reader_finds_a_containers_own_v1_cgroup_at_the_mount(tmp_path):
    proc, root = fake_machine(
        tmp_path,
        "12:pids:/docker/abc\n4:cpu,memory:/docker/abc\n0::/\n",
        {  # inside the container's namespace its cgroup is the mount itself
            "memory/memory.limit_in_bytes": f"{4 * GiB}\n",
            "memory/memory.usage_in_bytes": f"{GiB}\n",
            "memory/memory.stat": "cache 5\ntotal_inactive_file 0\n",
        },
    )
    assert read_host_memory(proc, root) == Memory("cpu", 4 * GiB, 3 * GiB)


def test_the_reader_without_a_memory_cgroup_reads_meminfo(tmp_path):
    proc, root = fake_machine(tmp_path, "0::/\n", {})
    assert read_host_memory(proc, root) == Memory("cpu", 24000000 * 1024, 20000000 * 1024)


def test_this_machine_reads_as_a_host_with_memory_available():
    memory = read_host_memory()
    assert 0 < memory.available <= memory.total


def ample(device: torch.device) -> Memory:
    return Memory("cpu", 64 * GiB, 32 * GiB)


def tiny_settings(**values: str):
    return load_settings({}, {"NLG_PRESET": "tiny", **{f"NLG_{k.upper()}": v for k, v in values.items()}})


def test_build_engine_logs_the_pages_and_the_sequences_that_fit_in_one_line(caplog):
    with caplog.at_level(logging.INFO, logger="triton_backend.engine_factory"):
        built = build_engine(tiny_settings(cuda_graphs="false"), CPU, memory=ample)
    shape = built.engine.cache.shape
    assert built.engine.cache.num_pages == 64 * shape.pages_per_sequence  # capped at max_num_seqs
    assert built.max_n == 8
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("KV cache:")]
    assert f"{64 * shape.pages_per_sequence} pages of 16 tokens" in line
    assert "room for 64 full-context sequences (max_num_seqs 64)" in line


def test_little_memory_gives_fewer_pages_and_lowers_max_n(caplog):
    shape = cache_shape(tiny_model())
    sequence = shape.bytes_per_page * shape.pages_per_sequence
    settings = tiny_settings(memory_utilization="1")
    working = working_bytes(shape, VOCAB_SIZE, settings.max_num_seqs, settings.prefill_chunk_tokens)
    room = working + 3 * sequence + sequence // 2  # three and a half sequences beside a step's working memory

    def scarce(device: torch.device) -> Memory:
        return Memory("cpu", 64 * GiB, room)

    with caplog.at_level(logging.INFO, logger="triton_backend.engine_factory"):
        built = build_engine(settings, CPU, memory=scarce)
    assert built.engine.cache.num_pages == (3 * sequence + sequence // 2) // shape.bytes_per_page
    assert built.max_n == 3
    assert "room for 3 full-context sequences (max_num_seqs 64)" in caplog.text
    assert "max_n lowered to 3" in caplog.text


def test_explicit_kv_cache_bytes_wins_over_the_memory_reading():
    def none_left(device: torch.device) -> Memory:
        return Memory("cpu", 64 * GiB, 0)

    built = build_engine(tiny_settings(kv_cache_bytes=str(10 * 2**20)), CPU, memory=none_left)
    assert built.engine.cache.num_pages * built.engine.cache.shape.bytes_per_page == 10 * 2**20
    assert built.budget.how == f"kv_cache_bytes {10 * 2**20}"
    with pytest.raises(CacheDoesNotFit, match="memory_utilization 0.9 of the 0.0 MiB host memory"):
        build_engine(tiny_settings(), CPU, memory=none_left)


def test_the_readme_gives_gpt2_xls_room_on_a_t4_by_this_arithmetic():
    budget, sequence, _ = default_budget("gpt2-xl", "cuda")
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert f"(`gpt2-xl` in float16: room for about {budget // sequence} full-context sequences)" in readme
