"""Deterministic fault injection at each rollout stage (for tests and chaos runs).

Wrap a real env factory and episode runner; each stage attempt fails with a
given probability, decided by a hash of ``(seed, stage, key, attempt)`` so a
test can predict every outcome with :meth:`FaultPlan.decide`:

- ``init``: ``env.reset`` raises :class:`InjectedFault` (``error``) or sleeps
  ``hang_s`` (``hang``, cut by ``rollout.init_timeout_s``); key
  ``f"{task.id}#{seed}"``, attempt 1, 2, … per key.
- ``run``: the runner raises or hangs before running; key = trajectory id.
- ``eval``: ``env.evaluate`` raises or hangs; key as for ``init``, attempts
  counted per key.

>>> plan = FaultPlan(init_error=1.0)
>>> plan.decide("init", "task-0#7", 1)
'error'
>>> FaultPlan().decide("run", "s0-t0-g0", 1) is None
True

:class:`tirl.testing.clock.VirtualTimeLoop` runs any of this on a virtual
clock, so hangs and timeouts cost no wall time and a loaded machine cannot
turn a healthy stage into a timeout. This module is test tooling and lives
under ``tests/``; it is not part of the installed package.

Not covered: faults inside ``env.step`` or the generator (those are the
runner's business) and faults in ``env.close``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.rollout.base import EnvFactory, EpisodeRunner
from tirl.types import Message, Trajectory

FaultKind = Literal["error", "hang"]


class InjectedFault(RuntimeError):
    """A fault raised on purpose by the fault plan (``tests/rollout/faults.py``)."""


def _uniform(*parts: object) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Per-attempt fault probabilities of each stage (``error`` raises, ``hang`` sleeps ``hang_s``)."""

    init_error: float = 0.0
    init_hang: float = 0.0
    """Initializer: ``env.reset`` raises / sleeps."""
    run_error: float = 0.0
    run_hang: float = 0.0
    """Agent Runner: the runner raises / sleeps before running."""
    eval_error: float = 0.0
    eval_hang: float = 0.0
    """Evaluator: ``env.evaluate`` raises / sleeps."""
    seed: int = 0
    hang_s: float = 3600.0

    def __post_init__(self) -> None:
        for stage in ("init", "run", "eval"):
            error, hang = getattr(self, f"{stage}_error"), getattr(self, f"{stage}_hang")
            if min(error, hang) < 0 or error + hang > 1:
                raise ValueError(
                    f"FaultPlan: {stage}_error={error} and {stage}_hang={hang} must be >= 0 and sum to <= 1"
                )

    def decide(self, stage: str, key: str, attempt: int) -> FaultKind | None:
        """The fault injected into ``attempt`` (1-based) of ``stage`` for ``key``, if any."""
        error: float = getattr(self, f"{stage}_error")
        hang: float = getattr(self, f"{stage}_hang")
        u = _uniform(self.seed, stage, key, attempt)
        if u < error:
            return "error"
        if u < error + hang:
            return "hang"
        return None


@dataclass(slots=True)
class FaultLog:
    """What was injected, and how often envs were created and closed."""

    injected: Counter[tuple[str, str]] = field(default_factory=Counter)  # (stage, kind) -> count
    attempts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (stage, key) -> attempts so far
    created: int = 0
    closes: Counter[int] = field(default_factory=Counter)  # env serial -> close() calls

    def next_attempt(self, stage: str, key: str) -> int:
        """Count one more attempt of ``stage`` for ``key`` and return its 1-based number."""
        self.attempts[stage, key] += 1
        return self.attempts[stage, key]


async def _inject(plan: FaultPlan, log: FaultLog, stage: str, key: str, attempt: int) -> None:
    kind = plan.decide(stage, key, attempt)
    if kind is None:
        return
    log.injected[stage, kind] += 1
    if kind == "error":
        raise InjectedFault(f"injected {stage} error ({key}, attempt {attempt})")
    await asyncio.sleep(plan.hang_s)


class FaultyEnv:
    """An :class:`~tirl.envs.base.Env` whose ``reset`` and ``evaluate`` fail as the plan says."""

    def __init__(self, inner: Env, plan: FaultPlan, log: FaultLog) -> None:
        self.inner = inner
        self.plan = plan
        self.log = log
        self.name = inner.name
        self.serial = log.created
        log.created += 1
        self._key = ""

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Maybe fail, then reset the inner env."""
        self._key = f"{task.id}#{seed}"
        await _inject(self.plan, self.log, "init", self._key, self.log.next_attempt("init", self._key))
        return await self.inner.reset(task, seed=seed)

    async def step(self, action: Message) -> StepResult:
        """Pass through."""
        return await self.inner.step(action)

    async def evaluate(self) -> EvalResult:
        """Maybe fail, then evaluate the inner env."""
        await _inject(self.plan, self.log, "eval", self._key, self.log.next_attempt("eval", self._key))
        return await self.inner.evaluate()

    async def close(self) -> None:
        """Count the call, then close the inner env."""
        self.log.closes[self.serial] += 1
        await self.inner.close()


def faulty_factory(factory: EnvFactory, plan: FaultPlan, log: FaultLog) -> EnvFactory:
    """An env factory whose envs fail at ``reset``/``evaluate`` as ``plan`` says."""

    def make(task: Task) -> Env:
        return FaultyEnv(factory(task), plan, log)

    return make


class FaultyRunner:
    """An :class:`~tirl.rollout.base.EpisodeRunner` that fails before running, as the plan says."""

    def __init__(self, inner: EpisodeRunner, plan: FaultPlan, log: FaultLog) -> None:
        self.inner = inner
        self.plan = plan
        self.log = log

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Maybe fail, then run the inner runner."""
        await _inject(self.plan, self.log, "run", traj.id, self.log.next_attempt("run", traj.id))
        await self.inner(env, task, initial, traj)
