"""Bounded staleness: overlap the rollout of later steps with the training of earlier ones.

``rollout.max_staleness = K`` (0 = on-policy, the default). The schedule of
:func:`run_overlapped`, for steps ``s = first, first+1, ...``:

- the rollout of step ``s`` may **start** once the trainer has finished the
  update of step ``s - 1 - K`` (:class:`StalenessGate`); so with ``K = 0`` it
  starts after the update of ``s - 1`` (today's alternation), with ``K = 1``
  it runs while the trainer updates on step ``s - 1`` (one step off-policy);
- the trainer consumes the steps **in order**: step ``s`` trains as soon as
  its rollout is done and the update of ``s - 1`` is over;
- several rollouts may be in flight at once (at most ``K + 1``); they share
  the generator, so the tail of one step's slowest episodes overlaps with the
  next step's episodes.

The *lag* of a step is how many updates finished between the start of its
rollout and the start of its training; the gate makes ``lag <= K`` hold by
construction (and :func:`run_overlapped` checks it). A trajectory records the
policy version that sampled it (``Trajectory.policy_version``, the oldest of
its turns; ``TurnRecord.policy_version`` per turn, :func:`trajectory_lag`), and
the trainer drops any group with a trajectory more than ``K`` versions behind it at
update time (``tirl.trainer.loop.drop_stale``) — a guard for versions that move inside a step (in-flight weight
updates, resumes), counted as ``async/stale_dropped``.

This module is the scheduling code that both ``tirl train`` (through
:mod:`tirl.trainer.loop`) and ``benchmarks/bench_async.py`` run; it does
not know what a rollout or an update is (``produce``/``consume`` callables).

Priority for the oldest step: :func:`run_overlapped` marks every rollout task
with its step (:data:`ROLLOUT_STEP`, a context variable the pipeline's workers
inherit), and :class:`OldestStepFirst` — the request queue in front of
:class:`~tirl.inference.openai_http.OpenAIGenerator`'s concurrency limit —
serves waiting requests of the oldest step first (FIFO within a step). The
trainer consumes steps in order, so the oldest step's slowest episode is what
it waits for; FIFO sharing would slow exactly that episode by ``K + 1``
steps' worth of queueing. With ``K = 0`` only one step is in flight and the
queue is plain FIFO.

Not covered: updating weights inside a running episode (the generator holds
one version per request; a version change between turns is recorded per turn
but not forced), priority inside the server's own batch (the queue orders
requests before they are sent; vLLM schedules what it has been sent), and
priority in the in-process HF/vLLM generators.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tirl.types import Trajectory

__all__ = [
    "ROLLOUT_STEP",
    "OldestStepFirst",
    "StalenessGate",
    "StepTiming",
    "run_overlapped",
    "trajectory_lag",
]

T = TypeVar("T")

#: the step whose rollout the current task serves (set by :func:`run_overlapped`; None outside it)
ROLLOUT_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("tirl_rollout_step", default=None)


class OldestStepFirst:
    """A counting semaphore whose waiters are served oldest :data:`ROLLOUT_STEP` first, FIFO within a step.

    A drop-in for ``asyncio.Semaphore`` as an ``async with`` slot limit
    (``locked()`` as well). A waiter without a step counts as the newest. A
    released slot is handed to the chosen waiter directly, so a newcomer
    cannot take it first; a cancelled waiter gives back a slot it was handed.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self._free = slots
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def locked(self) -> bool:
        """True when an acquire would wait."""
        return self._free == 0 or any(not f.done() for _, _, f in self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting behind every older step's waiters and this step's earlier ones."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        step = ROLLOUT_STEP.get()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (float("inf") if step is None else step, next(self._order), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot just as we were cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Give the slot to the oldest waiter, or back to the pool."""
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class StalenessGate:
    """Counts finished updates; a step's rollout waits until it is no more than ``K`` updates ahead.

    >>> gate = StalenessGate(max_staleness=1, first_step=1)
    >>> gate.allowed(2), gate.allowed(3)
    (True, False)
    >>> gate.finished += 1; gate.allowed(3)
    True
    """

    def __init__(self, max_staleness: int, first_step: int = 1) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.max_staleness = max_staleness
        self.first_step = first_step
        self.finished = 0  # updates finished since the run (or resume) started
        self._cond = asyncio.Condition()

    def allowed(self, step: int) -> bool:
        """Whether the rollout of ``step`` may start now (the update of ``step - 1 - K`` is finished)."""
        return self.finished >= (step - self.first_step) - self.max_staleness

    async def admit(self, step: int) -> int:
        """Wait until the rollout of ``step`` may start; returns the number of finished updates then."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.allowed(step))
            return self.finished

    async def done(self) -> None:
        """One more update finished: wake the rollouts it allows."""
        async with self._cond:
            self.finished += 1
            self._cond.notify_all()


@dataclass(frozen=True, slots=True)
class StepTiming:
    """When one step's rollout and training ran (clock seconds) and its lag in updates."""

    step: int
    rollout_start: float
    rollout_end: float
    train_start: float
    train_end: float
    lag: int


async def run_overlapped(
    steps: Sequence[int],
    max_staleness: int,
    produce: Callable[[int], Awaitable[T]],
    consume: Callable[[int, T, int], Awaitable[None]],
    *,
    clock: Callable[[], float] | None = None,
) -> list[StepTiming]:
    """Run ``produce(step)`` (the rollout) and ``consume(step, batch, lag)`` (the update) with lag <= ``K``.

    ``consume`` runs in step order, one at a time; ``produce`` of a step starts
    as soon as :class:`StalenessGate` allows it. An exception in either
    cancels every other rollout and propagates. Returns one
    :class:`StepTiming` per step (on ``clock``, default the loop's time).
    """
    if not steps:
        return []
    now = clock or asyncio.get_running_loop().time
    gate = StalenessGate(max_staleness, first_step=steps[0])

    async def rollout(step: int) -> tuple[int, float, float, T]:
        ROLLOUT_STEP.set(step)  # this task's context: its generator requests queue as this step's
        base = await gate.admit(step)
        t0 = now()
        out = await produce(step)
        return base, t0, now(), out

    timings: list[StepTiming] = []
    async with asyncio.TaskGroup() as tg:
        tasks = {s: tg.create_task(rollout(s), name=f"rollout-step-{s}") for s in steps}
        for s in steps:
            base, t0, t1, batch = await tasks.pop(s)
            lag = gate.finished - base
            if lag > max_staleness:  # the gate makes this impossible; a bug must not train silently off-policy
                raise RuntimeError(f"step {s}: lag {lag} exceeds max_staleness {max_staleness}")
            t2 = now()
            await consume(s, batch, lag)
            timings.append(StepTiming(s, t0, t1, t2, now(), lag))
            await gate.done()
    return timings


def trajectory_lag(traj: Trajectory, version: int) -> int:
    """How many versions ``traj`` (its oldest sampled turn) is behind ``version``."""
    return version - traj.policy_version
