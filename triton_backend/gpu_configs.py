"""Which kernel runs each projection and attention of a captured step, and with what block shapes.

The choices are measured per GPU model by `benchmarks/tune_gpu_kernels.py`, which writes
`gpu_configs.json` (keyed by the name torch reports for the device); a device it has not measured gets
the defaults below. A projection's entry is a list of [most rows, config] pairs, the first that holds
the step's rows applies; a config of null means cuBLAS (through torch) rather than our kernel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from triton_backend.gpu_kernels import AttentionConfig, LinearConfig

TABLE = Path(__file__).with_name("gpu_configs.json")

# Unmeasured devices: cuBLAS, which no streaming kernel of ours beat on an H100 but for the LM head.
DEFAULT_LINEAR: tuple[tuple[int, LinearConfig | None], ...] = ((1 << 30, None),)
# Splits of the context while rows x heads is too few to fill the multiprocessors (an H100's choice).
DEFAULT_ATTENTION: tuple[tuple[int, AttentionConfig], ...] = (
    (2, AttentionConfig(split=16, block=16, warps=1)),
    (16, AttentionConfig(split=32, block=16, warps=1)),
    (32, AttentionConfig(split=64, block=16, warps=1)),
    (1 << 30, AttentionConfig(split=1 << 20, block=32, warps=2)),
)


@dataclass(frozen=True)
class KernelChoices:
    linear: dict[str, tuple[tuple[int, LinearConfig | None], ...]]
    attention: tuple[tuple[int, AttentionConfig], ...] = DEFAULT_ATTENTION
    other_linear: tuple[tuple[int, LinearConfig | None], ...] = DEFAULT_LINEAR  # shapes the table lacks

    def linear_for(self, rows: int, n: int, k: int) -> LinearConfig | None:
        table = self.linear.get(f"{n}x{k}", self.other_linear)
        return next((config for most, config in table if rows <= most), table[-1][1])

    def split_needs(self, max_rows: int) -> tuple[int, int]:
        """The partials and counters a split-K workspace needs for steps of up to `max_rows` rows."""
        floats = blocks = 0
        for shape, table in self.linear.items():
            n = int(shape.split("x")[0])
            least = 0
            for most, config in table:
                if config is not None and config.split > 1 and least < max_rows:
                    floats = max(floats, config.split * min(most, max_rows) * n)
                    blocks = max(blocks, -(-n // config.block_n))
                least = most
        return floats, blocks

    def attention_for(self, rows: int) -> AttentionConfig:
        return next((config for most, config in self.attention if rows <= most), self.attention[-1][1])


def parse_linear(entry: list[Any]) -> tuple[tuple[int, LinearConfig | None], ...]:
    return tuple((int(most), None if config is None else LinearConfig(**config)) for most, config in entry)


def parse_attention(entry: list[Any]) -> tuple[tuple[int, AttentionConfig], ...]:
    return tuple((int(most), AttentionConfig(**config)) for most, config in entry)


# The path before these kernels: cuBLAS for every projection, one attention program per row and head.
CUBLAS_ONLY = KernelChoices(
    linear={},
    attention=((1 << 30, AttentionConfig(split=1 << 20, block=16, warps=1)),),
    other_linear=((1 << 30, None),),
)


@lru_cache(maxsize=8)
def choices_for(device_name: str, table: Path = TABLE) -> KernelChoices:
    """The measured choices for this GPU model, or the defaults."""
    measured = json.loads(table.read_text()).get(device_name, {}) if table.is_file() else {}
    return KernelChoices(
        linear={shape: parse_linear(entry) for shape, entry in measured.get("linear", {}).items()},
        attention=parse_attention(measured["attention"]) if "attention" in measured else DEFAULT_ATTENTION,
    )
