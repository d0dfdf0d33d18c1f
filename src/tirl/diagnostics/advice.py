"""What to check first for each finding, in the words of the framework that wrote the log.

A verl user has no ``filter.max_resample_rounds`` and no ``tirl/parsing.py``; a TRL user configures a
``GRPOConfig``. :func:`check_first` picks the advice by the log's format (:mod:`tirl.diagnostics.adapters`):
tirl's own keys and modules for tirl logs; verl's config keys and ``RayPPOTrainer.fit`` for verl and
SimpleTIR (a verl recipe) logs; ``GRPOConfig`` fields and :class:`~tirl.integrations.trl.VoidFilteredGRPOTrainer`
for TRL logs; SkyRL's config keys for SkyRL logs. :func:`where_to_look` is the bundle's code section for a
log that tirl did not write: the place in that framework's training step, not tirl's files.

Not covered: keys of framework versions other than those named (verl 0.9, TRL 1.16, SkyRL's
``skyrl_train`` config as of 2025). A wandb CSV export gets the advice of the format its keys are read as.
"""

from __future__ import annotations

from tirl.diagnostics.training import CHECK_FIRST

_VERL: dict[str, str] = {
    "void_leak": "the void check before the log-probs and compute_advantage in RayPPOTrainer.fit: a long garbage "
    "turn was not judged void and went into the loss — call tirl.integrations.verl.drop_void_trajectories right "
    "after batch.union(gen_batch_output); check actor_rollout_ref.rollout.response_length (the longest turn) and "
    "actor_rollout_ref.actor.clip_ratio_c (dual clip)",
    "late_filter": "the order in RayPPOTrainer.fit: the void filter must run before compute_log_prob, "
    "compute_ref_log_prob and compute_advantage, not after update_actor",
    "void_drift": "what pushes void turns down: a dropped void trajectory gets no gradient, so its share can "
    "random-walk up; lower actor_rollout_ref.actor.optim.lr, compare with keeping void rows at reward 0, and "
    "watch the void share from the onset step on",
    "detector_inactive": "which text the void check reads: the decoded response under response_mask (each run of "
    "1s is a turn), not a field the reward function pre-fills; the action rule must match the data's answer "
    "format (gsm8k's '####': ACTION_RULES['gsm8k'])",
    "empty_batch": "resample instead of loosening the rule: algorithm.filter_groups.enable=true with "
    "algorithm.filter_groups.max_num_gen_batches (DAPO's recipe), or skip the step when drop_void_trajectories "
    "returns None; a larger actor_rollout_ref.rollout.n gives each group more chances",
    "kl_blowup": "the step size and the pull back to the reference: raise actor_rollout_ref.actor.kl_loss_coef "
    "(with actor_rollout_ref.actor.use_kl_loss=true) or algorithm.kl_ctrl.kl_coef (use_kl_in_reward), lower "
    "actor_rollout_ref.actor.optim.lr; a void_leak at the same steps means garbage tokens drove the KL",
    "entropy_collapse": "exploration: lower actor_rollout_ref.actor.optim.lr, raise "
    "actor_rollout_ref.actor.clip_ratio_high (clip-higher) or actor_rollout_ref.actor.entropy_coeff; check "
    "actor_rollout_ref.rollout.temperature",
}
_TRL: dict[str, str] = {
    "void_leak": "the void check: a long garbage completion was not judged void and went into the loss — plain "
    "GRPOTrainer removes none (train with tirl.integrations.trl.VoidFilteredGRPOTrainer); with it, check its "
    "rules against that completion; check GRPOConfig's max_completion_length (the longest completion) and "
    "epsilon / epsilon_high",
    "late_filter": "where completions are filtered: a reward function returning 0 or a masked loss still leaves "
    "the completion in the group statistics; VoidFilteredGRPOTrainer takes it out before the advantages",
    "void_drift": "what pushes void turns down: a dropped void completion gets no gradient, so its share can "
    "random-walk up; lower GRPOConfig's learning_rate, compare void_mode='mask', and watch void/ratio from the "
    "onset step on",
    "detector_inactive": "which text the void check reads: each assistant turn of the completion (TRL's "
    "tool-calling loop or your rollout_func's transcript), not a pre-filled field; the action rule must match "
    "the prompt's answer format (rules=ACTION_RULES['gsm8k'] for '####')",
    "empty_batch": "every completion of the step was void: TRL gives such groups zero advantage and does not "
    "resample — raise GRPOConfig's num_generations or lower temperature, and compare frac_reward_zero_std",
    "kl_blowup": "the step size and the pull back to the reference: raise GRPOConfig's beta (0 loads no reference "
    "model), lower learning_rate or lengthen warmup_ratio; a void_leak at the same steps means garbage tokens "
    "drove the KL",
    "entropy_collapse": "exploration: lower GRPOConfig's learning_rate, raise epsilon_high (clip-higher) and check "
    "temperature; GRPOTrainer has no entropy bonus",
}
_SKYRL: dict[str, str] = {
    "void_leak": "the void check before the advantages: a long garbage turn was not judged void and went into "
    "the loss; check generator.max_turns and generator.sampling_params.max_generate_length (the longest turn)",
    "late_filter": "the order of the training step: the void filter must run before the advantages and "
    "log-probs, not after the policy update",
    "void_drift": "what pushes void turns down: a dropped void trajectory gets no gradient, so its share can "
    "random-walk up; lower trainer.policy.optimizer_config.lr and watch the void share from the onset step on",
    "detector_inactive": "which text the void check reads: the model's own turns, not a field the env "
    "pre-fills; the env's action rule must match the prompt's answer format",
    "empty_batch": "resample instead of loosening the rule; a larger generator.n_samples_per_prompt gives each "
    "group more chances",
    "kl_blowup": "the step size and the pull back to the reference: raise trainer.algorithm.kl_loss_coef (with "
    "trainer.algorithm.use_kl_loss=true), lower trainer.policy.optimizer_config.lr",
    "entropy_collapse": "exploration: lower trainer.policy.optimizer_config.lr, raise trainer.algorithm.eps_clip_high "
    "(clip-higher) or turn on trainer.algorithm.use_entropy_loss; check generator.sampling_params.temperature",
}
_BY_FORMAT: dict[str, dict[str, str]] = {"verl": _VERL, "simpletir": _VERL, "trl": _TRL, "skyrl": _SKYRL}

_WHERE: dict[str, str] = {
    "verl": "This log is verl's, so tirl's files are not where to look. In verl 0.9's "
    "`verl/trainer/ppo/ray_trainer.py` (`RayPPOTrainer.fit`), void trajectories must leave the batch right after "
    "`batch = batch.union(gen_batch_output)` and before `compute_log_prob`, `compute_ref_log_prob` and "
    "`compute_advantage`: `batch, stats = tirl.integrations.verl.drop_void_trajectories(batch, self.tokenizer, "
    "divisible_by=world_size)` (docs/integrations.md, examples/verl_void_filter.py). Attach the run's hydra config "
    "(`actor_rollout_ref.*`, `algorithm.*`) for the reviewer.",
    "trl": "This log is TRL's, so tirl's files are not where to look. With `GRPOTrainer`, void completions stay in "
    "the group mean/std and the loss; `tirl.integrations.trl.VoidFilteredGRPOTrainer` (a `GRPOTrainer` subclass, "
    "same `GRPOConfig`) takes them out of both and logs `void/trajectories` and `void/ratio` "
    "(docs/integrations.md, examples/trl_grpo_tools.py). Attach the run's `GRPOConfig` for the reviewer.",
    "skyrl": "This log is SkyRL's, so tirl's files are not where to look: the void filter belongs in the trainer "
    "step before the advantages and log-probs are computed. Attach the run's config (`trainer.*`, `generator.*`) "
    "for the reviewer.",
}
_WHERE["simpletir"] = _WHERE["verl"]


def check_first(kind: str, fmt: str) -> str:
    """What to check first for a finding of ``kind`` in a log of format ``fmt`` (tirl's advice by default)."""
    return _BY_FORMAT.get(fmt, CHECK_FIRST).get(kind, CHECK_FIRST[kind])


def where_to_look(fmt: str) -> str | None:
    """The bundle's code section for a framework's log; ``None`` for tirl's own (its file:line are shown)."""
    return _WHERE.get(fmt)
