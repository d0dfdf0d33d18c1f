"""The settings of ``tirl sft`` (:class:`SFTConfig`), apart from the torch code that uses them.

Kept free of torch and transformers so that ``tirl sft --help`` (which shows these defaults) starts in about a
second; :mod:`tirl.sft` re-exports :class:`SFTConfig` and runs the warm start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SFTConfig"]


@dataclass
class SFTConfig:
    """Settings of the warm start (the defaults produce the shipped checkpoint)."""

    steps: int = 1500  # upper bound; training usually stops earlier at stop_at_accuracy
    decay_steps: int = 1500  # cosine horizon, independent of ``steps``: a shorter run is a prefix of a longer one
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    train_tasks: int = 3000
    difficulty: int = 1
    seed: int = 0
    eval_every: int = 50
    eval_tasks: int = 60
    stop_at_accuracy: float | None = 0.35
    copy_steps: int = 300  # synthetic copy curriculum before the demonstrations (0 = none)
    copy_batch_size: int = 64
    copy_short_share: float = 0.5  # swe-lite: share of short copy episodes (tirl.sft_swe_copy.SHORT_SHARE)
    max_turns: int = 4
    env: str = "tir-math"  # task family of the demonstrations: tir-math | tir-chain
    tools: bool = False  # demonstrate with the env's tools offered and Hermes tool calls (``env.tools = true``)
    max_new_tokens: int = 96
    max_total_tokens: int = 512
    log: Callable[[str], None] = field(default=print, repr=False)

    @property
    def eval_split(self) -> str:
        """What the stop-early evaluation reads: swe-lite's validation split, else held-out generated tasks."""
        return "validation" if self.env == "swe-lite" else "held-out"
