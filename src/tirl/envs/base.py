"""The async environment contract (Gymnasium-style, split for the rollout pipeline).

An episode is three calls that the pipeline runs in three stages:
``reset`` (Initializer: provision the workspace and sandbox, return the first
messages), ``step`` (Agent Runner, once per assistant turn) and ``evaluate``
(Evaluator: compute the reward). ``close`` releases everything.

``step`` keeps *terminated* (the task ended: an answer, a submission, a void
turn) apart from *truncated* (a limit cut the episode: max turns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tirl.types import Message, TerminationReason


@dataclass(frozen=True, slots=True)
class Task:
    """One problem. ``answer`` is the ground truth when known; ``data`` is env-specific."""

    id: str
    prompt: str
    answer: str | None = None
    kind: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    messages: tuple[Message, ...] = ()  # a chat to start from (task files); () = the env builds [system?, user]


@dataclass(slots=True)
class StepResult:
    """What ``step`` returns."""

    observation: list[Message]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    reason: TerminationReason | None = None  # set when terminated or truncated
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class EvalResult:
    """What ``evaluate`` returns: the final reward and why."""

    reward: float
    correct: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """An episode-scoped environment instance (create one per trajectory)."""

    name: str

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Provision the episode and return the initial messages (system + user)."""
        ...

    async def step(self, action: Message) -> StepResult:
        """Apply one assistant message; return the observation messages and flags."""
        ...

    async def evaluate(self) -> EvalResult:
        """Compute the final reward of the episode (hidden tests, answer check)."""
        ...

    async def close(self) -> None:
        """Release the workspace, sandbox sessions and any other resource."""
        ...


class EnvError(RuntimeError):
    """An infrastructure failure inside an environment (the sandbox broke, a workspace copy failed).

    Not a failing program: a program that crashes or times out is an observation.
    The rollout stages (:mod:`tirl.rollout.pipeline`) turn this (and any other
    exception) into a trajectory with reason ``init_failed`` / ``error`` /
    ``eval_failed`` and the message in ``Trajectory.error``.
    """


class EpisodeOverError(RuntimeError):
    """``step`` was called after the episode had ended (or before ``reset``)."""
