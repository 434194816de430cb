"""From logits to the next token of each sequence: the logits processors of Table 4.1, then a pick.

Greedy rows are decided together with one argmax; only rows that sample or need a per-sequence rule
(min_tokens, no_repeat_ngram_size) pay for their own work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from triton_backend.presets import EOS_TOKEN_ID
from triton_backend.sampling_params import SamplingParams


@dataclass
class SamplingState:
    """What one choice's sampling depends on besides its logits."""

    params: SamplingParams
    generator: torch.Generator | None
    token_ids: list[int]  # prompt and generated so far; n-gram bans look at both, as transformers does
    generated: int


def sample(logits: torch.Tensor, states: list[SamplingState]) -> list[int]:
    """Next token for each row of `logits` [batch, vocab] (fp32)."""
    for row, state in enumerate(states):
        _apply_bans(logits[row], state)
    picks = logits.argmax(dim=-1).tolist()
    for row, state in enumerate(states):
        if not state.params.greedy:
            picks[row] = _sample_row(logits[row], state)
    return [int(token) for token in picks]


def _apply_bans(row: torch.Tensor, state: SamplingState) -> None:
    params = state.params
    if state.generated < params.min_tokens:
        row[EOS_TOKEN_ID] = -float("inf")
    if params.no_repeat_ngram_size:
        banned = banned_ngram_tokens(state.token_ids, params.no_repeat_ngram_size)
        if banned:
            row[list(banned)] = -float("inf")


def banned_ngram_tokens(token_ids: list[int], size: int) -> set[int]:
    """Tokens that would complete an n-gram already present (transformers' NoRepeatNGram rule)."""
    if len(token_ids) < size:
        return set()
    prefix = tuple(token_ids[len(token_ids) - size + 1 :])
    return {
        token_ids[i + size - 1]
        for i in range(len(token_ids) - size + 1)
        if tuple(token_ids[i : i + size - 1]) == prefix
    }


def _sample_row(row: torch.Tensor, state: SamplingState) -> int:
    params = state.params
    scaled = row / params.temperature
    if params.top_k and params.top_k < scaled.numel():
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, -float("inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p; the most likely token always stays.
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= params.top_p
        scaled = scaled.scatter(0, order[drop], -float("inf"))
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=state.generator).item())
