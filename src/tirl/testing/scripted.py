"""Scripted episodes for tests: fixed assistant turns played through the one rollout driver.

:func:`play` runs a list of assistant contents against an environment the way
training does — the rollout strategy's stages (Initializer → Agent Runner →
Evaluator, then ``close``), with their timeouts and failure accounting — but
with :class:`ScriptedRunner` in place of the policy. A failing env gives a
result with the failure reason (``init_failed``, ``error``, ``eval_failed``),
never an exception.

Not covered: token ids (the runner works on messages only; the token view of
the trajectory stays empty). For scripted *token-level* episodes, as the SFT
warm start builds them, see :class:`tirl.sft.ScriptedGenerator`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.config import RolloutConfig
from tirl.envs.base import Env, Task
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.types import Message, Role, TerminationReason, Trajectory


@dataclass(slots=True)
class ScriptedRunner:
    """An :class:`~tirl.rollout.base.EpisodeRunner` that plays ``contents`` as the assistant's turns.

    The episode ends when the env ends it; a script that runs out first ends
    it with ``max_turns`` (the policy has no more turns).
    """

    contents: Sequence[str]

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Play the script on a reset env."""
        traj.messages.extend(initial)
        for content in self.contents:
            action = Message(role=Role.ASSISTANT, content=content)
            traj.messages.append(action)
            result = await env.step(action)
            traj.messages.extend(result.observation)
            if result.terminated or result.truncated:
                traj.termination = result.reason
                if "error" in result.info:
                    traj.error = str(result.info["error"])
                return
        traj.termination = TerminationReason.MAX_TURNS


@dataclass(slots=True)
class ScriptResult:
    """One scripted episode: every message, why it ended, and the evaluation."""

    messages: list[Message]
    reason: TerminationReason | None
    reward: float
    correct: bool
    steps: int
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the evaluation's info
    trajectory: Trajectory | None = None


async def play(
    env: Env | Callable[[], Env],
    task: Task,
    contents: Sequence[str],
    *,
    config: RolloutConfig | None = None,
) -> ScriptResult:
    """Run ``contents`` as one episode of ``task`` through the rollout strategy (group size 1).

    ``env`` is an env instance (used once) or a factory. ``config`` defaults to
    the ``sync_batch`` strategy without retries.
    """
    make: Callable[[], Env] = (lambda: env) if isinstance(env, Env) else env  # type: ignore[assignment,return-value]
    cfg = config or RolloutConfig(strategy="sync_batch", retries=0)
    strategy = make_strategy(cfg, lambda _task: make(), ScriptedRunner(contents))
    try:
        batch = await strategy.collect(RolloutRequest(tasks=[task], group_size=1))
    finally:
        await strategy.close()
    traj = batch.trajectories[0]
    evaluation = traj.info.get("eval", {})
    return ScriptResult(
        messages=traj.messages,
        reason=traj.termination,
        reward=float(traj.reward or 0.0),
        correct=bool(traj.correct),
        steps=len(traj.assistant_messages),
        error=traj.error,
        info=dict(evaluation) if isinstance(evaluation, dict) else {},
        trajectory=traj,
    )
