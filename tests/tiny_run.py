"""What the real-CLI training tests share: a tiny random model saved to disk and the `--set` flags of a tiny run."""

from __future__ import annotations

from pathlib import Path

from tirl.models.tiny import TinyModelSpec, build_tiny_model, save_policy

TINY_TRAIN_ARGS = [
    "--set", "trainer.prompts_per_step=2",
    "--set", "algo.group_size=2",
    "--set", "generation.max_new_tokens=16",
    "--set", "generation.max_total_tokens=200",
    "--set", "filter.mode=off",  # a random model only writes void turns; train on them anyway
    "--set", "algo.kl_coef=0.01",  # every step updates (all-zero advantages would skip the update)
    "--set", "trainer.threads=1",
    "--set", "trainer.eval_before_after=false",
    "--no-progress",
]  # fmt: skip


def save_tiny_model(out: Path) -> Path:
    """A 1-layer random model (hidden 32) and its tokenizer saved at ``out``; the directory."""
    spec = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=256)
    model, tok = build_tiny_model(spec, seed=0)
    return save_policy(model, tok, out)
