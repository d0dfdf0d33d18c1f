"""Run a fixed list of assistant contents through an env: scripted policies and SFT demonstrations.

:func:`run_script` is the whole episode (reset → steps → evaluate → close)
through the guards of :mod:`tirl.envs.guard`, so a failing env gives a
result with the failure reason instead of an exception. The SFT warm-start
uses it with ``expert_solution(task)`` to turn scripts into real
demonstrations (the tool messages are the sandbox's real output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.envs.base import Env, Task
from tirl.envs.guard import safe_close, safe_evaluate, safe_reset, safe_step
from tirl.types import Message, Role, TerminationReason


@dataclass(slots=True)
class ScriptResult:
    """One scripted episode: every message, why it ended, and the evaluation."""

    messages: list[Message]
    reason: TerminationReason | None
    reward: float
    correct: bool
    steps: int
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


async def run_script(env: Env, task: Task, contents: Sequence[str], *, seed: int | None = None) -> ScriptResult:
    """Reset, play ``contents`` as assistant turns until the episode ends, evaluate, close.

    If the script runs out before the episode ends, ``reason`` is None (the
    env is still evaluated). Turns after the end are not played.
    """
    try:
        start = await safe_reset(env, task, seed=seed)
        if not start.ok:
            return ScriptResult([], start.reason, 0.0, False, 0, error=start.error)
        messages = list(start.messages)
        reason: TerminationReason | None = None
        error: str | None = None
        steps = 0
        for content in contents:
            action = Message(role=Role.ASSISTANT, content=content)
            messages.append(action)
            result = await safe_step(env, action)
            steps += 1
            messages.extend(result.observation)
            if result.terminated or result.truncated:
                reason = result.reason
                error = result.info.get("error")
                break
        evaluation = await safe_evaluate(env)
        if "error" in evaluation.info and error is None and evaluation.info.get("reason") == "eval_failed":
            error = str(evaluation.info["error"])
            reason = TerminationReason.EVAL_FAILED
        return ScriptResult(
            messages, reason, float(evaluation.reward), evaluation.correct, steps, error=error, info=evaluation.info
        )
    finally:
        await safe_close(env)
