"""Held-out evaluation through the one rollout path: a request with a group size of 1.

Evaluation runs the same stages as training (:mod:`tirl.rollout.pipeline`:
``reset`` → the episode runner → ``evaluate`` → ``close``, with the same
timeouts, retries and failure accounting), only with its own runner (greedy
sampling for ``eval/accuracy_*``) and one episode per task. An episode that
fails (``init_failed``, ``error``, ``timeout``, ``eval_failed``) counts as
wrong; it is never dropped from ``n``.

Each report lists its tasks' outcomes (:class:`TaskOutcome`, in the JSON of ``eval_before.json``,
``summary.json`` and ``tirl eval --json``), so two evaluations of the same tasks compare pair by pair
(:class:`PairedChange`: McNemar's exact test).

:func:`evaluate_samples` draws several episodes per task (one request with that group size) for pass@k
(:mod:`tirl.rollout.pass_at_k`). Not covered: writing a pipeline trace (the evaluation strategy has no
trace file).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tirl.config import RolloutConfig
from tirl.envs.base import Task
from tirl.rollout.base import EnvFactory, EpisodeRunner, RolloutRequest, RolloutStrategy
from tirl.rollout.pass_at_k import PassAtK
from tirl.types import Trajectory

#: Episodes in flight during an evaluation (a batched generator fills its batches from them).
EVAL_CONCURRENCY = 64


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one task's evaluation episode ended: ``id`` is the task's id (the trajectory's group)."""

    id: str
    correct: bool
    termination: str
    turns: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (keys as the field names)."""
        return {"id": self.id, "correct": self.correct, "termination": self.termination, "turns": self.turns}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> TaskOutcome:
        """The outcome that :meth:`to_dict` wrote."""
        return cls(id=str(row["id"]), correct=bool(row["correct"]), termination=str(row["termination"]),
                   turns=int(row["turns"]))  # fmt: skip


@dataclass(frozen=True, slots=True)
class PairedChange:
    """Two evaluations of the same tasks, pair by pair: solved by both, by one of them, by neither.

    ``p_value`` is McNemar's exact two-sided test (:func:`tirl.ablation_stats.mcnemar_exact`) of
    ``gained`` (solved after only) against ``lost`` (before only). Only the tasks both evaluations hold are
    paired (``n``); a task id that appears twice in one of them is refused.
    """

    n: int
    both: int
    gained: int
    lost: int
    neither: int
    p_value: float

    @classmethod
    def of(cls, before: Sequence[TaskOutcome], after: Sequence[TaskOutcome]) -> PairedChange:
        """Pair ``before`` and ``after`` by task id."""
        from tirl.ablation_stats import mcnemar_exact

        maps = []
        for outcomes in (before, after):
            by_id = {o.id: o.correct for o in outcomes}
            if len(by_id) != len(outcomes):
                raise ValueError("a task id appears twice in one evaluation: its episodes cannot be paired")
            maps.append(by_id)
        ids = [i for i in maps[0] if i in maps[1]]
        cells = Counter((maps[0][i], maps[1][i]) for i in ids)
        gained, lost = cells[(False, True)], cells[(True, False)]
        return cls(n=len(ids), both=cells[(True, True)], gained=gained, lost=lost, neither=cells[(False, False)],
                   p_value=mcnemar_exact(gained, lost))  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (keys as the field names)."""
        return {"n": self.n, "both": self.both, "gained": self.gained, "lost": self.lost,
                "neither": self.neither, "p_value": self.p_value}  # fmt: skip

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> PairedChange:
        """The comparison that :meth:`to_dict` wrote."""
        return cls(n=int(row["n"]), both=int(row["both"]), gained=int(row["gained"]), lost=int(row["lost"]),
                   neither=int(row["neither"]), p_value=float(row["p_value"]))  # fmt: skip

    def line(self) -> str:
        """The cells and the p-value in words (``tirl train``'s last lines, report.html)."""
        return (
            f"{self.gained} solved after only, {self.lost} before only, {self.both} both, {self.neither} neither "
            f"(McNemar exact p = {self.p_value:.3g})"
        )


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

    def outcomes(self) -> list[TaskOutcome]:
        """Each episode's task and end, sorted by task id (an episode without a task id gets its own id)."""
        rows = [
            TaskOutcome(
                id=t.group or t.id,
                correct=t.correct is True,
                termination=t.termination.value if t.termination else "none",
                turns=len(t.turns),
            )
            for t in self.trajectories
        ]
        return sorted(rows, key=lambda o: o.id)

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


async def evaluate_samples(
    strategy: RolloutStrategy, tasks: Sequence[Task], samples: int, *, step: int = 0
) -> tuple[EvalReport, PassAtK]:
    """``samples`` episodes per task through ``strategy`` (a sampling runner: a greedy one repeats itself).

    One request with a group size of ``samples``, as a training step draws its groups: episode ``j`` of task
    ``i`` is ``s{step}-t{i}-g{j}``, so a seeded runner samples each differently and the same call repeats.
    The report counts every episode (``n`` = tasks × samples; its accuracy is pass@1).
    """
    t0 = time.perf_counter()
    batch = await strategy.collect(RolloutRequest(tasks=list(tasks), group_size=samples, step=step))
    report = EvalReport.of(batch.trajectories, time.perf_counter() - t0)
    return report, PassAtK.of([(o.id, o.correct) for o in report.outcomes()], samples)


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
