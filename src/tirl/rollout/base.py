"""The rollout contract between the trainer and whatever produces trajectories.

The trainer asks a :class:`RolloutStrategy` for ``group_size`` trajectories of
each task and gets back exactly that many, grouped by task, each with a
termination reason. Infrastructure failures are *in* the batch (flagged with
``Trajectory.failed``), never missing. tirl's implementation is
:class:`tirl.rollout.strategies.Rollout` (three schedules: sync batch, async
batch, pipeline; envs local or on Ray); the trainer, the held-out evaluation
and the SFT demonstrations all use it.

An episode is produced by the callables the strategy schedules:
``EnvFactory`` (make a fresh env for a task), the env's ``reset`` (the
Initializer stage), an :class:`EpisodeRunner` (the Agent Runner stage: the
multi-turn loop), the env's ``evaluate`` (the Evaluator stage) and ``close``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tirl.envs.base import Env, Task
from tirl.rollout.batch_stats import RolloutStats
from tirl.types import Group, Message, Trajectory

EnvFactory = Callable[[Task], Env]


@runtime_checkable
class EpisodeRunner(Protocol):
    """Runs the multi-turn loop of one episode on an already-reset env.

    It appends messages, token ids, loss mask, log-probs and turn records to
    ``traj`` and sets ``traj.termination``. It must not call ``env.evaluate``
    or ``env.close`` (the strategy does).
    """

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Run the episode to its end."""
        ...


@dataclass(frozen=True, slots=True)
class RolloutRequest:
    """``group_size`` episodes of each task; ``policy_version`` is recorded on every trajectory.

    ``task_indices[i]`` is the index of ``tasks[i]`` in its step's task list
    (default: ``i``) and ``round`` the resample round (0 = the first
    request of the step). Both go into the trajectory ids and the episode
    seeds, so a resample request of the same step gets fresh, unique ones:
    sample ``k`` of round ``r`` is sample ``r * group_size + k`` of its task.
    """

    tasks: list[Task]
    group_size: int
    policy_version: int = 0
    step: int = 0
    task_indices: tuple[int, ...] = ()
    round: int = 0

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"RolloutRequest.group_size must be >= 1, got {self.group_size}")
        if self.task_indices and len(self.task_indices) != len(self.tasks):
            raise ValueError(
                f"RolloutRequest.task_indices has {len(self.task_indices)} entries for {len(self.tasks)} tasks"
            )
        if self.round < 0:
            raise ValueError(f"RolloutRequest.round must be >= 0, got {self.round}")

    def task_index(self, i: int) -> int:
        """The step-level index of ``tasks[i]``."""
        return self.task_indices[i] if self.task_indices else i

    def sample_index(self, k: int) -> int:
        """The step-level sample number of the ``k``-th episode of a task in this request."""
        return self.round * self.group_size + k


@dataclass(slots=True)
class RolloutBatch:
    """Exactly ``len(tasks) * group_size`` trajectories, grouped by task (failed ones included).

    ``stats``: what the strategy measured besides the trajectories (retries, timeouts, queue depths, generator
    busy time, peak live environments, stage times); a strategy that measures nothing leaves the zero default.
    """

    groups: list[Group]
    wall_s: float = 0.0
    stats: RolloutStats = field(default_factory=RolloutStats)

    @property
    def trajectories(self) -> list[Trajectory]:
        """All trajectories, group by group."""
        return [t for g in self.groups for t in g.trajectories]


@runtime_checkable
class RolloutStrategy(Protocol):
    """Produces a :class:`RolloutBatch` for a :class:`RolloutRequest`."""

    async def collect(self, request: RolloutRequest) -> RolloutBatch:
        """Run every episode of the request and return them all, failed ones flagged."""
        ...

    async def close(self) -> None:
        """Stop workers and release every env, sandbox and workspace."""
        ...
