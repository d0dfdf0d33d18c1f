"""``tirl sft`` gives the warm start the context its env's episodes need.

The generator caps every episode at the model's ``max_position_embeddings``
(:class:`tirl.inference.hf.HFGenerator`): ``tiny-tir`` has 1,024 positions, and more than half of the swe-lite
expert episodes are longer (median 1,125 characters, max 1,941), so a swe-lite warm start built from it ended
those episodes ``overlong`` with an empty turn at position 1,024 (measured: 11 and 18 of 40 validation
episodes at SFT steps 50 and 100). Real parts: the shipped ``tiny-tir`` and a fresh tiny model, loaded as
``tirl sft`` loads them; no training.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tirl.errors import InputError
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sft import SFTConfig
from tirl.sft_recipe import SFTRunOptions, fit_context, load_sft_model

TINY_TIR = Path(__file__).resolve().parents[2] / "src/tirl/assets/tiny-tir"
SWE = SFTConfig(env="swe-lite", max_turns=10, max_new_tokens=384, max_total_tokens=6144, log=lambda _: None)


def test_an_init_model_is_given_the_swe_episode_length() -> None:
    model, tokenizer = load_sft_model(SFTRunOptions(out=Path("unused"), init=str(TINY_TIR)), SWE)
    assert model.config.max_position_embeddings == 6144 and tokenizer.model_max_length == 6144


def test_a_fresh_model_too_and_a_long_enough_one_is_left_alone() -> None:
    spec = TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16)
    model, _ = load_sft_model(SFTRunOptions(out=Path("unused"), spec=spec), SWE)
    assert model.config.max_position_embeddings == 6144
    model, _ = load_sft_model(SFTRunOptions(out=Path("unused"), spec=replace(spec, max_positions=8192)), SWE)
    assert model.config.max_position_embeddings == 8192
    math_cfg = SFTConfig(log=lambda _: None)  # tir-math: 512 tokens fit in tiny-tir's 1,024, nothing changes
    model, _ = load_sft_model(SFTRunOptions(out=Path("unused"), init=str(TINY_TIR)), math_cfg)
    assert model.config.max_position_embeddings == 1024


def test_a_model_whose_positions_are_not_plain_rotary_is_refused() -> None:
    model, tokenizer = build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1,
                                                      intermediate_size=16))  # fmt: skip
    model.config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(InputError, match=r"--init x.*rope_type dynamic"):
        fit_context(model, tokenizer, 6144, where="--init x")
    assert model.config.max_position_embeddings == 1024  # nothing changed
