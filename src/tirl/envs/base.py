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
from typing import Any, Protocol, TypeVar, runtime_checkable

from tirl.types import Message, Role, TerminationReason

T = TypeVar("T")


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
    """What ``evaluate`` returns: the final reward and why.

    An evaluation that the episode itself broke (swe-lite: a workspace too full to stage the tests, a
    judge its code killed) is a result, not an exception: reward 0 with ``info["eval_failure"]`` naming
    the reason, which the rollout counts in ``rollout/eval_failure/<reason>``. Raising is for
    infrastructure failures only (they end the episode ``eval_failed``, outside the update).
    """

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


def check_step(action: Message, *, started: bool, ended: bool, closed: bool) -> None:
    """The guard of ``step``: :class:`EpisodeOverError` outside a live episode, ``ValueError`` off an assistant turn."""
    if not started or ended or closed:
        raise EpisodeOverError("step called before reset, after the episode ended or after close")
    if action.role is not Role.ASSISTANT:
        raise ValueError(f"step takes an assistant message, got role {action.role.value!r}")


def check_evaluable(episode: T | None, closed: bool) -> T:
    """The guard of ``evaluate``: ``episode`` (what ``reset`` set), or :class:`EpisodeOverError`.

    Raised before ``reset`` (``episode`` is None) or after ``close``.
    """
    if episode is None:
        raise EpisodeOverError("evaluate called before reset")
    if closed:
        raise EpisodeOverError("evaluate called after close")
    return episode
