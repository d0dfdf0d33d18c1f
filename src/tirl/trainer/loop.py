"""The step loops: synchronous (K = 0) and asynchronous RL, rollouts ahead of the update by at most K.

A step's data between its rollout and its update is one :class:`Collected`.
:func:`run_steps` runs a range of steps on a :class:`StepSource` (the
:class:`~tirl.trainer.trainer.Trainer`) and hands each step's metrics to
``record``. With ``rollout.max_staleness`` K = 0 it alternates
``collect`` and ``learn``; with K > 0 :func:`train_overlapped` drives the
source with :func:`tirl.rollout.staleness.run_overlapped`: ``produce`` is the trainer's
own :meth:`~tirl.trainer.trainer.Trainer.collect` (rollout, void filter,
resampling — exactly as in synchronous mode, at the policy version current
when each request is made) and ``consume`` is
:meth:`~tirl.trainer.trainer.Trainer.learn` (advantages and the update), so
the filter, the resampler, the advantages and the loss are the same code as
with K = 0. The update runs in a worker thread, so the event loop keeps
serving the rollouts of later steps while it runs.

Staleness: a group that holds any trajectory more than K versions behind the
trainer at update time is left out whole (its group statistics would
otherwise change) and counted (``async/stale_dropped`` trajectories,
``async/stale_groups``); with step-level versions the gate makes that rare
(it needs versions that move inside a step). Metrics per step:
``async/max_staleness`` (K), ``async/step_lag`` (updates between the step's
rollout start and its update), ``async/version_lag_max`` (the oldest
trajectory's version lag), ``time/step_interval_s`` (wall seconds since the
previous step's update ended: 1 / steps per second).

Off-policy correction: the loss is decoupled PPO. The PPO ratio is taken
against the *proximal* policy (the trainer's weights at the start of the
update, ``old_logprobs``), and the gap between the proximal and the
*behaviour* policy (the generator's log-probs, K versions older at most) is
corrected by the truncated importance weight tirl already has
(``min(pi_prox / pi_behav, algo.tis_cap)``, :func:`tirl.algorithms.losses.tis_weights`).
The clip then bounds the step from the proximal policy, not from the stale
behaviour policy, so a lag does not shrink the trust region to nothing; the
truncation bounds the variance of the behaviour weight. Nothing new is
needed in the loss: the same two log-probs already exist for the
generator/trainer mismatch.

The pipeline trace (``rollout.trace``) marks each snapshot with
``trainer_updating`` while an update runs, so the overlap is visible there:
``gpu_util`` > 0 (generator busy) with ``trainer_updating`` true.

Not covered: in-flight weight updates inside an episode (the in-process
generator is a snapshot that gets the new weights between requests), and
regeneration of the dropped stale groups (they are left out, like groups
still short after resampling).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tirl.config import TirlConfig
from tirl.filters import FilterStats
from tirl.rollout.batch_stats import RolloutStats
from tirl.rollout.staleness import run_overlapped, trajectory_lag
from tirl.types import Group, Trajectory

Record = Callable[[int, dict[str, Any], list[Trajectory]], None]


@dataclass(slots=True)
class Collected:
    """What one step's rollout (with resampling) produced."""

    sampled: list[Trajectory]
    groups: list[Group]
    stats: FilterStats
    measured: RolloutStats = field(default_factory=RolloutStats)  # the strategy's own figures, rounds added up
    resampled: int = 0
    resampled_groups: int = 0
    rounds: int = 0
    groups_requested: int = 0
    min_usable: int = 0
    rollout_s: float = 0.0
    penalized: list[Trajectory] = field(default_factory=list)  # filter.mode=penalize: removed void ones
    withheld: list[list[Trajectory]] = field(default_factory=list)  # per group: void ones drop/penalize removed


class StepSource(Protocol):
    """The two halves of a training step (:class:`~tirl.trainer.trainer.Trainer` is one)."""

    cfg: TirlConfig
    policy_version: int

    @property
    def strategy(self) -> Any:
        """The rollout strategy (its ``tracer``, if any, marks the snapshots taken while an update runs)."""
        ...

    async def collect(self, step: int) -> Collected:
        """Rollout, void filter and resampling of ``step``."""
        ...

    async def learn(self, step: int, col: Collected, t0: float) -> tuple[dict[str, Any], list[Trajectory]]:
        """Advantages and the update of ``step``; its metrics and sampled trajectories."""
        ...


async def run_steps(source: StepSource, steps: Sequence[int], record: Record) -> None:
    """Train ``steps`` in order: synchronously (K = 0) or with rollouts up to K versions ahead."""
    if source.cfg.rollout.max_staleness > 0:  # asynchronous RL: rollouts run ahead of the update
        await train_overlapped(source, steps, record)
        return
    for step in steps:
        t0 = time.perf_counter()
        record(step, *(await source.learn(step, await source.collect(step), t0)))


def drop_stale(col: Collected, version: int, max_staleness: int) -> tuple[Collected, int, int]:
    """``col`` without the groups (and penalty rows) that hold a trajectory more than K versions old.

    Returns the new ``Collected``, the number of stale trajectories and of groups left out.
    """

    def fresh(t: Trajectory) -> bool:
        return trajectory_lag(t, version) <= max_staleness

    ok = [all(fresh(t) for t in g.trajectories) for g in col.groups]
    kept: list[Group] = [g for g, f in zip(col.groups, ok, strict=True) if f]
    withheld = [[t for t in w if fresh(t)] for w, f in zip(col.withheld, ok, strict=False) if f]
    stale = sum(1 for g in col.groups for t in g.trajectories if not fresh(t))
    penalized = [t for t in col.penalized if fresh(t)]
    stale += len(col.penalized) - len(penalized)
    out = dataclasses.replace(col, groups=kept, penalized=penalized, withheld=withheld)
    return out, stale, len(col.groups) - len(kept)


class UpdateFlag:
    """Whether an update is running (read by the pipeline trace's ``trainer_updating``)."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self) -> bool:
        """True while the trainer updates."""
        return self.on


async def train_overlapped(trainer: StepSource, steps: Sequence[int], record: Record) -> None:
    """Run ``steps`` with rollouts up to ``rollout.max_staleness`` versions ahead; ``record`` logs each step."""
    k = trainer.cfg.rollout.max_staleness
    started: dict[int, float] = {}
    flag = UpdateFlag()
    tracer = getattr(trainer.strategy, "tracer", None)
    if tracer is not None:
        tracer.trainer_busy = flag
    last_end = [time.perf_counter()]

    async def produce(step: int) -> Collected:
        started[step] = time.perf_counter()
        return await trainer.collect(step)

    async def consume(step: int, col: Collected, lag: int) -> None:
        version = trainer.policy_version
        col, stale, stale_groups = drop_stale(col, version, k)
        ok = [t for t in col.sampled if not t.failed]
        flag.on = True
        try:
            metrics, sampled = await trainer.learn(step, col, started.pop(step))
        finally:
            flag.on = False
        now = time.perf_counter()
        metrics.update(
            {
                "async/max_staleness": k,
                "async/step_lag": lag,
                "async/version_lag_max": max((trajectory_lag(t, version) for t in ok), default=None),
                "async/stale_dropped": stale,
                "async/stale_groups": stale_groups,
                "time/step_interval_s": now - last_end[0],
            }
        )
        last_end[0] = now
        record(step, metrics, sampled)

    try:
        await run_overlapped(steps, k, produce, consume, clock=time.perf_counter)
    finally:
        if tracer is not None:
            tracer.trainer_busy = None
