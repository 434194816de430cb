"""Serving backends: each maps its metric names onto the signals the policies read.

``metrics.backend`` picks one (:data:`BACKENDS`): ``nlg`` (this project's model), ``vllm`` (NVIDIA's
vLLM backend), ``tensorrt_llm`` (NVIDIA's TensorRT-LLM backend), ``triton`` (Triton's own
``nv_inference_*``, any model); ``auto`` (:func:`detect`) takes the first whose marker series for the
model is on the page, in :data:`DETECT_ORDER` (every page has Triton's own metrics, so ``triton`` is
last). :func:`refusals` says which configured signals a backend cannot give, naming them.
"""

from __future__ import annotations

import re
from typing import Final

from autoscaler.collect.backends.base import Backend, signals
from autoscaler.collect.backends.nlg import NLG
from autoscaler.collect.backends.tensorrt_llm import TENSORRT_LLM
from autoscaler.collect.backends.triton import TRITON
from autoscaler.collect.backends.vllm import VLLM

BACKENDS: Final[dict[str, Backend]] = {b.name: b for b in (NLG, VLLM, TENSORRT_LLM, TRITON)}
#: ``metrics.backend`` values.
BACKEND_NAMES: Final[tuple[str, ...]] = ("auto", *BACKENDS)
DETECT_ORDER: Final[tuple[Backend, ...]] = (NLG, VLLM, TENSORRT_LLM, TRITON)

__all__ = ["BACKENDS", "BACKEND_NAMES", "DETECT_ORDER", "Backend", "detect", "refusals", "signals"]


def _has_series(text: str, sample: str, model_id: str) -> bool:
    """Whether a line of ``text`` is a series of ``sample`` with ``model="<model_id>"``."""
    escaped = model_id.replace("\\", "\\\\").replace('"', '\\"')
    pattern = rf'^{re.escape(sample)}\{{[^\n]*\bmodel="{re.escape(escaped)}"'
    return re.search(pattern, text, re.MULTILINE) is not None


def detect(text: str, model_id: str) -> Backend | None:
    """The backend whose marker series for ``model_id`` the page has (None: none of them)."""
    return next((b for b in DETECT_ORDER if _has_series(text, b.marker, model_id)), None)


def refusals(needs: dict[str, str], backend: Backend) -> list[str]:
    """One message per needed signal (signal -> the config key that needs it) the backend lacks."""
    have = signals(backend)
    out = []
    for signal, who in needs.items():
        if signal in have:
            continue
        natively = signals(NLG).get(signal, "")
        out.append(
            f"{who} needs {signal}, which the {backend.name} backend does not export"
            + (f" (on this project's model it is {natively})" if natively else "")
            + f"; {backend.name} gives: {', '.join(sorted(have))}"
        )
    return out
