"""Training precision as a config rule, with no torch import: bf16/fp16 parameters train only under LoRA.

tirl keeps no separate float32 master copy of low-precision parameters, so ``model.dtype=bfloat16`` with all
weights trainable would let AdamW's small updates round away; mixed precision is ``algo.autocast=bf16`` over
float32 parameters. ``tirl train`` checks this before the run directory or the model exists;
:func:`tirl.models.memory.check_master_weights` checks the loaded model itself.
"""

from __future__ import annotations

from tirl.errors import ConfigError

MASTER_WEIGHTS_FIX = (
    "set model.dtype=float32 and algo.autocast=bf16 (float32 master weights and Adam state, bf16 forward passes)"
)


def check_training_precision(dtype: str, lora_rank: int) -> None:
    """Refuse ``model.dtype`` below float32 for training unless LoRA trains (float32) adapters on top."""
    if dtype in ("bfloat16", "float16") and lora_rank == 0:
        raise ConfigError(
            f"config model.dtype={dtype} is invalid for training: {dtype} parameters have no float32 master "
            f"weights, so AdamW's small updates round away — {MASTER_WEIGHTS_FIX}"
        )
