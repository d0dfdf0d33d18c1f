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
# The shipped swe-lite warm start, five tirl sft stages from tiny-tir (docs/training.md, "The SWE job"): a
# short-context name-copy drill, two half-short copy stages, a full-context copy stage with 300
# demonstrations, then 400 steps on all 1,315 training-split demonstrations. Built with the code of 897408d
# (the first three stages) and 7e19eb5 (the last two); src/ is the same at both.
_SWE_STAGE = "tirl sft --env swe-lite --init {init} --out {out} --seed {seed} --threads {threads} "
_SWE_COPY_ONLY = "--train-tasks 4 --lr 3e-3 --steps 1 --eval-every 100 --eval-tasks 1 --stop-at-accuracy -1"
SWE_SFT_COMMAND = " && ".join(
    [
        _SWE_STAGE.format(init="src/tirl/assets/tiny-tir", out="runs/tiny-swe-1", seed=0, threads=2)
        + "--copy-steps 3000 --copy-short-share 1 --batch-size 16 "
        + _SWE_COPY_ONLY,
        _SWE_STAGE.format(init="runs/tiny-swe-1", out="runs/tiny-swe-2", seed=0, threads=2)
        + "--copy-steps 750 --batch-size 8 "
        + _SWE_COPY_ONLY,
        _SWE_STAGE.format(init="runs/tiny-swe-2", out="runs/tiny-swe-3", seed=1, threads=1)
        + "--copy-steps 1250 --batch-size 8 "
        + _SWE_COPY_ONLY,
        _SWE_STAGE.format(init="runs/tiny-swe-3", out="runs/tiny-swe-4", seed=0, threads=1)
        + "--copy-steps 400 --copy-short-share 0 --batch-size 8 --train-tasks 300 --lr 1e-3 --steps 150 "
        "--eval-every 50 --eval-tasks 20 --stop-at-accuracy -1",
        _SWE_STAGE.format(init="runs/tiny-swe-4", out="src/tirl/assets/tiny-swe", seed=0, threads=1)
        + "--copy-steps 0 --batch-size 8 --train-tasks 1315 --lr 1e-3 --steps 400 --eval-every 100 "
        "--eval-tasks 20 --stop-at-accuracy -1",
    ]
)
# env name -> (asset directory, rebuild command) of the built-in model for that env; others use tiny-tir
BUILTIN_MODELS: dict[str, tuple[str, str]] = {
    "tir-chain": ("tiny-chain", CHAIN_SFT_COMMAND),
    "swe-lite": ("tiny-swe", SWE_SFT_COMMAND),
    "skyrl-gym:swe-lite": ("tiny-swe", SWE_SFT_COMMAND),  # SkyRL-style swe-lite rows: the same chat and episodes
}
# the same with env.tools=true (tool calls, so a template that renders tools): qwen2-chain for tir-chain
BUILTIN_TOOL_MODELS: dict[str, tuple[str, str]] = {"tir-chain": (QWEN2_CHAIN_DIR, QWEN2_CHAIN_SFT_COMMAND)}


def builtin_entry(env: str | None = None, tools: bool = False) -> tuple[str, str]:
    """(asset directory name, rebuild command) of the shipped model for ``env`` (``tools``: with tool calls)."""
    table = BUILTIN_TOOL_MODELS if tools else BUILTIN_MODELS
    return table.get(env or "", ("tiny-tir", BUILTIN_SFT_COMMAND))


def builtin_model_path(env: str | None = None, tools: bool = False) -> Path:
    """The shipped warm-started tiny model for ``env`` (``tools``: the one that makes tool calls).

    ``tirl/assets/tiny-chain`` for tir-chain (``qwen2-chain`` with ``tools``), ``tiny-swe`` for swe-lite (and
    ``skyrl-gym:swe-lite``), else tiny-tir, which has no tool template.
    """
    return Path(__file__).resolve().parent.parent / "assets" / builtin_entry(env, tools)[0]
