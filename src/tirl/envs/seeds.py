"""The generation seeds of the held-out and validation task sets: ``OFFSET + env.seed``.

The trainer (:mod:`tirl.trainer.wiring`) draws the held-out set from :func:`eval_seed` and the validation
set from :func:`validation_seed`; generators that must know which split a seed means (the swe-lite
curriculum) read them here, below the trainer, so no task module imports the trainer. Not covered: task
files, whose splits are their rows' own.
"""

from __future__ import annotations

EVAL_SEED_OFFSET = 1_000_000_007
VALIDATION_SEED_OFFSET = 2_000_000_011


def eval_seed(env_seed: int) -> int:
    """The task-generation seed of the held-out evaluation set."""
    return EVAL_SEED_OFFSET + env_seed


def validation_seed(env_seed: int) -> int:
    """The task-generation seed of the validation set (what tuning looks at)."""
    return VALIDATION_SEED_OFFSET + env_seed


__all__ = ["EVAL_SEED_OFFSET", "VALIDATION_SEED_OFFSET", "eval_seed", "validation_seed"]
