"""TRL's and verl's names for tirl config keys: accepted where the meaning is the same, explained where it is not.

A user who knows TRL's ``GRPOConfig`` or verl's Hydra config can write their names in ``--set`` and in a TOML
file::

    tirl train --set num_generations=4 --set beta=0.01        # TRL
    tirl train --set actor_rollout_ref.rollout.n=4            # verl
    tirl train --set algo.loss_agg=token-mean                 # verl's spelling of a tirl value

Each accepted alias becomes its tirl key and leaves a one-line note naming it (``tirl train`` prints it), so the
user learns tirl's name. TRL names are read bare or under ``algo.`` (``algo.num_generations``); verl names by
their full dotted path. Where a foreign name or value means something else in tirl (verl's
``ppo_mini_batch_size`` is a size where ``algo.minibatches`` is a count; TRL's ``dr_grpo`` loss), the
ConfigError says how to convert instead of guessing.

Covered: the keys in :data:`ALIASES` below (``tirl config aliases`` prints them). Not covered: every other
TRL/verl key (they stay unknown-key errors with the closest tirl key suggested), verl's ``${...}``
interpolation, and TRL's per-device batch sizes (tirl's batch is ``trainer.prompts_per_step`` x
``algo.group_size`` trajectories, with no per-device split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tirl.errors import ConfigError


@dataclass(frozen=True)
class Alias:
    """One foreign key: where it comes from, the tirl key it sets, and how its values translate."""

    source: str  # "TRL" | "verl"
    target: str | None  # the tirl key with the same meaning; None: no such key (``convert`` says what to do)
    values: Mapping[str, str] = field(default_factory=dict)  # foreign value -> tirl value (others pass as given)
    refused: Mapping[str, str] = field(default_factory=dict)  # foreign value -> how to convert (no tirl value)
    convert: str = ""  # target None: how to express it in tirl
    note: str = ""  # a difference worth a word even where the meaning is the same


_LOSS_AGG = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean"}
_LOSS_AGG_REFUSED = {
    "seq-mean-token-sum": "tirl has token_mean and seq_mean (verl's seq-mean-token-mean); use one of them",
    "seq-mean-token-sum-norm": "tirl has token_mean and seq_mean (verl's seq-mean-token-mean); use one of them",
}
_KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
_KL |= {"low_var_kl+": "k3+", "k3+": "k3+"}
_KL_REFUSED = {
    "abs": "tirl has k1, k2 (verl's mse), k3 (verl's low_var_kl) and k3+; use one of them",
    "full": "tirl has k1, k2 (verl's mse), k3 (verl's low_var_kl) and k3+; use one of them",
}

# TRL's GRPOConfig names (trl/trainer/grpo_config.py), read bare or under ``algo.``.
TRL: dict[str, Alias] = {
    "num_generations": Alias("TRL", "algo.group_size"),
    "beta": Alias("TRL", "algo.kl_coef"),
    "epsilon": Alias(
        "TRL",
        "algo.clip_low",
        note="TRL also uses epsilon as the upper bound when epsilon_high is unset; "
        "tirl's algo.clip_high keeps its own value (0.28 by default)",
    ),
    "epsilon_high": Alias("TRL", "algo.clip_high"),
    "learning_rate": Alias("TRL", "algo.lr"),
    "max_grad_norm": Alias("TRL", "algo.grad_clip"),
    "num_iterations": Alias("TRL", "algo.epochs"),
    "warmup_steps": Alias("TRL", "algo.warmup_steps"),
    "gradient_checkpointing": Alias("TRL", "algo.gradient_checkpointing"),
    "vllm_importance_sampling_cap": Alias("TRL", "algo.tis_cap"),
    "temperature": Alias("TRL", "generation.temperature"),
    "top_p": Alias("TRL", "generation.top_p"),
    "max_completion_length": Alias(
        "TRL",
        "generation.max_new_tokens",
        note="tirl caps each assistant turn; the whole episode is generation.max_total_tokens",
    ),
    "max_steps": Alias("TRL", "trainer.steps"),
    "seed": Alias("TRL", "trainer.seed"),
    "loss_type": Alias(
        "TRL",
        "algo.loss_agg",
        values={"grpo": "seq_mean", "bnpo": "token_mean", "dapo": "token_mean"},
        refused={
            "dr_grpo": "Dr. GRPO divides by a fixed length; tirl has token_mean (TRL's dapo/bnpo) and "
            "seq_mean (TRL's grpo)"
        },
    ),
    "scale_rewards": Alias(
        "TRL",
        "algo.std_normalize",
        values={"group": "true", "true": "true", "none": "false", "false": "false"},
        refused={"batch": "tirl normalises by the group's std (scale_rewards=group) or not at all (none)"},
    ),
    "importance_sampling_level": Alias(
        "TRL",
        None,
        convert="tirl's ratios are per token (TRL's default, 'token'); sequence-level (GSPO) "
        "ratios are not implemented: drop the key",
    ),
    "per_device_train_batch_size": Alias(
        "TRL",
        None,
        convert="tirl's batch is trainer.prompts_per_step x algo.group_size trajectories: set "
        "trainer.prompts_per_step = per_device_train_batch_size x devices / num_generations",
    ),
}

# verl's Hydra keys (verl/trainer/config/ppo_trainer.yaml), by full dotted path.
_A = "actor_rollout_ref.actor."
VERL: dict[str, Alias] = {
    "actor_rollout_ref.rollout.n": Alias("verl", "algo.group_size"),
    "actor_rollout_ref.rollout.temperature": Alias("verl", "generation.temperature"),
    "actor_rollout_ref.rollout.top_p": Alias("verl", "generation.top_p"),
    "actor_rollout_ref.model.path": Alias("verl", "model.path"),
    "actor_rollout_ref.model.enable_gradient_checkpointing": Alias("verl", "algo.gradient_checkpointing"),
    f"{_A}optim.lr": Alias("verl", "algo.lr"),
    f"{_A}clip_ratio_low": Alias("verl", "algo.clip_low"),
    f"{_A}clip_ratio_high": Alias("verl", "algo.clip_high"),
    f"{_A}clip_ratio_c": Alias("verl", "algo.dual_clip"),
    f"{_A}grad_clip": Alias("verl", "algo.grad_clip"),
    f"{_A}ppo_epochs": Alias("verl", "algo.epochs"),
    f"{_A}kl_loss_coef": Alias("verl", "algo.kl_coef"),
    f"{_A}kl_loss_type": Alias("verl", "algo.kl_estimator", values=_KL, refused=_KL_REFUSED),
    f"{_A}loss_agg_mode": Alias("verl", "algo.loss_agg", values=_LOSS_AGG, refused=_LOSS_AGG_REFUSED),
    f"{_A}ppo_mini_batch_size": Alias(
        "verl",
        None,
        convert="verl's ppo_mini_batch_size is a size in prompts, tirl's algo.minibatches a "
        "count: set algo.minibatches = trainer.prompts_per_step / ppo_mini_batch_size",
    ),
    f"{_A}use_kl_loss": Alias(
        "verl", None, convert="tirl adds the KL term whenever algo.kl_coef > 0: set algo.kl_coef (0 = off)"
    ),
    "data.train_batch_size": Alias("verl", "trainer.prompts_per_step"),
    "trainer.total_training_steps": Alias("verl", "trainer.steps"),
    "algorithm.adv_estimator": Alias(
        "verl",
        "algo.advantage",
        refused={
            v: "tirl has grpo and rloo (critic-free); use one of them"
            for v in ("gae", "reinforce_plus_plus", "remax", "opo", "gpg")
        },
    ),
    "algorithm.norm_adv_by_std_in_grpo": Alias("verl", "algo.std_normalize"),
}

# verl's spellings of values of tirl's own keys.
VALUE_ALIASES: dict[str, Alias] = {
    "algo.loss_agg": Alias("verl", "algo.loss_agg", values=_LOSS_AGG, refused=_LOSS_AGG_REFUSED),
    "algo.kl_estimator": Alias("verl", "algo.kl_estimator", values=_KL, refused=_KL_REFUSED),
}


def lookup(key: str) -> Alias | None:
    """The alias a dotted foreign key names (``num_generations``, ``algo.beta``, ``actor_rollout_ref.rollout.n``)."""
    if key in VERL:
        return VERL[key]
    bare = key.removeprefix("algo.")
    return TRL.get(bare) if bare == key or key.startswith("algo.") else None


@dataclass(frozen=True)
class Translated:
    """A foreign key and value in tirl's terms, with the note to show the user (empty for a tirl key as given)."""

    key: str
    value: Any
    note: str = ""


def translate(key: str, value: Any, is_tirl_key: Callable[[str], bool]) -> Translated:
    """``key=value`` in tirl's names; a tirl key with a tirl value passes unchanged.

    Raises ConfigError for a foreign key or value that has no tirl equivalent, saying how to convert.
    """
    if is_tirl_key(key):
        alias = VALUE_ALIASES.get(key)
        if alias is None or not isinstance(value, str):
            return Translated(key, value)
        return _value(key, alias, value, value_only=True)
    alias = lookup(key)
    if alias is None:
        return Translated(key, value)  # an unknown key: the config's own error names the closest valid one
    if alias.target is None:
        raise ConfigError(f"config {key} ({alias.source}) has no tirl equivalent: {alias.convert}")
    return _value(key, alias, value, value_only=False)


def _value(key: str, alias: Alias, value: Any, *, value_only: bool) -> Translated:
    target = alias.target or key
    text = str(value).lower() if isinstance(value, (str, bool)) else None
    if text is not None and text in alias.refused:
        raise ConfigError(f"config {key}={value!r} ({alias.source}) has no tirl equivalent: {alias.refused[text]}")
    if text is not None and text in alias.values:
        new = alias.values[text]
        if value_only and new == value:
            return Translated(key, value)
        note = f"{key}={value} is {alias.source}'s spelling; tirl reads it as {target}={new}"
        return Translated(target, new, note)
    if value_only:
        return Translated(key, value)
    note = f"{key} is {alias.source}'s name for {target}" + (f" ({alias.note})" if alias.note else "")
    return Translated(target, value, note)


def alias_table() -> list[tuple[str, str, str]]:
    """(foreign key, source, what tirl does with it) for every alias, for ``tirl config aliases`` and the docs."""
    rows = []
    for key, alias in [*TRL.items(), *VERL.items()]:
        what = alias.target or f"refused: {alias.convert}"
        if alias.values:
            what += " (" + ", ".join(f"{a}->{b}" for a, b in alias.values.items()) + ")"
        rows.append((key, alias.source, what))
    return rows
