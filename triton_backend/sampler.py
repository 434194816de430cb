"""From logits to the next token of each sequence: the logits processors of Table 4.1, then a pick.

The whole batch is decided together: one argmax for the greedy rows, and for the rows that sample,
temperature, top-k and top-p as tensor operations over all of them, then inverse-CDF sampling with
one uniform number per row. Each row draws its number from its own generator (a CPU one, so a seed
gives the same text on any device), which keeps a seeded choice's tokens the same whatever else is
in the batch. Only rows with a per-sequence rule (min_tokens, no_repeat_ngram_size) pay for their
own Python, and the tokens come back to the host in one transfer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from triton_backend.model_shapes import EOS_TOKEN_ID
from triton_backend.sampling_params import SamplingParams

#: How many of a row's most likely tokens top-p looks at before it sorts the whole vocabulary.
NUCLEUS_HEAD = 1024
#: Uniform numbers a sampling row draws from its generator at once.
UNIFORMS_AHEAD = 64
_SMALLEST = torch.finfo(torch.float32).smallest_normal
_LARGEST = torch.finfo(torch.float32).max  # above it, a banned token's -inf would divide into NaN


@dataclass
class SamplingState:
    """What one choice's sampling depends on besides its logits."""

    params: SamplingParams
    generator: torch.Generator | None
    """A CPU generator; None for greedy choices."""
    token_ids: list[int]  # prompt and generated so far; n-gram bans look at both, as transformers does
    generated: int
    _ahead: list[float] = field(default_factory=list, repr=False)  # drawn from `generator` ahead of need, the next last

    def append(self, token: int) -> None:
        """The choice took `token`: the bans and min_tokens see it from the next step."""
        self.token_ids.append(token)
        self.generated += 1

    def uniform(self) -> float:
        """The generator's next number in [0, 1): what ``torch.rand(1, generator=...)`` would give."""
        if not self._ahead:
            # One call for many steps: torch.rand(k) yields the numbers k calls of torch.rand(1) would.
            self._ahead = torch.rand(UNIFORMS_AHEAD, generator=self.generator).tolist()[::-1]
        number: float = self._ahead.pop()
        return number


def sample(logits: torch.Tensor, states: list[SamplingState]) -> list[int]:
    """Next token for each row of `logits` [batch, vocab] (fp32)."""
    for row, state in enumerate(states):
        params = state.params
        if state.generated < params.min_tokens or params.no_repeat_ngram_size:
            _apply_bans(logits[row], state)
    drawn = [row for row, state in enumerate(states) if not state.params.greedy]
    if len(drawn) == len(states):  # the usual batch: every row samples, no rows to gather
        picks = _sample_rows(logits, states)
    else:
        picks = logits.argmax(dim=-1)
        if drawn:
            index = torch.tensor(drawn, device=logits.device)
            picks[index] = _sample_rows(logits[index], [states[row] for row in drawn])
    tokens: list[int] = picks.tolist()
    return tokens


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


def _sample_rows(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    """One token for each row [rows, vocab] that samples; returns [rows] token ids on its device.
    `logits` is overwritten."""
    device, vocab = logits.device, logits.shape[-1]
    params = [state.params for state in states]
    # Every temperature > 0 is allowed: the row's maximum is taken off before dividing, so what a tiny
    # one scales overflows towards -inf (no mass), never inf - inf; and one below float32's range
    # divides as its smallest normal number, which leaves only the maximum's ties: greedy, as the limit is.
    # One above float32's range divides as its largest: uniform over the tokens with mass.
    temperature = torch.tensor([p.temperature for p in params], device=device)[:, None]
    scaled = logits.sub_(logits.amax(dim=-1, keepdim=True)).div_(temperature.clamp_(_SMALLEST, _LARGEST))
    top_k = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
    if any(top_k):
        scaled = _keep_top_k(scaled, top_k)
    top_p = [p.top_p for p in params]
    if any(p < 1.0 for p in top_p):
        scaled = _keep_top_p(scaled, top_p)
    # Unnormalized weights: the CDF's last value is the total, which the point is scaled to. Each row's
    # maximum is already 0 (taken off above; top-k and top-p keep the most likely token).
    cdf = scaled.exp_().cumsum_(dim=-1)
    total = cdf[:, -1]
    uniform = torch.tensor([state.uniform() for state in states], device=device)
    # Strictly below the total, a point can only fall in a token with mass: searching to the right
    # skips every token whose mass is zero (banned or filtered), since it leaves the CDF flat.
    point = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, point[:, None], right=True)[:, 0].clamp_(max=vocab - 1)


def _keep_top_k(scaled: torch.Tensor, top_k: list[int]) -> torch.Tensor:
    """Rows with k > 0 keep the logits at least as large as their k-th largest (ties kept)."""
    k = torch.tensor(top_k, device=scaled.device)
    largest = torch.topk(scaled, int(k.max()), dim=-1).values
    kth = largest.gather(1, (k.clamp(min=1) - 1)[:, None])
    kth = torch.where(k[:, None] > 0, kth, torch.full_like(kth, -float("inf")))
    return scaled.masked_fill(scaled < kth, -float("inf"))


def _keep_top_p(scaled: torch.Tensor, top_p: list[float], head: int = NUCLEUS_HEAD) -> torch.Tensor:
    """Each row keeps the smallest prefix of its most likely tokens whose mass reaches its top_p;
    the most likely token always stays. Rows with top_p = 1 keep everything.

    A trained model's nucleus is a few hundred tokens at most, so the ``head`` most likely ones are
    looked at first (a partial sort, about 8x cheaper than sorting the vocabulary on a CPU); only if
    some row's nucleus is larger is the whole vocabulary sorted. Both keep the same tokens."""
    p = torch.tensor(top_p, device=scaled.device)[:, None]
    if head < scaled.shape[-1]:
        ordered, order = torch.topk(scaled, head, dim=-1)
        probs = (ordered - torch.logsumexp(scaled, dim=-1, keepdim=True)).exp()
        cumulative = probs.cumsum(dim=-1)
        if bool(((cumulative[:, -1:] >= p) | (p >= 1.0)).all()):
            # Every token past the head starts past its row's top_p: all of them go.
            kept = ordered.masked_fill((cumulative - probs >= p) & (p < 1.0), -float("inf"))
            out = torch.full_like(scaled, -float("inf")).scatter_(1, order, kept)
            return torch.where(p < 1.0, out, scaled)
    ordered, order = torch.sort(scaled, dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    drop = (probs.cumsum(dim=-1) - probs >= p) & (p < 1.0)
    return scaled.scatter(1, order, ordered.masked_fill(drop, -float("inf")))
