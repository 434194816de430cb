"""A checkpoint written by save_pretrained loads through weights_path and serves its own outputs."""

from __future__ import annotations

import pytest
import torch
from serving_testkit import grpc_generate, metric, scrape
from transformers import GPT2LMHeadModel

from triton_backend.launch import TritonServer
from triton_backend.presets import build_model, preset_config
from triton_backend.tokenizer import load_tokenizer

pytestmark = pytest.mark.integration


def test_checkpoint_from_save_pretrained_is_served(tmp_path):
    torch.manual_seed(1234)  # other weights than the tiny preset's seed-0 init
    config = preset_config("tiny")
    config.initializer_range = 0.2  # peakier logits than the default init
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()

    loaded, info = build_model("gpt2", str(tmp_path / "ckpt"), torch.device("cpu"), torch.float32)
    assert not info.random_weights and info.preset == "tiny"
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)

    prompt = "The weights came from disk"
    ids = load_tokenizer().encode(prompt).ids
    want = model.generate(
        torch.tensor([ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=50256
    )[0, len(ids) :]
    env = {"NLG_PRESET": "gpt2", "NLG_WEIGHTS_PATH": str(tmp_path / "ckpt")}
    with TritonServer(env=env) as server:
        got = grpc_generate(server.grpc_url, prompt, {"max_tokens": 16, "temperature": 0, "ignore_eos": True})
        info_metric = metric(scrape(server.metrics_url), "nlg_model_info", weights=str(tmp_path / "ckpt"))
    assert got.text() == load_tokenizer().decode(want.tolist())
    assert info_metric == 1


def test_weights_path_without_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="weights_path: .* must be a Hugging Face checkpoint directory"
    ):
        build_model("tiny", str(tmp_path), torch.device("cpu"), torch.float32)
