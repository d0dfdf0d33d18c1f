"""The learner of a run, built once: policy, reference model, optimiser, learning-rate schedule and updater.

Every process that updates weights builds them here and nowhere else: the
training recipe (:mod:`tirl.trainer.run`, the one process of a run or rank 0
of ``--nproc N``), every follower rank (:mod:`tirl.distributed.follower`) and
the tests. So a rank cannot train with another optimiser, another
temperature or another reference model than rank 0.

- :func:`load_training_policy` — the policy from a path, on a device, with
  the memory options of ``algo`` (LoRA, gradient checkpointing).
- :func:`load_reference` — the frozen reference model when
  ``algo.kl_coef > 0`` (always the run's *starting* model, ``model.path``,
  also when resuming), else None.
- :func:`build_learner` — AdamW over the trainable parameters (``algo.lr``,
  no weight decay) and the :class:`~tirl.trainer.update.PolicyUpdater`
  (``algo``, ``generation.temperature``, ``algo.autocast``, the tokenizer's
  pad id) with the given gradient-sync strategy (:class:`~tirl.trainer.update.LocalSync`
  by default; a rank passes :class:`tirl.distributed.ddp.DDPSync`). The
  learning-rate schedule is the updater's linear warm-up
  (``algo.warmup_steps``); it reads its position from the optimiser's own
  state, so it has no object of its own to build or to checkpoint.

:class:`RankGroup` is what the recipe needs from a data-parallel world (rank 0's side): start it and
get the sync strategy, send the other ranks the starting state, close it. The implementations live in
:mod:`tirl.distributed`, which depends on this module and not the other way round.

Not covered: optimisers other than AdamW, learning-rate decay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tirl.config import TirlConfig
from tirl.trainer.update import GradSync, LocalSync, PolicyUpdater


@dataclass
class Learner:
    """What one process updates: the policy, its optimiser and updater, and the frozen reference model."""

    model: Any
    optimizer: torch.optim.Optimizer
    updater: PolicyUpdater
    ref_model: Any = None

    @property
    def world_size(self) -> int:
        """How many ranks share each update (1: one process)."""
        return self.updater.sync.world_size


class RankGroup(Protocol):
    """Rank 0's view of a data-parallel world (:mod:`tirl.distributed`); the recipe drives it."""

    def start(self, device: str) -> GradSync:
        """Join the process group as rank 0 (``device``: rank 0's ``model.device``); rank 0's sync strategy."""
        ...

    def share_state(self, learner: Learner) -> None:
        """Send every other rank rank 0's weights and optimiser state."""
        ...

    def close(self, *, abort: bool = False) -> None:
        """Tell the other ranks that the run is over and leave the group.

        ``abort``: rank 0 was interrupted or failed, possibly mid-collective: end them without a collective.
        """
        ...


def load_training_policy(cfg: TirlConfig, model_path: str | None, device: str) -> Any:
    """The policy (:class:`~tirl.models.loading.Policy`) from ``model_path`` (None: ``model.path`` or the built-in).

    On ``device``, in ``model.dtype``, with LoRA and gradient checkpointing applied (``algo``); a LoRA
    checkpoint keeps its adapter trainable.
    """
    from tirl.models.loading import load_policy
    from tirl.models.memory import apply_memory_options

    policy = load_policy(
        model_path or cfg.model.path,
        device=device,
        dtype=cfg.model.dtype,
        threads=cfg.trainer.threads,
        env=cfg.env.name,  # no path: the env's built-in model (tiny-chain for tir-chain, qwen2-chain with tools)
        need_tools=cfg.env.tools,  # a template that renders tools, tool calls and tool results
        train_adapter=cfg.algo.lora_rank > 0,  # resuming a LoRA run: keep its adapter trainable
    )
    policy.model = apply_memory_options(policy.model, cfg.algo)
    return policy


def load_reference(cfg: TirlConfig, device: str) -> Any:
    """The frozen reference model on ``device`` when ``algo.kl_coef > 0`` (the starting model), else None."""
    if cfg.algo.kl_coef <= 0:
        return None
    from tirl.models.loading import load_policy

    ref = load_policy(cfg.model.path, device=device, dtype=cfg.model.dtype, env=cfg.env.name,
                      need_tools=cfg.env.tools).model  # fmt: skip
    ref.requires_grad_(False)
    return ref


def build_learner(
    cfg: TirlConfig, model: Any, tokenizer: Any, *, ref_model: Any = None, sync: GradSync | None = None
) -> Learner:
    """The optimiser and updater of ``model`` as ``cfg`` says (see the module docstring)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.algo.lr, weight_decay=0.0)
    pad = tokenizer.pad_token_id
    updater = PolicyUpdater(
        model=model,
        optimizer=optimizer,
        algo=cfg.algo,
        pad_id=int(pad if pad is not None else 0),
        ref_model=ref_model,
        temperature=cfg.generation.temperature,  # log-probs of the distribution the sampler drew from
        precision=cfg.algo.autocast,  # bf16 autocast of the update's forward passes (tirl.models.memory)
        sync=sync if sync is not None else LocalSync(),
    )
    return Learner(model=model, optimizer=optimizer, updater=updater, ref_model=ref_model)
