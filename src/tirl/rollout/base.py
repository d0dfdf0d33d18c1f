"""The rollout contract between the trainer and whatever produces trajectories.

The trainer asks a :class:`RolloutStrategy` for ``group_size`` trajectories of
each task and gets back exactly that many, grouped by task, each with a
termination reason. Infrastructure failures are *in* the batch (flagged with
``Trajectory.failed``), never missing. Strategies (sync batch, async batch,
pipeline; local or Ray) are interchangeable behind this interface.

An episode is produced by three callables that the strategies schedule:
``EnvFactory`` (make a fresh env for a task), the env's ``reset`` (the
Initializer stage), an :class:`EpisodeRunner` (the Agent Runner stage: the
multi-turn loop) and the env's ``evaluate`` (the Evaluator stage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tirl.envs.base import Env, Task
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
    """``group_size`` episodes of each task; ``policy_version`` is recorded on every trajectory."""

    tasks: list[Task]
    group_size: int
    policy_version: int = 0
    step: int = 0


@dataclass(slots=True)
class RolloutBatch:
    """Exactly ``len(tasks) * group_size`` trajectories, grouped by task (failed ones included)."""

    groups: list[Group]
    wall_s: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)

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
