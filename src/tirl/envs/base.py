"""The async environment contract (Gymnasium-style, split for the rollout pipeline).

An episode is three calls that the pipeline runs in three stages:
``reset`` (Initializer: provision the workspace and sandbox, return the first
messages), ``step`` (Agent Runner, once per assistant turn) and ``evaluate``
(Evaluator: compute the reward). ``close`` releases everything.

``step`` keeps *terminated* (the task ended: an answer, a submission, a void
turn) apart from *truncated* (a limit cut the episode: max turns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from tirl.errors import show_value
from tirl.jsonl import NotJSON, json_value
from tirl.types import Message, Role, TerminationReason, json_kind

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

    ``reward`` must be a number (a bool, an int, a float, a numpy or torch scalar). The Evaluator stage
    passes every result through :func:`checked_result`, and the reward's *value* and *type* are judged apart:

    * **NaN, ±inf, or beyond ±** :data:`REWARD_MAX` **is the episode's failure**: reward 0, ``correct``
      false, ``info["eval_failure"] = "nonfinite_reward"`` (counted in
      ``rollout/eval_failure/nonfinite_reward``) with the value in ``reward_returned`` and the function in
      ``reward_source``, and one warning naming that function per rollout request. Why not infrastructure:
      the value comes from the model's text as often as from a bug (``float("nan")`` or ``float("1e999")``
      of the answer it wrote, ``-abs(pred - truth)`` with ``pred`` infinite, a ratio over an empty answer),
      tirl cannot tell the two apart, and an episode left out of the update would be an escape the policy
      learns (write ``nan`` rather than a wrong answer). A function broken for every input shows as reward 0
      on every episode with that count and warning, like swe-lite's ``no_verdict``. Not covered: for a
      reward whose range reaches below 0, 0 is not the worst score; return your own worst score instead.
    * **Not a number** (``None``, a string, even ``"1.0"``, a list) **is the code's bug**, whatever the model
      wrote: :class:`EnvError` naming the function, the episode ends ``eval_failed`` at once (no retry: the
      same code returns the same type), and a step where every episode fails so stops the run with one
      ``error:`` line (:mod:`tirl.trainer.failfast`).

    Non-finite floats inside ``info`` are stored as ``null``: a trajectory line is strict JSON.
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


#: The largest reward magnitude tirl trains on: float32's largest value (the trainer holds rewards as float32).
REWARD_MAX = 3.4028234663852886e38
#: ``EvalResult.info["eval_failure"]`` of a reward tirl cannot train on (see :class:`EvalResult`).
NONFINITE_REWARD = "nonfinite_reward"


def reward_number(value: Any, source: str) -> float:
    """``value`` as a float; :class:`EnvError` naming ``source`` (the function) when it is not a number.

    Numbers are what ``float()`` takes other than text: bools, ints, floats, numpy and torch scalars. An int
    too large for a float is ±inf. ``None``, a string (even ``"1.0"``) and a container are not numbers.
    """
    if value is not None and not isinstance(value, str | bytes | bytearray):
        try:
            return float(value)
        except OverflowError:  # an int beyond 1.8e308
            return math.inf if value > 0 else -math.inf
        except (TypeError, ValueError):
            pass
    raise EnvError(
        f"{source} returned the reward {show_value(value)} ({type(value).__name__}), not a number — "
        "return a float from it (0.0 for no reward)"
    )


def trainable(reward: float) -> bool:
    """Whether tirl can train on ``reward``: finite and within ±:data:`REWARD_MAX`."""
    return math.isfinite(reward) and abs(reward) <= REWARD_MAX


def checked_result(result: EvalResult, source: str) -> EvalResult:
    """``result`` as the Evaluator stores it: a reward tirl can train on, an ``info`` strict JSON can hold.

    ``source`` names the function that computed the reward. A reward that is not a number raises
    :class:`EnvError`; a non-finite one becomes reward 0 with ``eval_failure`` ``nonfinite_reward`` (the
    choice, and why, is :class:`EvalResult`'s). ``info`` becomes plain JSON (:func:`tirl.jsonl.json_value`):
    non-finite floats become ``None``, numpy and torch values their plain numbers and lists; a value JSON
    cannot hold (a set, an object) is :class:`EnvError` naming ``source`` and the key, like a reward that is not
    a number (the env's code, not the episode: before, it crashed the trainer when the trajectory was logged).
    A result this returns passes through it again unchanged.
    """
    reward = reward_number(result.reward, source)
    try:
        info = json_value(dict(result.info))
    except NotJSON as exc:
        where = f"info{exc.path}" if exc.path else "info"
        raise EnvError(f"{source} returned {where}, which is {exc.what}: JSON cannot hold it — store numbers, text, "
                       "lists and dicts in info (a set as a sorted list, an object as text)") from None  # fmt: skip
    if trainable(reward):
        return EvalResult(reward=reward, correct=bool(result.correct), info=info)
    info.update(eval_failure=NONFINITE_REWARD, reward_returned=json_kind(reward), reward_source=source)
    return EvalResult(reward=0.0, correct=False, info=info)


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
