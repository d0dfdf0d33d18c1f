"""The built-in tokenizer, tiny model and loading path."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from tirl.errors import InputError
from tirl.models.loading import builtin_model_path, load_policy
from tirl.models.tiny import TinyModelSpec, build_tiny_model, count_parameters, save_policy
from tirl.models.tokenizer import END, ROLE_TOKENS, build_char_tokenizer


def test_every_character_is_one_token_and_roundtrips() -> None:
    tok = build_char_tokenizer()
    text = "Compute 347*29.\n```python\nprint(347*29)\n```\n\\boxed{10063}\t ~"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    digit_ids = [tok.encode(d, add_special_tokens=False) for d in string.digits]
    assert all(len(i) == 1 for i in digit_ids)
    assert len({i[0] for i in digit_ids}) == 10


def test_special_tokens_are_single_ids_and_unknown_chars_map_to_unk() -> None:
    tok = build_char_tokenizer()
    for special in (END, *ROLE_TOKENS.values()):
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert tok.eos_token == END
    assert tok.decode(tok.encode("a\u00e9b", add_special_tokens=False)) == "a<|unk|>b"


def test_saved_tokenizer_loads_with_autotokenizer_and_keeps_ids(tmp_path: Path) -> None:
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "<|user|>What is 12 mod 5?<|end|><|assistant|>"
    assert again.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    msgs = [{"role": "user", "content": "hi"}]
    rendered = again.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|user|>hi<|end|><|assistant|>"


def test_default_tiny_model_is_within_the_size_budget() -> None:
    model, tok = build_tiny_model()
    n = count_parameters(model)
    assert 500_000 <= n <= 2_000_000
    assert model.config.vocab_size == len(tok)


def test_load_policy_roundtrip_gives_identical_logits(tmp_path: Path) -> None:
    spec = TinyModelSpec(hidden_size=32, layers=2, heads=2, kv_heads=2, intermediate_size=64)
    model, tok = build_tiny_model(spec, seed=3)
    save_policy(model, tok, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    policy = load_policy(tmp_path)
    ids = torch.tensor([tok.encode("Compute 1+2.", add_special_tokens=False)])
    with torch.no_grad():
        torch.testing.assert_close(policy.model(ids).logits, model.eval()(ids).logits)
    assert policy.chat.eos_ids == frozenset({tok.eos_token_id})


def test_load_policy_names_a_bad_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_policy(tmp_path / "missing")
    with pytest.raises(InputError, match=r"config\.json"):
        load_policy(tmp_path)


def test_builtin_checkpoint_is_shipped_small_and_loadable() -> None:
    path = builtin_model_path()
    if not (path / "config.json").is_file():
        pytest.skip("the built-in checkpoint is not built yet (tirl sft --out src/tirl/assets/tiny-tir --seed 0)")
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert total <= 10 * 1024 * 1024
    assert (path / "model.safetensors").is_file()
    policy = load_policy()
    assert policy.path == path
    assert 500_000 <= count_parameters(policy.model) <= 2_000_000
