"""The training loop: rollout → void filter (+ resample) → advantages → update → log → checkpoint.

The trainer talks to rollouts only through a
:class:`~tirl.rollout.base.RolloutStrategy`; it never runs an env or a
generator itself. One step:

1. Ask the strategy for ``algo.group_size`` episodes of each of
   ``trainer.prompts_per_step`` tasks (``tasks(step, n)`` chooses them,
   deterministically per step, so a resumed run sees the same tasks).
2. Apply :class:`~tirl.filters.void_turn.VoidTurnFilter` to the groups in
   one pass (``filter.mode``, one row of :data:`tirl.filters.MODES`). It sets
   the typed verdict fields and returns, per group, the kept trajectories and
   how many are *usable*; the trainer compares that count with
   ``filter.min_valid_per_group`` and never interprets the mode itself.
   Failed trajectories are always removed and counted. Short groups are
   resampled (their step-level task indices and the round go into the request,
   so ids and seeds stay unique), at most ``filter.max_resample_rounds``
   times; groups still short are left out. If nothing is left, the step is
   skipped with a warning and logs nulls. If *every* trajectory of the first
   round failed (set-up, sandbox, env), nothing is resampled and the run stops
   after logging the step (:mod:`tirl.trainer.failfast`), unless
   ``trainer.tolerate_failed_steps`` allows it.
3. Group-relative advantages (GRPO/RLOO) over the kept groups only — void
   trajectories are absent (``drop``) before any statistic, ratio or KL.
   Under ``penalize`` the removed void trajectories are then appended as
   rows masked to their void turn with advantage ``-filter.void_penalty``
   (:mod:`tirl.algorithms.void_penalty`); they never enter a group statistic.
4. :class:`~tirl.trainer.update.PolicyUpdater` runs the mini-batch updates;
   the policy version goes up by one and ``on_update`` tells the generator.
   When every advantage is zero (all kept groups have equal rewards) and there
   is no KL term, the gradient is exactly zero: the update is not run
   (``train/no_signal`` = 1), so Adam's momentum does not move the weights.
5. One metrics line, TensorBoard scalars, a trajectory sample; a checkpoint
   every ``trainer.checkpoint_every`` steps and at the last step. The line
   carries what the trajectories say (:func:`rollout_metrics`) and what the
   strategy measured, its resample rounds added up
   (:meth:`~tirl.rollout.batch_stats.RolloutStats.metrics`: retries, timeouts,
   queue depths, generator busy fraction, peak live envs, stage times).

The policy, optimiser, updater and reference model come in one
:class:`~tirl.trainer.learner.Learner` (built by :func:`~tirl.trainer.learner.build_learner`);
metric sinks beyond the run directory's own files (wandb) are given by the
recipe. The steps run through :func:`tirl.trainer.loop.run_steps`: with
``rollout.max_staleness`` K > 0 the rollouts of later steps run while
earlier steps train (at most K versions behind).

Not covered: in-flight weight updates inside a running episode.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tirl.algorithms.advantages import group_advantages
from tirl.algorithms.void_penalty import penalty_rows
from tirl.config import TirlConfig
from tirl.envs.base import Task
from tirl.errors import SetupError
from tirl.filters import FilterStats, VoidTurnFilter
from tirl.rollout.base import RolloutRequest, RolloutStrategy
from tirl.rollout.batch_stats import RolloutStats
from tirl.trainer.attribution import withheld_rows
from tirl.trainer.checkpoint import Checkpoint, ResumePoint, resume_point, save_checkpoint
from tirl.trainer.failfast import failed_error, summarize_failures
from tirl.trainer.learner import Learner
from tirl.trainer.logging import MetricSink, RunLogger
from tirl.trainer.loop import Collected, run_steps
from tirl.trainer.progress import TrainProgress
from tirl.trainer.train_state import RngState
from tirl.trainer.update import PolicyUpdater
from tirl.types import Group, TerminationReason, Trajectory

log = logging.getLogger("tirl.trainer")

TaskFn = Callable[[int, int], list[Task]]  # (step, n) -> n tasks for that step


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rollout_metrics(sampled: list[Trajectory]) -> dict[str, Any]:
    """``rollout/*`` and ``reward/*`` metrics over every non-failed sampled trajectory.

    ``rollout/termination/<reason>`` counts how every sampled trajectory ended (failed ones too), one key per
    :class:`~tirl.types.TerminationReason` in every row (0 when none ended so), so a plot or a CSV column never
    starts mid-run; a trajectory without a termination is not counted there.
    """
    ok = [t for t in sampled if not t.failed]
    ends = Counter(t.termination for t in sampled if t.termination is not None)
    lens = [float(len(t.token_ids)) for t in ok]
    turns = [float(len(t.turns) or t.policy_turns) for t in ok]  # not the prompt's demonstrations
    rewards = [float(t.reward or 0.0) for t in ok]
    broken = Counter(_eval_failure(t) for t in ok)  # evaluations the episode broke: reward 0, in the update
    broken.pop(None, None)
    return {
        **{f"rollout/eval_failure/{why}": float(n) for why, n in sorted(broken.items())},
        **{f"rollout/termination/{reason.value}": float(ends[reason]) for reason in TerminationReason},
        "rollout/trajectories": len(sampled),
        "rollout/failed": len(sampled) - len(ok),
        "rollout/max_seq_len": max(lens) if lens else None,
        "rollout/mean_seq_len": _mean(lens),
        "rollout/turns_mean": _mean(turns),
        "rollout/gen_tokens": float(sum(sum(t.loss_mask) for t in ok)),
        "reward/mean": _mean(rewards),
        "reward/correct_frac": _mean([1.0 if is_correct(t) else 0.0 for t in ok]),
    }


def _eval_failure(traj: Trajectory) -> str | None:
    """``info["eval"]["eval_failure"]`` (:class:`tirl.envs.base.EvalResult`), when the evaluation set one."""
    evaluation = traj.info.get("eval")
    why = evaluation.get("eval_failure") if isinstance(evaluation, dict) else None
    return why if isinstance(why, str) else None


def is_correct(traj: Trajectory) -> bool:
    """The evaluator's verdict (``Trajectory.correct``), else reward >= 1."""
    if traj.correct is not None:
        return traj.correct
    return (traj.reward or 0.0) >= 1.0 - 1e-9


@dataclass
class Trainer:
    """Drives the learner, filter, logger and checkpoints of one run directory."""

    cfg: TirlConfig
    learner: Learner
    tokenizer: Any
    strategy: RolloutStrategy
    tasks: TaskFn
    run_dir: Path
    on_update: Callable[[int], None] | None = None
    progress: bool = True
    sinks: Sequence[MetricSink] = ()  # further metric sinks (wandb: tirl.integrations.wandb_sink, by the recipe)
    policy_version: int = 0
    start_step: int = 1
    history: list[dict[str, Any]] = field(default_factory=list)
    failed_steps: int = 0  # steps whose every trajectory failed (trainer.tolerate_failed_steps)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self.filter = VoidTurnFilter.from_config(self.cfg.filter, self.cfg.env)

    @property
    def model(self) -> Any:
        """The policy being trained."""
        return self.learner.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The policy's optimiser."""
        return self.learner.optimizer

    @property
    def updater(self) -> PolicyUpdater:
        """The policy's updater."""
        return self.learner.updater

    # ----------------------------------------------------------------- resume
    def resume(self, point: ResumePoint | None = None) -> Checkpoint | None:
        """Restore optimiser and RNG state from ``point`` (default: :func:`resume_point` of the run directory).

        The model must already hold the checkpoint's weights. None when the run has no checkpoint yet.
        """
        point = point if point is not None else resume_point(self.run_dir)
        if point is None:
            return None
        ckpt = point.checkpoint
        point.training.load_into(self.optimizer)
        point.training.rng.restore()
        self.start_step = ckpt.step + 1
        self.policy_version = ckpt.policy_version
        if self.on_update is not None:
            self.on_update(self.policy_version)
        return ckpt

    # ------------------------------------------------------------------ rollout
    async def _collect_groups(
        self, tasks: list[Task], indices: list[int], step: int, attempt: int
    ) -> tuple[list[Group], RolloutStats]:
        request = RolloutRequest(
            tasks=[tasks[i] for i in indices],
            group_size=self.cfg.algo.group_size,
            policy_version=self.policy_version,
            step=step,
            task_indices=tuple(indices),
            round=attempt,
        )
        batch = await self.strategy.collect(request)
        if len(batch.groups) != len(indices):
            raise RuntimeError(f"rollout strategy returned {len(batch.groups)} groups for {len(indices)} tasks")
        return batch.groups, batch.stats

    async def collect(self, step: int) -> Collected:
        """Rollout, void filter and bounded resampling of one step.

        The filter's ``usable`` counts decide which groups are short; each
        resample round asks only for those tasks, with their step-level task
        indices and the round number (so ids and seeds stay unique).
        """
        t0 = time.perf_counter()
        tasks = self.tasks(step, self.cfg.trainer.prompts_per_step)
        fc = self.cfg.filter
        need = list(range(len(tasks)))
        kept: list[list[Trajectory]] = [[] for _ in tasks]
        usable = [0] * len(tasks)
        sampled: list[Trajectory] = []
        stats = FilterStats()
        measured = RolloutStats()  # what the strategy measured, over every round
        penalized: list[Trajectory] = []
        withheld: list[list[Trajectory]] = [[] for _ in tasks]  # void ones drop/penalize removed (attribution)
        resampled = resampled_groups = rounds = 0
        for attempt in range(fc.max_resample_rounds + 1):
            groups, round_stats = await self._collect_groups(tasks, need, step, attempt)
            measured.add(round_stats)
            res = self.filter.apply(groups)
            stats.add(res.stats)
            penalized.extend(res.penalized)
            for i, group, n, back in zip(need, res.groups, res.usable, res.withheld, strict=True):
                kept[i].extend(group.trajectories)
                usable[i] += n
                withheld[i].extend(back)
            fresh = [t for g in groups for t in g.trajectories]
            sampled.extend(fresh)
            if attempt:
                rounds += 1
                resampled += len(fresh)
                resampled_groups += len(need)
            need = [i for i in range(len(tasks)) if usable[i] < fc.min_valid_per_group]
            if not need or (attempt == 0 and fresh and all(t.failed for t in fresh)):
                break  # every trajectory failed: the same cause would fail a resample (tirl.trainer.failfast)
        chosen = [i for i in range(len(tasks)) if usable[i] >= fc.min_valid_per_group]
        final = [Group(id=tasks[i].id, trajectories=kept[i]) for i in chosen]
        stats.empty_groups = sum(1 for n in usable if n == 0)
        stats.min_valid_per_group = min(usable) if usable else 0
        return Collected(
            sampled=sampled,
            groups=final,
            stats=stats,
            measured=measured,
            resampled=resampled,
            resampled_groups=resampled_groups,
            rounds=rounds,
            groups_requested=len(tasks),
            min_usable=stats.min_valid_per_group,
            rollout_s=time.perf_counter() - t0,
            penalized=penalized,
            withheld=[withheld[i] for i in chosen],
        )

    # ------------------------------------------------------------------- update
    def advantages(self, groups: list[Group]) -> tuple[list[Trajectory], torch.Tensor]:
        """Flatten the kept groups and compute one advantage per trajectory: Tensor  # [N]."""
        trajs = [t for g in groups for t in g.trajectories]
        gid = torch.tensor([i for i, g in enumerate(groups) for _ in g.trajectories], dtype=torch.long)
        rewards = torch.tensor([float(t.reward or 0.0) for t in trajs], dtype=torch.float32)
        adv = group_advantages(
            rewards, gid, estimator=self.cfg.algo.advantage, std_normalize=self.cfg.algo.std_normalize
        )
        return trajs, adv

    async def train_step(self, step: int) -> tuple[dict[str, Any], list[Trajectory]]:
        """One full step; returns its metrics and the trajectories it sampled."""
        t0 = time.perf_counter()
        return await self.learn(step, await self.collect(step), t0)

    async def learn(self, step: int, col: Collected, t0: float) -> tuple[dict[str, Any], list[Trajectory]]:
        """Advantages and the update on one step's collected groups (``t0``: when the step began)."""
        metrics: dict[str, Any] = {**rollout_metrics(col.sampled), **col.measured.metrics(), **col.stats.metrics()}
        metrics["dist/world_size"] = self.learner.world_size  # --nproc N (tirl.distributed)
        metrics.update(
            {
                "filter/resampled": col.resampled,
                "filter/resampled_groups": col.resampled_groups,
                "filter/resample_rounds": col.rounds,
                "filter/groups_used": len(col.groups),
                "filter/groups_dropped": col.groups_requested - len(col.groups),
                "time/rollout_s": col.rollout_s,
                "policy/version": self.policy_version,
            }
        )
        trajs, adv = self.advantages(col.groups)
        attribution = withheld_rows(
            col.groups, col.withheld or [[] for _ in col.groups], len(trajs), self.cfg.algo.advantage,
            self.cfg.algo.std_normalize,
        )  # fmt: skip
        if col.penalized and self.cfg.filter.void_penalty > 0:  # after the group statistics, never in them
            rows, row_adv = penalty_rows(col.penalized, self.cfg.filter.void_penalty)
            trajs, adv = [*trajs, *rows], torch.cat([adv, row_adv])
            metrics["filter/penalized_trajectories"] = len(rows)
        if not trajs or not any(sum(t.loss_mask) for t in trajs):
            log.warning(
                "step %d skipped: no group kept %d usable trajectories after %d resample round(s) "
                "(valid %d, void %d, failed %d)",
                step,
                self.cfg.filter.min_valid_per_group,
                col.rounds,
                col.stats.valid,
                col.stats.void,
                col.stats.failed,
            )
            metrics.update({"train/skipped_step": 1, "time/step_s": time.perf_counter() - t0})
            return metrics, col.sampled
        if float(adv.abs().max().item()) == 0.0 and self.cfg.algo.kl_coef == 0:
            # every kept group has equal rewards: the policy gradient is exactly zero. Skipping the optimiser
            # also keeps Adam's momentum from moving the weights on a step without any learning signal.
            metrics.update(
                {"train/skipped_step": 0, "train/no_signal": 1, "train/optimizer_steps": 0, "train/skipped_updates": 0}
            )
            metrics["time/step_s"] = time.perf_counter() - t0
            return metrics, col.sampled
        t1 = time.perf_counter()
        # the update is CPU/GPU-bound; run it off the event loop so a strategy's background tasks keep going
        seed = self.cfg.trainer.seed * 1_000_003 + step
        stats = await asyncio.to_thread(self.updater.update, trajs, adv, seed=seed, attribution=attribution)
        if stats.steps:
            self.policy_version += 1
            if self.on_update is not None:  # a weight sync (vLLM, HTTP) blocks for seconds: off the event loop
                await asyncio.to_thread(self.on_update, self.policy_version)
        metrics.update(stats.metrics())
        metrics.update(
            {
                "train/skipped_step": 0,
                "train/no_signal": 0,
                "train/advantage_abs_mean": float(adv.abs().mean().item()),
                "train/lr": float(self.optimizer.param_groups[0]["lr"]),  # the last optimiser step's (warm-up)
                "reward/mean_kept": _mean([float(t.reward or 0.0) for t in trajs]),
                "time/update_s": time.perf_counter() - t1,
                "time/step_s": time.perf_counter() - t0,
            }
        )
        return metrics, col.sampled

    # --------------------------------------------------------------------- loop
    def _count_failed(self, step: int, metrics: dict[str, Any], sampled: list[Trajectory]) -> SetupError | None:
        """The error that stops the run when every trajectory of ``step`` failed beyond the tolerance, else None.

        A tolerated step gets ``train/tolerated_failed_steps`` (the count so far) for its step line.
        """
        summary = summarize_failures(sampled)
        if not summary.all_failed:
            return None
        self.failed_steps += 1
        if self.failed_steps > self.cfg.trainer.tolerate_failed_steps:
            return failed_error(summary, self.cfg, f"step {step}")
        metrics["train/tolerated_failed_steps"] = self.failed_steps
        log.warning("step %d: every trajectory failed (%s); tolerated %d of %d (trainer.tolerate_failed_steps)",
                    step, summary.reason, self.failed_steps, self.cfg.trainer.tolerate_failed_steps)  # fmt: skip
        return None

    def _sample(self, step: int, sampled: list[Trajectory]) -> list[Trajectory]:
        k = min(self.cfg.trainer.samples_per_step, len(sampled))
        return random.Random(self.cfg.trainer.seed * 7919 + step).sample(sampled, k)

    def save(self, step: int) -> Checkpoint:
        """Write the checkpoint of ``step`` (atomic)."""
        return save_checkpoint(
            self.run_dir,
            step,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            state={"policy_version": self.policy_version},
            rng=RngState.capture(),
        )

    async def run(self, stop_after: int | None = None) -> list[dict[str, Any]]:
        """Train from ``start_step`` to ``trainer.steps`` (or ``stop_after``); returns the logged rows."""
        tc = self.cfg.trainer
        last = min(tc.steps, stop_after) if stop_after is not None else tc.steps
        logger = RunLogger(self.run_dir, resume_step=self.start_step - 1, sinks=self.sinks)
        try:
            with TrainProgress(tc.steps, start=self.start_step - 1, enabled=self.progress) as bar:

                def record(step: int, metrics: dict[str, Any], sampled: list[Trajectory]) -> None:
                    fatal = self._count_failed(step, metrics, sampled)
                    row = logger.log_step(step, metrics)
                    logger.log_trajectories(step, self._sample(step, sampled))
                    self.history.append(row)
                    bar.update(step, row)
                    if fatal is not None:
                        raise fatal
                    if step % tc.checkpoint_every == 0 or step == tc.steps:
                        self.save(step)

                await run_steps(self, range(self.start_step, last + 1), record)
        finally:
            logger.close()
            self.updater.close()  # join the micro-batch threads: a process that trains many times must not pile them up
        return self.history
