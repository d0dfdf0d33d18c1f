"""The shipped warm-started models: which one an env gets, where it lies and the command that rebuilds it.

Torch-free (the CLI's input checks read it before torch loads). Loading lives in :mod:`tirl.models.loading`.
Not covered: checking that the asset is present (``load_policy`` says so with the rebuild command).
"""

from __future__ import annotations

from pathlib import Path

BUILTIN_SFT_COMMAND = "tirl sft --out src/tirl/assets/tiny-tir --seed 0 --threads 1"
CHAIN_SFT_COMMAND = (
    "tirl sft --env tir-chain --init src/tirl/assets/tiny-tir --out src/tirl/assets/tiny-chain --seed 0 "
    "--threads 1 --copy-steps 0 --train-tasks 1500 --lr 1e-3 --eval-every 10 --stop-at-accuracy 0.2"
)
# The shipped Qwen2 model with a BPE tokenizer and Hermes tool calls: 375 SFT steps from scratch on tir-chain
# with tools (lr 3e-3, after a copy curriculum), then 50 steps more at lr 1e-3.
QWEN2_CHAIN_DIR = "qwen2-chain"
QWEN2_CHAIN_STAGE1 = "runs/qwen2-chain-sft1"
QWEN2_CHAIN_SFT_COMMAND = (
    "tirl sft --env tir-chain --tools --arch qwen2 --vocab 2048 --corpus tasks --split-digits --layers 4 "
    f"--hidden 128 --heads 4 --out {QWEN2_CHAIN_STAGE1} --seed 0 --threads 1 --copy-steps 150 --train-tasks 1000 "
    "--steps 375 --eval-every 25 --stop-at-accuracy 0.2 && "
    f"tirl sft --env tir-chain --tools --init {QWEN2_CHAIN_STAGE1} --out src/tirl/assets/qwen2-chain --seed 0 "
    "--threads 1 --copy-steps 0 --train-tasks 1000 --lr 1e-3 --steps 50 --eval-every 10 --stop-at-accuracy 0.2"
)
# env name -> (asset directory, rebuild command) of the built-in model for that env; others use tiny-tir
BUILTIN_MODELS: dict[str, tuple[str, str]] = {"tir-chain": ("tiny-chain", CHAIN_SFT_COMMAND)}
# the same with env.tools=true (tool calls, so a template that renders tools): qwen2-chain for tir-chain
BUILTIN_TOOL_MODELS: dict[str, tuple[str, str]] = {"tir-chain": (QWEN2_CHAIN_DIR, QWEN2_CHAIN_SFT_COMMAND)}


def builtin_entry(env: str | None = None, tools: bool = False) -> tuple[str, str]:
    """(asset directory name, rebuild command) of the shipped model for ``env`` (``tools``: with tool calls)."""
    table = BUILTIN_TOOL_MODELS if tools else BUILTIN_MODELS
    return table.get(env or "", ("tiny-tir", BUILTIN_SFT_COMMAND))


def builtin_model_path(env: str | None = None, tools: bool = False) -> Path:
    """The shipped warm-started tiny model for ``env`` (``tools``: the one that makes tool calls).

    ``tirl/assets/tiny-chain`` for tir-chain (``qwen2-chain`` with ``tools``), else tiny-tir, which has no
    tool template.
    """
    return Path(__file__).resolve().parent.parent / "assets" / builtin_entry(env, tools)[0]
