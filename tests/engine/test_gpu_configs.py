"""The committed kernel choices: they parse, every block shape is one the kernels accept, they are what
the committed tuning results say, and the GPU report is what its results files render to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triton_backend.gpu_configs import CUBLAS_ONLY, DEFAULT_ATTENTION, DEFAULT_LINEAR, TABLE, KernelChoices, choices_for
from triton_backend.gpu_kernels import LinearConfig
from triton_backend.model_shapes import PRESETS
from triton_backend.presets import preset_config

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def test_every_committed_choice_parses_and_fits_the_kernels():
    shapes = set()
    for preset in PRESETS:
        e = preset_config(preset).n_embd
        shapes |= {f"{3 * e}x{e}", f"{e}x{e}", f"{4 * e}x{e}", f"{e}x{4 * e}", f"50257x{e}"}
    table = json.loads(TABLE.read_text())
    assert table
    for device in table:
        choices = choices_for(device)
        assert set(choices.linear) <= shapes, device
        for entry in choices.linear.values():
            assert [most for most, _ in entry] == sorted(most for most, _ in entry)
            for _, config in entry:
                if config is not None:
                    assert _pow2(config.block_n) and _pow2(config.block_k) and _pow2(config.warps)
                    assert not config.dot or config.block_n >= 16
                    assert config.split >= 1
        for _, attention in choices.attention:
            assert _pow2(attention.block) and attention.split % attention.block == 0


def test_a_split_workspace_is_sized_for_the_largest_split_within_the_steps_rows():
    four, eight = LinearConfig(False, 32, 64, 4, split=4), LinearConfig(True, 64, 64, 4, split=8)
    choices = KernelChoices(
        linear={
            "1600x1600": ((2, four), (16, eight), (1 << 30, None)),
            "6400x1600": ((1 << 30, None),),
            "50257x1600": ((1 << 30, LinearConfig(True, 64, 64, 4)),),
        }
    )
    assert choices.split_needs(64) == (8 * 16 * 1600, 1600 // 32)
    assert choices.split_needs(8) == (8 * 8 * 1600, 1600 // 32)
    assert choices.split_needs(1) == (4 * 1 * 1600, 1600 // 32)
    assert KernelChoices(linear={"6400x1600": ((1 << 30, None),)}).split_needs(64) == (0, 0)


def test_an_unmeasured_gpu_gets_the_defaults():
    choices = choices_for("a GPU nobody measured")
    assert choices.linear_for(1, 4800, 1600) == DEFAULT_LINEAR[-1][1]
    assert choices.attention == DEFAULT_ATTENTION
    assert CUBLAS_ONLY.linear_for(1, 50257, 1600) is None


@pytest.mark.parametrize("tuning_file", ["tune_gpu_kernels.json", "tune_gpu_kernels_h200.json"])
def test_the_committed_choices_are_what_the_committed_tuning_measured(tuning_file):
    tuning = json.loads((RESULTS / tuning_file).read_text())
    choices = choices_for(tuning["device"])
    for row in tuning["linear"]:
        chosen = choices.linear_for(row["rows"], row["n"], row["k"])
        faster = row["best_us"] < row["cublas_us"]
        assert chosen == (LinearConfig(**row["best"]) if faster else None), row
    for row in tuning["attention"]:
        assert choices.attention_for(row["rows"]).__dict__ == row["best"]


@pytest.mark.parametrize(
    ("report", "results", "tuning"),
    [
        ("engine_gpu.md", ["engine_gpu.json", "engine_gpu_triton.json"], "tune_gpu_kernels.json"),
        ("engine_gpu_h200.md", ["engine_gpu_h200.json", "engine_gpu_h200_triton.json"], "tune_gpu_kernels_h200.json"),
    ],
)
def test_each_gpu_report_is_what_its_results_render_to(report, results, tuning):
    command = [
        sys.executable, "-m", "benchmarks.engine_gpu", "--render", *(str(RESULTS / name) for name in results),
        "--tuning", str(RESULTS / tuning),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120, cwd=ROOT)
    assert done.stdout == (ROOT / "benchmarks" / report).read_text() + "\n"
