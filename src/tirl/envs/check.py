"""``check_env``: the conformance checker every environment (built-in or yours) should pass.

It drives fresh env instances through short episodes and checks the contract
of :mod:`tirl.envs.base`:

* ``protocol`` — a non-empty ``name``; ``reset``/``step``/``evaluate``/``close`` are coroutines;
* ``reset`` — returns a non-empty list of :class:`~tirl.types.Message` ending with a ``user``
  message, no ``assistant`` message; the same task and seed give the same messages;
* ``void`` — a turn with no code and no answer ends the episode: ``terminated``,
  reason ``void`` (the shared rule of :func:`tirl.parsing.judge_message`);
* ``results`` — every ``StepResult``: ``terminated`` and ``truncated`` not both set,
  ``reason`` set exactly when the episode ended, a finite float reward, observation
  messages of role ``tool`` or ``user``, an ``info`` dict that JSON holds as it is (:func:`_check_info`);
* ``after_end`` — ``step`` after the end raises instead of silently continuing;
* ``role`` — a non-assistant action raises ``ValueError``;
* ``evaluate`` — returns an :class:`~tirl.envs.base.EvalResult` with a finite float
  reward, a bool ``correct`` and an ``info`` dict that JSON holds as it is;
* ``close`` — can be called twice;
* ``solution`` (when given) — the scripted turns end the episode with ``answered`` or
  ``submitted`` and ``evaluate`` says correct;
* ``limit`` (when ``idle`` is given) — repeating a non-final action ends the episode
  with ``truncated`` and reason ``max_turns`` within the env's ``max_turns``;
* ``nonblocking`` — no call held the event loop longer than :data:`HOLD_LIMIT_S` at a time without
  awaiting (each resumption of each call timed, :func:`tirl.rollout.loop_watch.held`): such a call stalls
  every other episode of a rollout, and no rollout timeout can stop it.

Failures raise :class:`EnvCheckError` naming the check.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.errors import TirlError
from tirl.jsonl import NotJSON, json_value
from tirl.rollout.loop_watch import FIX, Held, held
from tirl.types import Message, Role, TerminationReason

T = TypeVar("T")

VOID_ACTION = "Let me think about this more carefully before I answer."

#: The longest a call may run without awaiting (``nonblocking``): a slow but awaiting call is fine.
HOLD_LIMIT_S = 1.0


class EnvCheckError(TirlError):
    """An environment breaks the contract; the message names the check."""


@dataclass(slots=True)
class CheckReport:
    """The checks that passed."""

    env: str
    passed: list[str] = field(default_factory=list)


class _Holds:
    """Per env method, the longest stretch one of its calls ran without awaiting."""

    def __init__(self) -> None:
        self.longest: dict[str, float] = {}

    async def __call__(self, method: str, coro: Coroutine[Any, Any, T]) -> T:
        meter = Held()
        try:
            return await held(coro, meter)
        finally:
            self.longest[method] = max(self.longest.get(method, 0.0), meter.longest_s)

    def check(self) -> None:
        method, seconds = max(self.longest.items(), key=lambda kv: kv[1], default=("", 0.0))
        _require(
            seconds <= HOLD_LIMIT_S,
            "nonblocking",
            f"{method} held the event loop for {seconds:.1f} s without awaiting (the limit is {HOLD_LIMIT_S:g} s): "
            f"in a rollout every other episode waits for it and no timeout can stop it — {FIX}",
        )


def _require(cond: bool, check: str, text: str) -> None:
    if not cond:
        raise EnvCheckError(f"check_env [{check}]: {text}")


def _assistant(content: str) -> Message:
    return Message(role=Role.ASSISTANT, content=content)


def _check_step(result: object, check: str) -> StepResult:
    _require(isinstance(result, StepResult), check, f"step must return StepResult, got {type(result).__name__}")
    assert isinstance(result, StepResult)
    _require(not (result.terminated and result.truncated), check, "terminated and truncated are both set")
    done = result.terminated or result.truncated
    _require((result.reason is not None) == done, check, f"reason {result.reason} does not match done={done}")
    _require(
        result.reason is None or isinstance(result.reason, TerminationReason),
        check,
        "reason must be a TerminationReason",
    )
    _require(isinstance(result.reward, float | int) and math.isfinite(result.reward), check, "reward must be finite")
    for m in result.observation:
        _require(isinstance(m, Message), check, "observation must be a list of Message")
        _require(m.role in (Role.TOOL, Role.USER), check, f"observation role {m.role.value!r} is not tool or user")
    _check_info(result.info, check, "step")
    return result


def _check_info(info: object, check: str, function: str) -> None:
    """``info`` as the trainer stores it (:func:`tirl.envs.base.checked_result`), with nothing lost on the way.

    The rule is :func:`tirl.jsonl.json_value`'s: numpy and torch values are fine (they become plain numbers), a
    set or an object is refused, and so is a NaN or infinite number: a run stores it as ``null``, so a metric
    kept there (a ratio over an empty answer) silently vanishes. One line names ``function`` and the key.
    """
    _require(isinstance(info, dict), check, f"{function} returned info of type {type(info).__name__}, not a dict")
    try:
        json_value(info, strict=True)
    except NotJSON as exc:
        fix = "store numbers, text, lists and dicts in info (a set as a sorted list, an object as text)"
        if exc.what in ("NaN", "Infinity", "-Infinity"):
            fix = "store a finite number, or None for no value (a run would store null there)"
        where = f"{function} returned info{exc.path}, which is {exc.what}"
        raise EnvCheckError(f"check_env [{check}]: {where} — {fix}") from None


async def _check_eval(env: Env, check: str, holds: _Holds) -> EvalResult:
    result = await holds("evaluate", env.evaluate())
    _require(isinstance(result, EvalResult), check, f"evaluate must return EvalResult, got {type(result).__name__}")
    _require(isinstance(result.reward, float | int) and math.isfinite(result.reward), check, "reward must be finite")
    _require(isinstance(result.correct, bool), check, "correct must be a bool")
    _check_info(result.info, check, "evaluate")
    return result


async def check_env(
    make: Callable[[], Env],
    task: Task,
    *,
    solution: Sequence[str] | None = None,
    idle: str | None = None,
    seed: int | None = 0,
) -> CheckReport:
    """Run the conformance checks on fresh envs from ``make`` (see the module docstring).

    ``solution``: assistant contents that solve ``task``; ``idle``: an assistant
    content that acts (runs code) without ending the episode.
    """
    env = make()
    holds = _Holds()
    report = CheckReport(env=getattr(env, "name", type(env).__name__))
    _require(isinstance(env, Env), "protocol", f"{type(env).__name__} lacks the Env methods")
    _require(isinstance(env.name, str) and bool(env.name), "protocol", "name must be a non-empty string")
    for method in ("reset", "step", "evaluate", "close"):
        _require(inspect.iscoroutinefunction(getattr(env, method)), "protocol", f"{method} must be async")
    report.passed.append("protocol")

    try:
        first = await holds("reset", env.reset(task, seed=seed))
        _require(isinstance(first, list) and bool(first), "reset", "reset must return a non-empty list")
        _require(all(isinstance(m, Message) for m in first), "reset", "reset must return Message objects")
        _require(first[-1].role is Role.USER, "reset", "the last initial message must be the user's")
        _require(all(m.role is not Role.ASSISTANT for m in first), "reset", "no assistant message at reset")
        other = make()
        try:
            again = await holds("reset", other.reset(task, seed=seed))
            _require(again == first, "reset", "same task and seed gave other messages")
        finally:
            await holds("close", other.close())
        report.passed.append("reset")

        try:
            await holds("step", env.step(Message(role=Role.USER, content="hello")))
        except ValueError:
            report.passed.append("role")
        else:
            raise EnvCheckError("check_env [role]: a user-role action must raise ValueError")

        result = _check_step(await holds("step", env.step(_assistant(VOID_ACTION))), "void")
        _require(result.terminated and result.reason is TerminationReason.VOID, "void", f"got {result.reason}")
        report.passed += ["void", "results"]
        try:
            await holds("step", env.step(_assistant(VOID_ACTION)))
        except Exception:
            report.passed.append("after_end")
        else:
            raise EnvCheckError("check_env [after_end]: step after the end must raise")
        await _check_eval(env, "evaluate", holds)
        report.passed.append("evaluate")
    finally:
        await holds("close", env.close())
    await holds("close", env.close())
    report.passed.append("close")

    if solution is not None:
        await _run_solution(make, task, solution, seed, holds)
        report.passed.append("solution")
    if idle is not None:
        await _run_idle(make, task, idle, seed, holds)
        report.passed.append("limit")
    holds.check()
    report.passed.append("nonblocking")
    return report


async def _run_solution(
    make: Callable[[], Env], task: Task, solution: Sequence[str], seed: int | None, holds: _Holds
) -> None:
    env = make()
    try:
        await holds("reset", env.reset(task, seed=seed))
        result: StepResult | None = None
        for i, content in enumerate(solution):
            _require(
                result is None or not (result.terminated or result.truncated), "solution", f"ended before turn {i}"
            )
            result = _check_step(await holds("step", env.step(_assistant(content))), "solution")
        _require(result is not None and result.terminated, "solution", "the scripted turns did not end the episode")
        assert result is not None
        _require(
            result.reason in (TerminationReason.ANSWERED, TerminationReason.SUBMITTED),
            "solution",
            f"ended with {result.reason}, expected answered or submitted",
        )
        evaluation = await _check_eval(env, "solution", holds)
        _require(evaluation.correct, "solution", f"evaluate says not correct: {evaluation.info}")
    finally:
        await holds("close", env.close())


async def _run_idle(make: Callable[[], Env], task: Task, idle: str, seed: int | None, holds: _Holds) -> None:
    env = make()
    limit = int(getattr(env, "max_turns", 100))
    try:
        await holds("reset", env.reset(task, seed=seed))
        for _ in range(limit):
            result = _check_step(await holds("step", env.step(_assistant(idle))), "limit")
            if result.terminated or result.truncated:
                _require(
                    result.truncated and result.reason is TerminationReason.MAX_TURNS,
                    "limit",
                    f"ended with {result.reason}, expected truncated max_turns",
                )
                return
        raise EnvCheckError(f"check_env [limit]: episode still running after max_turns={limit}")
    finally:
        await holds("close", env.close())
