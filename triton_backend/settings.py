"""The model's settings: config.pbtxt parameters, each overridable by an NLG_<NAME> variable.

Validation reports every bad setting at once, each naming the parameter and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from triton_backend.model_shapes import PRESETS

# The drain budget. Every number that bounds a shutdown derives from the longest stream the operator
# allows; nlg-triton, the test kit's server, config.pbtxt, the README's container command and the Helm
# chart take theirs from here (tests tie each to DrainBudget).
MAX_STREAM_SECONDS = 120
# The model's drain beyond the longest stream: a stream may wait for a batch slot before it runs.
DRAIN_MARGIN_SECONDS = 2
# Triton's exit timeout beyond its two waits: cancelling what the drain left, sending those final
# responses, stopping the model's threads and unloading the stub.
EXIT_MARGIN_SECONDS = 10


@dataclass(frozen=True)
class DrainBudget:
    """How long a stop may take, so that it never runs into tritonserver's forced exit.

    On SIGTERM, Triton 2.51 first waits for its HTTP connections to close (an HTTP stream ends within
    ``max_stream_seconds``), then unloads the model, whose finalize() lets the streams still open
    (gRPC ones, and any accepted meanwhile) finish for up to ``drain_seconds`` and cancels the rest,
    each with a final response. Both waits count against one ``--exit-timeout-secs``; past it Triton
    exits with the model's threads still running and aborts.
    """

    max_stream_seconds: int = MAX_STREAM_SECONDS

    def __post_init__(self) -> None:
        if self.max_stream_seconds < 1:
            raise ValueError(f"max_stream_seconds: must be an integer >= 1, got {self.max_stream_seconds}")

    @property
    def drain_seconds(self) -> int:
        """The model setting `drain_seconds` (NLG_DRAIN_SECONDS)."""
        return self.max_stream_seconds + DRAIN_MARGIN_SECONDS

    @property
    def exit_timeout_seconds(self) -> int:
        """tritonserver --exit-timeout-secs: the HTTP wait, then the model's drain, then the margin."""
        return self.max_stream_seconds + self.drain_seconds + EXIT_MARGIN_SECONDS

    def grace_period_seconds(self, pre_stop_seconds: int, margin_seconds: int) -> int:
        """A pod's terminationGracePeriodSeconds: its preStop hook runs first, then SIGTERM."""
        return pre_stop_seconds + self.exit_timeout_seconds + margin_seconds


DEFAULTS = {
    "preset": "gpt2",
    "weights_path": "",
    "dtype": "auto",
    "max_num_seqs": "64",
    "kv_cache_bytes": "0",
    "memory_utilization": "0.9",
    "prefill_chunk_tokens": "256",
    "max_n": "8",
    "seed": "0",
    "cuda_graphs": "true",
    "drain_seconds": str(DrainBudget().drain_seconds),
}
DTYPES = ("auto", "float32", "float16", "bfloat16")


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
    kv_cache_bytes: int  # 0: sized from memory_utilization (memory_budget)
    memory_utilization: float  # the share of memory the instance may use (memory_budget)
    prefill_chunk_tokens: int
    max_n: int
    seed: int
    cuda_graphs: bool  # GPU instances replay steps from CUDA graphs (gpu_kernels, graph_steps)
    # A retiring instance lets its streams finish for this long before cancelling them (DrainBudget).
    drain_seconds: int


def load_settings(parameters: Mapping[str, str], environ: Mapping[str, str]) -> ModelSettings:
    """Settings from config.pbtxt `parameters` (name -> string) with NLG_* variables on top."""
    raw = dict(DEFAULTS)
    errors = [
        f"parameters: unknown key {key!r}; known: {', '.join(DEFAULTS)}"
        for key in parameters
        if key not in raw
    ]
    raw.update({k: v for k, v in parameters.items() if k in raw})
    raw.update({key: environ[f"NLG_{key.upper()}"] for key in DEFAULTS if f"NLG_{key.upper()}" in environ})

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
    if raw["dtype"] not in DTYPES:
        errors.append(f"dtype: must be one of {', '.join(DTYPES)}, got {raw['dtype']!r}")
    try:
        utilization = float(raw["memory_utilization"])
    except ValueError:
        utilization = float("nan")
    if not 0 < utilization <= 1:  # NaN fails too
        errors.append(f"memory_utilization: must be a number in (0, 1], got {raw['memory_utilization']!r}")
    flag = raw["cuda_graphs"].strip().lower()
    if flag not in ("true", "false"):
        errors.append(f"cuda_graphs: must be true or false, got {raw['cuda_graphs']!r}")
    settings = ModelSettings(
        preset=raw["preset"],
        weights_path=raw["weights_path"],
        dtype=raw["dtype"],
        max_num_seqs=integer("max_num_seqs", 1),
        kv_cache_bytes=integer("kv_cache_bytes", 0),
        memory_utilization=utilization,
        prefill_chunk_tokens=integer("prefill_chunk_tokens", 1),
        max_n=integer("max_n", 1),
        seed=integer("seed", 0),
        cuda_graphs=flag == "true",
        drain_seconds=integer("drain_seconds", 0),
    )
    if errors:
        raise InvalidSettings(errors)
    return settings
