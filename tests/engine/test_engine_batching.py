"""The engine against transformers' generate: requests join and leave the batch at different steps."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import greedy_reference, ids_of, make_engine, run, tiny_model

from triton_backend.outputs import FinishReason
from triton_backend.sampler import SamplingState, sample
from triton_backend.sampling_params import SamplingParams

GREEDY = dict(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_mixed_batch_matches_single_request_generate(model):
    prompts = {
        "a": [15496, 995, 11, 314, 716],
        "b": [464, 3290, 318],
        "c": list(range(1000, 1040)),  # prefilled over several chunks while a and b decode
        "d": [50256, 40, 1101],
    }
    arrivals = {
        0: [("a", prompts["a"], SamplingParams(max_tokens=12, **GREEDY))],
        2: [("b", prompts["b"], SamplingParams(max_tokens=4, **GREEDY))],
        3: [("c", prompts["c"], SamplingParams(max_tokens=9, **GREEDY))],
        9: [("d", prompts["d"], SamplingParams(max_tokens=6, **GREEDY))],
    }
    results = run(make_engine(model, chunk=16, max_num_seqs=3), arrivals)
    for request_id, prompt in prompts.items():
        want = greedy_reference(model, prompt, len(ids_of(results[request_id])))
        assert ids_of(results[request_id]) == want, request_id
    assert [len(ids_of(results[r])) for r in "abcd"] == [12, 4, 9, 6]


def test_waiting_request_is_admitted_when_a_slot_frees(model):
    engine = make_engine(model, max_num_seqs=1)
    params = SamplingParams(max_tokens=3, **GREEDY)
    results = run(engine, {0: [("first", [1, 2], params), ("second", [3, 4], params)]})
    first_done = results["first"].final.time
    second_first_token = next(o.time for o in results["second"].outputs if any(o.new_tokens))
    assert second_first_token > first_done
    assert ids_of(results["second"]) == greedy_reference(model, [3, 4], 3)
    assert engine.stats().kv_pages_used == 0


def test_n_choices_share_the_prompt_and_are_told_apart(model):
    params = SamplingParams(max_tokens=8, n=3, temperature=1.0, seed=7, ignore_eos=True)
    result = run(make_engine(model), {0: [("r", [15496, 995], params)]})["r"]
    choices = [ids_of(result, i) for i in range(3)]
    assert all(len(c) == 8 for c in choices)
    assert len({tuple(c) for c in choices}) == 3
    assert result.final.finish_reasons == (FinishReason.LENGTH,) * 3


def test_seed_makes_sampling_repeatable_and_other_seeds_differ(model):
    def sample(seed: int) -> list[int]:
        params = SamplingParams(
            max_tokens=10, temperature=1.0, top_k=50, top_p=0.9, seed=seed, ignore_eos=True
        )
        return ids_of(run(make_engine(model), {0: [("r", [464, 3290], params)]})["r"])

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_min_tokens_holds_off_eos_until_reached():
    logits = torch.zeros(1, 50257)
    logits[0, 50256] = 10.0  # EOS is the greedy pick
    params = SamplingParams(max_tokens=20, min_tokens=3, temperature=0.0)
    picks = [
        sample(logits.clone(), [SamplingState(params, None, [1], generated)])[0] for generated in range(5)
    ]
    assert 50256 not in picks[:3]
    assert picks[3:] == [50256, 50256]


def eos_loving_model():
    """A model whose greedy pick is always EOS: ln_f outputs ones, and only EOS's head row is non-zero."""
    model = tiny_model()
    model.transformer.ln_f.weight.data.zero_()
    model.transformer.ln_f.bias.data.fill_(1.0)
    head = torch.zeros_like(model.lm_head.weight)
    head[50256] = 1.0
    model.lm_head.weight = torch.nn.Parameter(head)  # unties it from the input embedding
    return model


@pytest.mark.parametrize(
    ("params", "tokens", "reason"),
    [
        (SamplingParams(max_tokens=8, temperature=0.0), 1, FinishReason.STOP),
        (SamplingParams(max_tokens=8, min_tokens=5, temperature=0.0), 6, FinishReason.STOP),
        (SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), 8, FinishReason.LENGTH),
    ],
    ids=["eos-stops", "min-tokens-holds-eos-off", "ignore-eos"],
)
def test_eos_min_tokens_and_ignore_eos(params, tokens, reason):
    result = run(make_engine(eos_loving_model()), {0: [("r", [1, 2, 3], params)]})["r"]
    assert result.final.total_tokens == (tokens,)
    assert result.final.finish_reasons == (reason,)


def test_no_repeat_ngram_size_bans_repeated_ngrams(model):
    plain = ids_of(
        run(make_engine(model), {0: [("r", [1, 2], SamplingParams(max_tokens=12, **GREEDY))]})["r"]
    )
    assert len(set(zip(plain, plain[1:], strict=False))) < len(plain) - 1  # the random model loops
    params = SamplingParams(max_tokens=12, no_repeat_ngram_size=2, **GREEDY)
    banned = [1, 2, *ids_of(run(make_engine(model), {0: [("r", [1, 2], params)]})["r"])]
    bigrams = list(zip(banned, banned[1:], strict=False))
    assert len(bigrams) == len(set(bigrams))


def test_stop_string_ends_the_choice_and_is_not_shown(model):
    free = run(make_engine(model), {0: [("r", [15496, 995], SamplingParams(max_tokens=10, **GREEDY))]})["r"]
    text = free.text[0]
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), text
    params = SamplingParams(max_tokens=10, stop=(stop,), **GREEDY)
    stopped = run(make_engine(model), {0: [("r", [15496, 995], params)]})["r"]
    assert stopped.text[0] == text[: text.index(stop)]
    assert stopped.final.finish_reasons == (FinishReason.STOP,)


def test_abort_frees_slots_and_gives_a_cancelled_final_output(model):
    engine = make_engine(model)
    engine.add("r", [1, 2, 3], SamplingParams(max_tokens=500, n=2, **GREEDY), arrival=0.0)
    for _ in range(3):
        engine.step()
    assert engine.stats().kv_pages_used == 2
    output = engine.abort("r")
    assert output is not None and output.finished
    assert output.finish_reasons == (FinishReason.CANCELLED,) * 2
    assert engine.stats().kv_pages_used == 0 and not engine.has_work
    assert engine.abort("r") is None


def test_deadline_orders_the_waiting_queue_earliest_first(model):
    engine = make_engine(model, max_num_seqs=1)
    params = SamplingParams(max_tokens=2, **GREEDY)
    engine.add("running", [1], params, arrival=0.0)
    engine.step()
    engine.add("no-deadline", [2], params, arrival=0.0)
    engine.add("late", [3], SamplingParams(max_tokens=2, deadline=10.0, **GREEDY), arrival=0.0)
    engine.add("soon", [4], SamplingParams(max_tokens=2, deadline=1.0, **GREEDY), arrival=0.0)
    first_tokens: list[str] = []
    while engine.has_work:
        for output in engine.step():
            if output.total_tokens[0] == 1 and output.request_id not in first_tokens:
                first_tokens.append(output.request_id)
    assert first_tokens == ["soon", "late", "no-deadline"]
