"""Held-out evaluation through the one rollout path: a request with a group size of 1.

Evaluation runs the same stages as training (:mod:`tirl.rollout.pipeline`:
``reset`` → the episode runner → ``evaluate`` → ``close``, with the same
timeouts, retries and failure accounting), only with its own runner (greedy
sampling for ``eval/accuracy_*``) and one episode per task. An episode that
fails (``init_failed``, ``error``, ``timeout``, ``eval_failed``) counts as
wrong; it is never dropped from ``n``.

Not covered: pass@k (one sample per task) and writing a pipeline trace (the
evaluation strategy has no trace file).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tirl.config import RolloutConfig
from tirl.envs.base import Task
from tirl.rollout.base import EnvFactory, EpisodeRunner, RolloutRequest, RolloutStrategy
from tirl.types import Trajectory

#: Episodes in flight during an evaluation (a batched generator fills its batches from them).
EVAL_CONCURRENCY = 64


@dataclass(slots=True)
class EvalReport:
    """Accuracy of a policy over a task list, with how the episodes ended."""

    n: int
    correct: int
    wall_s: float
    terminations: dict[str, int]
    mean_turns: float
    mean_tokens: float
    trajectories: list[Trajectory] = field(repr=False, default_factory=list)

    @property
    def accuracy(self) -> float:
        """Fraction of tasks answered correctly (failed episodes count as wrong)."""
        return self.correct / self.n if self.n else 0.0

    @classmethod
    def of(cls, trajs: Sequence[Trajectory], wall_s: float) -> EvalReport:
        """The report of finished trajectories (one per task)."""
        n = len(trajs)
        ends = Counter(t.termination.value if t.termination else "none" for t in trajs)
        return cls(
            n=n,
            correct=sum(1 for t in trajs if t.correct is True),
            wall_s=wall_s,
            terminations=dict(sorted(ends.items())),
            mean_turns=sum(len(t.turns) for t in trajs) / n if n else 0.0,
            mean_tokens=sum(len(t.token_ids) for t in trajs) / n if n else 0.0,
            trajectories=list(trajs),
        )


def eval_rollout_config(base: RolloutConfig | None = None, concurrency: int = EVAL_CONCURRENCY) -> RolloutConfig:
    """``base`` (default: the defaults) with at least ``concurrency`` runner workers and queue places."""
    cfg = base or RolloutConfig()
    return replace(
        cfg,
        run_workers=max(cfg.run_workers, concurrency),
        run_queue_size=max(cfg.run_queue_size, concurrency),
        batch_size=max(cfg.batch_size, concurrency) if cfg.batch_size else 0,
    )


async def evaluate_policy(strategy: RolloutStrategy, tasks: Sequence[Task], *, step: int = 0) -> EvalReport:
    """One episode per task through ``strategy``; ``step`` numbers the episodes (their ids and seeds)."""
    t0 = time.perf_counter()
    batch = await strategy.collect(RolloutRequest(tasks=list(tasks), group_size=1, step=step))
    return EvalReport.of(batch.trajectories, time.perf_counter() - t0)


async def evaluate_accuracy(
    runner: EpisodeRunner,
    env_factory: EnvFactory,
    tasks: Sequence[Task],
    *,
    concurrency: int = EVAL_CONCURRENCY,
    seed: int = 0,
    config: RolloutConfig | None = None,
) -> EvalReport:
    """:func:`evaluate_policy` with a strategy made (and closed) here from ``runner`` and ``env_factory``.

    ``seed`` is the request's step number: the episode ids (``s{seed}-t{i}-g0``),
    hence a seeded runner's per-turn sampling seeds, derive from it.
    """
    from tirl.rollout.strategies import make_strategy

    strategy = make_strategy(eval_rollout_config(config, concurrency), env_factory, runner)
    try:
        return await evaluate_policy(strategy, tasks, step=seed)
    finally:
        await strategy.close()
