"""The model's settings: config.pbtxt parameters, each overridable by an NLG_<NAME> variable.

Validation reports every bad setting at once, each naming the parameter and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from triton_backend.presets import PRESETS

_DEFAULTS = {
    "preset": "gpt2",
    "weights_path": "",
    "dtype": "auto",
    "max_num_seqs": "64",
    "kv_cache_bytes": "0",
    "prefill_chunk_tokens": "256",
    "max_n": "8",
    "seed": "0",
    "cuda_graphs": "true",
    "drain_seconds": "30",
}
_DTYPES = ("auto", "float32", "float16", "bfloat16")


class InvalidSettings(ValueError):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid model settings: " + "; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class ModelSettings:
    preset: str
    weights_path: str
    dtype: str
    max_num_seqs: int
    kv_cache_bytes: int  # 0: room for max_num_seqs sequences
    prefill_chunk_tokens: int
    max_n: int
    seed: int
    cuda_graphs: bool  # GPU instances replay steps from CUDA graphs (gpu_kernels, graph_steps)
    drain_seconds: int  # a retiring instance lets its streams finish for this long before cancelling them


def load_settings(parameters: Mapping[str, str], environ: Mapping[str, str]) -> ModelSettings:
    """Settings from config.pbtxt `parameters` (name -> string) with NLG_* variables on top."""
    raw = dict(_DEFAULTS)
    errors = [
        f"parameters: unknown key {key!r}; known: {', '.join(_DEFAULTS)}"
        for key in parameters
        if key not in raw
    ]
    raw.update({k: v for k, v in parameters.items() if k in raw})
    raw.update({key: environ[f"NLG_{key.upper()}"] for key in _DEFAULTS if f"NLG_{key.upper()}" in environ})

    def integer(key: str, minimum: int) -> int:
        try:
            value = int(raw[key])
        except ValueError:
            errors.append(f"{key}: must be an integer >= {minimum}, got {raw[key]!r}")
            return minimum
        if value < minimum:
            errors.append(f"{key}: must be an integer >= {minimum}, got {value}")
        return value

    if raw["preset"] not in PRESETS:
        errors.append(f"preset: must be one of {', '.join(PRESETS)}, got {raw['preset']!r}")
    if raw["dtype"] not in _DTYPES:
        errors.append(f"dtype: must be one of {', '.join(_DTYPES)}, got {raw['dtype']!r}")
    flag = raw["cuda_graphs"].strip().lower()
    if flag not in ("true", "false"):
        errors.append(f"cuda_graphs: must be true or false, got {raw['cuda_graphs']!r}")
    settings = ModelSettings(
        preset=raw["preset"],
        weights_path=raw["weights_path"],
        dtype=raw["dtype"],
        max_num_seqs=integer("max_num_seqs", 1),
        kv_cache_bytes=integer("kv_cache_bytes", 0),
        prefill_chunk_tokens=integer("prefill_chunk_tokens", 1),
        max_n=integer("max_n", 1),
        seed=integer("seed", 0),
        cuda_graphs=flag == "true",
        drain_seconds=integer("drain_seconds", 0),
    )
    if errors:
        raise InvalidSettings(errors)
    return settings
