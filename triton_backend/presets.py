"""GPT-2 architectures by name, and building a model from a preset or a checkpoint on disk.

No machine this runs on can reach a model hub, so weights come only from `weights_path` (a Hugging
Face checkpoint directory: config.json + safetensors). Without one, the preset's architecture is
initialised randomly from a fixed seed and `ModelInfo.random_weights` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from triton_backend.model_shapes import CONTEXT_LENGTH, EOS_TOKEN_ID, PRESETS, SHAPES, VOCAB_SIZE

DEFAULT_SEED = 0


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded, for logs and the model's metadata."""

    preset: str
    source: str
    random_weights: bool
    parameters: int
    dtype: str
    device: str
    seed: int = DEFAULT_SEED  # of the random initialisation (random weights only)

    def describe(self) -> str:
        weights = (
            f"RANDOM weights (seed {self.seed}; no weights_path given, outputs are not meaningful text)"
            if self.random_weights
            else f"weights from {self.source}"
        )
        return (
            f"{self.preset}: {self.parameters / 1e6:.1f}M parameters, {weights}, "
            f"{self.dtype} on {self.device}"
        )


def preset_config(name: str) -> GPT2Config:
    if name not in SHAPES:
        raise ValueError(f"preset: {name!r} is not one of {', '.join(PRESETS)}")
    n_embd, n_layer, n_head = SHAPES[name]
    return GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=CONTEXT_LENGTH,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=EOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
    )


def default_dtype(device: torch.device) -> torch.dtype:
    """fp16 on GPU (bf16 where asked), fp32 on CPU where half precision is slow and inexact."""
    return torch.float16 if device.type == "cuda" else torch.float32


def parse_dtype(name: str, device: torch.device) -> torch.dtype:
    choices = {"auto": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name not in choices:
        raise ValueError(f"dtype: {name!r} is not one of {', '.join(choices)}")
    return choices[name] or default_dtype(device)


def build_model(
    preset: str,
    weights_path: str | None,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = DEFAULT_SEED,
) -> tuple[GPT2LMHeadModel, ModelInfo]:
    """The model in eval mode on `device`, with what was loaded described in `ModelInfo`."""
    if weights_path:
        path = Path(weights_path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"weights_path: {path} must be a Hugging Face checkpoint directory with config.json "
                "and model.safetensors (as written by save_pretrained)"
            )
        model = GPT2LMHeadModel.from_pretrained(path, dtype=dtype)
        source, random_weights = str(path), False
    else:
        config = preset_config(preset)
        # Initialised on the device itself: gpt2-xl's 1.5B normal draws take tens of seconds on a CPU.
        # (So a seed gives other weights on a GPU than on the CPU; each is reproducible.)
        gpus = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=gpus), device:
            torch.manual_seed(seed)
            model = GPT2LMHeadModel(config)
        torch.nn.Module.to(model, dtype=dtype)
        source, random_weights = f"preset {preset}", True
    if model.config.n_positions < CONTEXT_LENGTH:
        raise ValueError(f"weights_path: n_positions {model.config.n_positions} is below {CONTEXT_LENGTH}")
    # nn.Module's own methods: transformers' wrappers of them are untyped.
    torch.nn.Module.to(model, device)
    torch.nn.Module.eval(model)
    info = ModelInfo(
        preset=preset if not weights_path else _preset_of(model.config) or preset,
        source=source,
        random_weights=random_weights,
        parameters=sum(p.numel() for p in model.parameters()),
        dtype=str(dtype).removeprefix("torch."),
        device=str(device),
        seed=seed,
    )
    return model, info


def _preset_of(config: GPT2Config) -> str | None:
    shape = (config.n_embd, config.n_layer, config.n_head)
    return next((name for name, s in SHAPES.items() if s == shape), None)
