"""``tirl sft`` end to end on a tiny fresh model, and the one action rule its env and agent loops share."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tirl.cli import main
from tirl.config import EnvConfig, FilterConfig
from tirl.filters import rules_from_config
from tirl.models.chat_format import chat_format_for
from tirl.models.loading import load_policy
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sft import SFTConfig
from tirl.sft_recipe import sft_parts, sft_tasks

TINY = ["--layers", "1", "--hidden", "32", "--heads", "2", "--threads", "1", "--copy-steps", "0"]


def test_tirl_sft_writes_a_loadable_checkpoint_and_its_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "warm"
    args = ["sft", "--out", str(out), "--steps", "2", "--batch-size", "2", "--train-tasks", "4", "--eval-tasks", "2"]
    args += ["--eval-every", "1", "--stop-at-accuracy", "-1", "--sandbox", "process", *TINY]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "demonstrations: 4 of 4 tasks" in text and "held-out greedy accuracy" in text
    assert f"saved {out} after 2 steps" in text
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "Rebuild: `tirl sft" in card and "steps: 2, batch 2" in card
    # the kernels the bytes depend on (tirl.models.kernels): this process's torch and its ATen CPU capability
    import torch

    built = next(line for line in card.splitlines() if line.startswith("- built with: "))
    assert f"torch {torch.__version__} (ATen CPU kernels {torch.backends.cpu.get_cpu_capability()}, MKL branch" in built
    policy = load_policy(str(out))  # the checkpoint loads as any model does
    assert sum(p.numel() for p in policy.model.parameters()) > 0


@pytest.mark.parametrize("env", ["tir-math", "tir-chain"])
def test_the_env_and_every_agent_loop_share_the_env_rule(env: str) -> None:
    """The rule is the one training builds for the env (rules_from_config of a default [filter] section)."""
    cfg = SFTConfig(env=env, max_turns=6)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16))
    parts = sft_parts(cfg, model, tok, chat_format_for(tok), "process")
    try:
        assert parts.rules == rules_from_config(FilterConfig(), EnvConfig(name=env))
        made = parts.factory(sft_tasks(cfg, 1, 0)[0])
        assert made.rules is parts.rules  # type: ignore[attr-defined]
        assert parts.sampled.rules is parts.rules and parts.greedy.rules is parts.rules
        assert (parts.sampled.params.temperature, parts.greedy.params.temperature) == (1.0, 0.0)
        assert parts.sampled.seed == cfg.seed and parts.greedy.seed is None
    finally:
        asyncio.run(parts.close())
