"""The KV cache's byte budget: the memory the machine has left once the weights are loaded.

vLLM sizes its cache from ``gpu_memory_utilization`` and lets page-based admission do the rest; so
does this engine. ``memory_utilization`` is, on a GPU, the share of the device's memory the instance
may use (weights, working memory and cache, vLLM's semantics), and never more than is free; on the
CPU, the share of the memory available once the weights are loaded (MemAvailable, within the
headroom a container's cgroup leaves) that working memory and cache may use. Either way the budget
is capped at what ``max_num_seqs`` full-context sequences need, and an explicit ``kv_cache_bytes``
wins over all of it.

Everything here is arithmetic over numbers (`host_memory`, `working_bytes`, `cache_budget`), which
tests drive with the numbers of machines they do not have, plus two thin readers of the machine this
runs on: `read_host_memory` (/proc and /sys) and `read_cuda_memory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from triton_backend.kv_cache import CacheShape

#: A cgroup v1 "no limit" is the largest page-aligned signed 64-bit value; anything this large is none.
_NO_LIMIT = 1 << 60


class CacheDoesNotFit(ValueError):
    """Not even one full-context sequence fits: a one-line message naming the settings to change."""


@dataclass(frozen=True)
class Memory:
    """The memory of the device the cache goes on, read after the weights were loaded."""

    device: str  # "cuda" or "cpu"
    total: int  # the GPU's memory; the host's, within the cgroup's limit
    available: int  # free for this instance now


@dataclass(frozen=True)
class CgroupLevel:
    """One cgroup on the way from the process's own to the root: its limit and what it uses."""

    limit: int | None  # None: no limit at this level
    used: int  # usage less inactive file pages (the kernel reclaims those first; kubelet's working set)


@dataclass(frozen=True)
class CacheBudget:
    bytes: int  # the budget, whole pages of it to be taken
    sequence_bytes: int  # one full-context sequence
    how: str  # what it was sized from, with the numbers, for the load log and the error


def size_text(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def host_memory(mem_total: int, mem_available: int, cgroups: Sequence[CgroupLevel]) -> Memory:
    """The host's memory as a process in `cgroups` may use it: the tightest limit and headroom win."""
    total, available = mem_total, mem_available
    for level in cgroups:
        if level.limit is not None and level.limit < _NO_LIMIT:
            total = min(total, level.limit)
            available = min(available, max(level.limit - level.used, 0))
    return Memory("cpu", total, available)


def working_bytes(shape: CacheShape, vocab_size: int, max_num_seqs: int, prefill_chunk_tokens: int) -> int:
    """Memory a step needs beside the weights and the cache, at the settings' largest step.

    An eager decode step gathers each layer's keys and values of every sequence over the longest
    span in the batch (one layer's while the next is gathered: two); the step's hidden states take a
    dozen widths per token (the MLP is four wide); the logits are float32, and the sampler copies them.
    Under CUDA graphs attention reads the pages in place; the gather's share then stands for the
    graphs' pool and the CUDA context.
    """
    element = shape.element_bytes
    width = shape.n_head * shape.head_dim
    sequence = shape.bytes_per_page * shape.pages_per_sequence
    gathered = 2 * max_num_seqs * sequence // shape.n_layer
    hidden = 12 * (max_num_seqs + prefill_chunk_tokens) * width * element
    logits = 4 * max_num_seqs * vocab_size * 4
    return gathered + hidden + logits


def cache_budget(
    memory: Memory,
    *,
    weights: int,
    working: int,
    fraction: float,
    sequence_bytes: int,
    max_num_seqs: int,
) -> CacheBudget:
    """The cache's bytes from `memory` (read after `weights` were loaded): `fraction` of it less the
    `working` memory of a step, at most `max_num_seqs` full-context sequences of `sequence_bytes`.

    Raises CacheDoesNotFit where not even one sequence fits.
    """
    if memory.device == "cuda":
        usable = min(int(fraction * memory.total) - weights, memory.available) - working
        total, free = size_text(memory.total), size_text(memory.available)
        of = f"{total} GPU memory ({free} free) less the weights ({size_text(weights)}) and"
    else:
        usable = int(fraction * memory.available) - working
        of = f"the {size_text(memory.available)} host memory available after the weights ({size_text(weights)}) less"
    left = size_text(max(usable, 0))
    how = f"memory_utilization {fraction:g} of {of} working memory ({size_text(working)}) leaves {left}"
    if usable < sequence_bytes:
        raise CacheDoesNotFit(
            f"KV cache: {how}, below the {size_text(sequence_bytes)} one full-context sequence needs; lower "
            f"max_num_seqs ({max_num_seqs}), raise memory_utilization, use a smaller preset or dtype, or give the "
            "instance more memory (kv_cache_bytes sets the cache's size outright)"
        )
    wanted = sequence_bytes * max_num_seqs
    if usable >= wanted:
        return CacheBudget(wanted, sequence_bytes, f"max_num_seqs, as {how}")
    return CacheBudget(usable, sequence_bytes, how)


def fixed_budget(kv_cache_bytes: int, sequence_bytes: int) -> CacheBudget:
    """The budget an explicit ``kv_cache_bytes`` sets; it must hold one full-context sequence."""
    if kv_cache_bytes < sequence_bytes:
        raise CacheDoesNotFit(
            f"kv_cache_bytes: {kv_cache_bytes} is below the {sequence_bytes} bytes one full-context sequence "
            "needs; raise it, or set 0 to size the cache from memory_utilization"
        )
    return CacheBudget(kv_cache_bytes, sequence_bytes, f"kv_cache_bytes {kv_cache_bytes}")


def _parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in bytes."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def read_host_memory(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> Memory:
    """The host's memory for this process: /proc/meminfo and its memory cgroup (v2 or v1) and the
    cgroups above it, each limit and usage as the kernel states them."""
    meminfo = _parse_meminfo((proc / "meminfo").read_text())
    return host_memory(meminfo["MemTotal"], meminfo["MemAvailable"], _cgroup_levels(proc, cgroup_root))


def read_cuda_memory(device: torch.device) -> Memory:
    free, total = torch.cuda.mem_get_info(device)
    return Memory("cuda", total, free)


def read_memory(device: torch.device) -> Memory:
    return read_cuda_memory(device) if device.type == "cuda" else read_host_memory()


def _cgroup_levels(proc: Path, root: Path) -> list[CgroupLevel]:
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return []
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]  # id:controllers:path
    v1 = [path for _, controllers, path in entries if "memory" in controllers.split(",")]
    v2 = [path for hierarchy, controllers, path in entries if hierarchy == "0" and not controllers]
    if v1:
        return _walk(root / "memory", v1[0], "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    if v2:
        return _walk(root, v2[0], "memory.max", "memory.current", "inactive_file")
    return []


def _memory_stat(path: Path) -> dict[str, int]:
    try:
        pairs = [line.split() for line in path.read_text().splitlines()]
    except OSError:
        return {}
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def _walk(mount: Path, path: str, limit_file: str, usage_file: str, inactive: str) -> list[CgroupLevel]:
    # Inside a container's cgroup namespace the path names the host's hierarchy, which the container
    # sees mounted at its own cgroup: start from the mount then.
    here = mount / path.lstrip("/")
    here = here if here.is_dir() else mount
    levels = []
    for directory in (here, *here.parents):
        if not directory.is_relative_to(mount):
            break
        try:
            limit_text = (directory / limit_file).read_text().strip()
            limit = None if limit_text == "max" else int(limit_text)
            usage = int((directory / usage_file).read_text())
        except (OSError, ValueError):
            continue  # the root cgroup has neither file
        stat = _memory_stat(directory / "memory.stat")
        levels.append(CgroupLevel(limit, max(usage - stat.get(inactive, 0), 0)))
    return levels
