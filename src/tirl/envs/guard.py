"""Guards for the rollout stages: an environment that raises gives a flagged result, never a lost one.

Each guard calls one env method and turns *any* exception into a value that
carries the reason and the message, so the trajectory is kept and counted as
an infrastructure failure (``TerminationReason.is_failure``):

* :func:`safe_reset` → ``ResetOutcome`` with ``reason=INIT_FAILED``;
* :func:`safe_step` → ``StepResult(truncated=True, reason=ERROR, info={"error": ...})``;
* :func:`safe_evaluate` → ``EvalResult(reward=0.0, correct=False, info={"error": ..., "reason": "eval_failed"})``;
* :func:`safe_close` → the error text or ``None``;
* :func:`end_episode` — the runner ends an episode for a reason only it sees
  (``overlong`` when the generator hit the per-turn token cap, ``timeout``,
  ``cancelled``), through the env's optional ``end(reason, info)`` method when
  it has one (both built-ins do), so the env's state and ``evaluate`` agree.

``asyncio.CancelledError`` is not caught (cancellation must propagate).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.envs.common import final_result
from tirl.types import Message, TerminationReason


def describe(exc: BaseException) -> str:
    """``"ExcType: message (file:line)"`` — the innermost frame, without a full traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


@dataclass(slots=True)
class ResetOutcome:
    """The result of :func:`safe_reset`: the initial messages, or the failure."""

    messages: list[Message] = field(default_factory=list)
    reason: TerminationReason | None = None  # INIT_FAILED when reset raised
    error: str | None = None

    @property
    def ok(self) -> bool:
        """``reset`` returned normally."""
        return self.error is None


async def safe_reset(env: Env, task: Task, *, seed: int | None = None) -> ResetOutcome:
    """``env.reset`` that never raises (except cancellation)."""
    try:
        return ResetOutcome(messages=await env.reset(task, seed=seed))
    except Exception as exc:
        return ResetOutcome(reason=TerminationReason.INIT_FAILED, error=describe(exc))


async def safe_step(env: Env, action: Message) -> StepResult:
    """``env.step`` that never raises: an exception ends the episode with reason ``error``."""
    try:
        return await env.step(action)
    except Exception as exc:
        return StepResult(observation=[], truncated=True, reason=TerminationReason.ERROR, info={"error": describe(exc)})


async def safe_evaluate(env: Env) -> EvalResult:
    """``env.evaluate`` that never raises: an exception gives reward 0 and ``info["reason"] = "eval_failed"``."""
    try:
        return await env.evaluate()
    except Exception as exc:
        return EvalResult(
            reward=0.0,
            correct=False,
            info={"error": describe(exc), "reason": TerminationReason.EVAL_FAILED.value},
        )


async def safe_close(env: Env) -> str | None:
    """``env.close`` that never raises; returns the error text, if any."""
    try:
        await env.close()
    except Exception as exc:
        return describe(exc)
    return None


async def end_episode(env: Env, reason: TerminationReason, info: dict[str, Any] | None = None) -> StepResult:
    """End the episode with ``reason`` (see the module docstring); never raises."""
    end = getattr(env, "end", None)
    if callable(end):
        try:
            result = await end(reason, info)
            if isinstance(result, StepResult):
                return result
        except Exception as exc:
            info = {**(info or {}), "end_error": describe(exc)}
    return final_result(reason, [], dict(info or {}))
