"""Reading a Triton request into what the engine needs, and refusing bad input with a clear error."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from triton_backend.sampling_params import InvalidRequest, Limits, SamplingParams, parse_sampling_params

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResponseOptions:
    """How the client wants its responses shaped (the vLLM backend's flags)."""

    stream: bool
    exclude_input_in_output: bool
    return_finish_reason: bool
    return_num_input_tokens: bool
    return_num_output_tokens: bool
    prompt: str


@dataclass(frozen=True)
class ParsedRequest:
    prompt_ids: list[int]
    params: SamplingParams
    options: ResponseOptions


def parse_request(pb_utils: Any, request: Any, tokenizer: Tokenizer, limits: Limits) -> ParsedRequest:
    """Raises InvalidRequest naming every bad input, and nothing else: a check that fails in a way
    nobody foresaw still refuses the request with a field error (logged here with its traceback),
    never with the exception's text."""
    try:
        return _parse(pb_utils, request, tokenizer, limits)
    except InvalidRequest:
        raise
    except Exception as err:
        log.exception("reading a request failed")
        raise InvalidRequest([f"request: could not be read ({type(err).__name__}); see the server log"]) from err


def _parse(pb_utils: Any, request: Any, tokenizer: Tokenizer, limits: Limits) -> ParsedRequest:
    errors: list[str] = []
    prompt = ""
    raw_text = _input(pb_utils, request, "text_input")
    if raw_text is None:
        errors.append("text_input: is required (the prompt, a non-empty UTF-8 string)")
    elif len(raw_text) > limits.max_prompt_bytes:
        errors.append(
            f"text_input: at most {limits.max_prompt_bytes} bytes (no longer prompt fits the "
            f"{limits.context_length}-token context), got {len(raw_text)}"
        )
    else:
        try:
            prompt = raw_text.decode("utf-8") if isinstance(raw_text, bytes) else str(raw_text)
        except UnicodeDecodeError as err:
            errors.append(f"text_input: must be valid UTF-8 ({err.reason} at byte {err.start})")
        else:
            if not prompt:
                errors.append("text_input: must be a non-empty string")
    prompt_ids = tokenizer.encode(prompt).ids if prompt else []
    raw_params = _input(pb_utils, request, "sampling_parameters")
    params_text: str | None = None
    if raw_params is not None:
        try:
            params_text = raw_params.decode("utf-8") if isinstance(raw_params, bytes) else str(raw_params)
        except UnicodeDecodeError:
            errors.append("sampling_parameters: must be a UTF-8 JSON string")
    params = SamplingParams()
    try:
        params = parse_sampling_params(params_text, len(prompt_ids), limits)
    except InvalidRequest as err:
        errors.extend(err.errors)
    if errors:
        raise InvalidRequest(errors)
    options = ResponseOptions(
        stream=_flag(pb_utils, request, "stream"),
        exclude_input_in_output=_flag(pb_utils, request, "exclude_input_in_output"),
        return_finish_reason=_flag(pb_utils, request, "return_finish_reason"),
        return_num_input_tokens=_flag(pb_utils, request, "return_num_input_tokens"),
        return_num_output_tokens=_flag(pb_utils, request, "return_num_output_tokens"),
        prompt=prompt,
    )
    return ParsedRequest(prompt_ids, params, options)


def _input(pb_utils: Any, request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def _flag(pb_utils: Any, request: Any, name: str) -> bool:
    value = _input(pb_utils, request, name)
    return bool(value) if value is not None else False
