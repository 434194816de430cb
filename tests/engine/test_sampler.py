"""The batched sampler: the tokens it draws follow the distribution the request asked for."""

from __future__ import annotations

import torch

from triton_backend.model_shapes import EOS_TOKEN_ID
from triton_backend.sampler import UNIFORMS_AHEAD, SamplingState, _keep_top_p, sample
from triton_backend.sampling_params import SamplingParams

VOCAB = EOS_TOKEN_ID + 1


def states(params: SamplingParams, count: int, seed: int = 0, generated: int = 0) -> list[SamplingState]:
    return [SamplingState(params, torch.Generator().manual_seed(seed + i), [1, 2, 3], generated) for i in range(count)]


def logits_of(weights: dict[int, float], rows: int) -> torch.Tensor:
    """Rows of logits whose softmax puts mass only on ``weights``' tokens, in those proportions."""
    row = torch.full((VOCAB,), -float("inf"))
    for token, weight in weights.items():
        row[token] = torch.log(torch.tensor(weight))
    return row.repeat(rows, 1)


def frequencies(
    weights: dict[int, float], params: SamplingParams, rounds: int = 40, rows: int = 100
) -> dict[int, float]:
    """Draws ``rounds`` x ``rows`` tokens, each row with its own generator across rounds."""
    batch = states(params, rows)
    counts: dict[int, int] = {}
    for _ in range(rounds):
        for token in sample(logits_of(weights, rows), batch):
            counts[token] = counts.get(token, 0) + 1
    return {token: n / (rounds * rows) for token, n in counts.items()}


def close(observed: dict[int, float], expected: dict[int, float], draws: int) -> bool:
    """Every token within 4.5 standard errors of its probability, and nothing else drawn."""
    if set(observed) - set(expected):
        return False
    return all(abs(observed.get(t, 0.0) - p) <= 4.5 * (p * (1 - p) / draws) ** 0.5 + 1e-12 for t, p in expected.items())


def test_temperature_sharpens_the_softmax_it_samples_from():
    weights = {7: 0.5, 11: 0.3, 500: 0.15, EOS_TOKEN_ID: 0.05}
    for temperature in (1.0, 0.5):
        tempered = {t: w ** (1 / temperature) for t, w in weights.items()}
        total = sum(tempered.values())
        expected = {t: w / total for t, w in tempered.items()}
        seen = frequencies(weights, SamplingParams(temperature=temperature))
        assert close(seen, expected, 4000), (temperature, seen, expected)


def test_any_temperature_the_docs_allow_samples_from_a_distribution():
    """Below float32's range the draw is the limit's (greedy among the most likely's ties); far above
    it, uniform over the tokens with mass; a banned token is never drawn at either end."""
    weights = {7: 0.5, 11: 0.3, 500: 0.15, EOS_TOKEN_ID: 0.05}
    for temperature in (1e-30, 1e-38, 1e-39, 1e-45, 1e-300, 5e-324):
        seen = frequencies(weights, SamplingParams(temperature=temperature), rounds=3)
        assert seen == {7: 1.0}, (temperature, seen)
    tied = logits_of({7: 0.4, 11: 0.4, 500: 0.2}, 2000)
    drawn = sample(tied, states(SamplingParams(temperature=1e-300), 2000))
    assert set(drawn) == {7, 11} and 800 < drawn.count(7) < 1200
    for temperature in (1e38, 1e300):
        seen = frequencies(weights, SamplingParams(temperature=temperature, min_tokens=4))
        assert close(seen, {7: 1 / 3, 11: 1 / 3, 500: 1 / 3}, 4000), (temperature, seen)


def test_top_k_and_top_p_keep_only_the_most_likely_tokens():
    weights = {7: 0.5, 11: 0.3, 500: 0.15, 900: 0.05}
    top_k = frequencies(weights, SamplingParams(top_k=3))
    assert close(top_k, {7: 0.5 / 0.95, 11: 0.3 / 0.95, 500: 0.15 / 0.95}, 4000), top_k
    # 0.7 is reached by the first two (0.5 + 0.3): the third starts past it and goes.
    top_p = frequencies(weights, SamplingParams(top_p=0.7))
    assert close(top_p, {7: 0.5 / 0.8, 11: 0.3 / 0.8}, 4000), top_p
    # The most likely token stays even when it alone is more than top_p.
    assert set(frequencies(weights, SamplingParams(top_p=0.1), rounds=5)) == {7}


def test_a_banned_token_is_never_drawn_even_at_the_end_of_the_vocabulary():
    # EOS is the last token id and by far the most likely; min_tokens bans it for the first tokens.
    weights = {3: 0.01, 42: 0.01, EOS_TOKEN_ID: 0.98}
    batch = states(SamplingParams(min_tokens=4), 200)
    for _ in range(10):
        assert EOS_TOKEN_ID not in sample(logits_of(weights, 200), batch)


def test_a_seeded_row_draws_the_same_tokens_alone_or_beside_greedy_and_other_rows():
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB) * 3
    seeded = SamplingParams(temperature=0.8, top_k=40, seed=5)
    alone = sample(logits[2:3].clone(), states(seeded, 1, seed=5))
    mixed = states(SamplingParams(temperature=0.0), 1) + states(SamplingParams(top_p=0.9), 1, seed=9)
    mixed += states(seeded, 1, seed=5) + states(SamplingParams(temperature=0.0), 1)
    picks = sample(logits.clone(), mixed)
    assert picks[2] == alone[0]
    assert picks[0] == int(logits[0].argmax()) and picks[3] == int(logits[3].argmax())


def test_top_p_over_the_head_keeps_what_sorting_the_vocabulary_keeps():
    torch.manual_seed(1)
    # Peaked rows, as a trained model's are: their nuclei fit in a head of 64 tokens.
    peaked = torch.randn(4, VOCAB) + torch.zeros(4, VOCAB).index_fill_(1, torch.arange(40), 12.0)
    top_p = [0.9, 0.5, 1.0, 0.95]
    head = _keep_top_p(peaked.clone(), top_p, head=64)
    whole = _keep_top_p(peaked.clone(), top_p, head=VOCAB)
    assert torch.equal(torch.isfinite(head), torch.isfinite(whole))
    assert torch.isfinite(head[2]).all()  # top_p = 1 keeps every token
    assert 1 <= int(torch.isfinite(head[1]).sum()) < 40
    # A flat row's nucleus is most of the vocabulary: the head cannot hold it, the sort decides.
    flat = torch.randn(2, VOCAB) * 0.01
    assert torch.equal(torch.isfinite(_keep_top_p(flat.clone(), [0.9, 0.9], head=64)),
                       torch.isfinite(_keep_top_p(flat.clone(), [0.9, 0.9], head=VOCAB)))  # fmt: skip
    assert int(torch.isfinite(_keep_top_p(flat.clone(), [0.9, 0.9], head=64)[0]).sum()) > 64


def test_a_row_draws_the_numbers_one_rand_call_a_step_would():
    # What the sampler drew before it drew ahead: a seed keeps giving the tokens it gave then.
    state = states(SamplingParams(seed=3), 1, seed=3)[0]
    drawn = [state.uniform() for _ in range(3 * UNIFORMS_AHEAD + 5)]
    generator = torch.Generator().manual_seed(3)
    assert drawn == [torch.rand(1, generator=generator).item() for _ in drawn]
