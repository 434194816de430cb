"""What a client sends the gpt2 model over gRPC: its input tensors, and a prompt of a given length.

Every client of the project builds its requests here: `nlg-client`, the demo's load, the simulator's
replay, the soak benchmark and the serving tests (which also send what a hostile client would: no
prompt, or sampling parameters that are not JSON).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import tritonclient.grpc as grpcclient


def generate_inputs(
    prompt: str | bytes | None,
    sampling: Mapping[str, Any] | str | None,
    stream: bool = True,
    **flags: bool,
) -> list[grpcclient.InferInput]:
    """The inputs of one request: ``text_input`` and ``sampling_parameters`` (left out when None;
    a str is sent as it is), ``stream``, and one BOOL input per flag (``return_finish_reason=True``)."""
    values: dict[str, tuple[np.ndarray[Any, Any], str]] = {}
    if prompt is not None:
        raw = prompt.encode() if isinstance(prompt, str) else prompt
        values["text_input"] = (np.array([raw], dtype=np.object_), "BYTES")
    if sampling is not None:
        text = sampling if isinstance(sampling, str) else json.dumps(dict(sampling))
        values["sampling_parameters"] = (np.array([text.encode()], dtype=np.object_), "BYTES")
    values["stream"] = (np.array([stream]), "BOOL")
    for name, flag in flags.items():
        values[name] = (np.array([flag]), "BOOL")
    inputs = []
    for name, (value, dtype) in values.items():
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


# Common English words that GPT-2's tokenizer keeps as one token each, with or without the leading space.
WORDS: Final = (
    "the of and to in is for on that with as was at by an be this from or are it not have but "
    "they one all were we when there can had has more time if will about some out what up into so"
).split()


def prompt_of(tokens: int, rng: random.Random) -> str:
    """A prompt of ``tokens`` GPT-2 tokens (at least one) of plain words drawn by ``rng``."""
    return " ".join(rng.choice(WORDS) for _ in range(max(tokens, 1)))
