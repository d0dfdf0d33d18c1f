"""One rollout strategy class, three schedules: which stage body runs when.

:class:`Rollout` is the :class:`~tirl.rollout.base.RolloutStrategy` of tirl.
Every schedule runs the same stage bodies (:class:`tirl.rollout.pipeline.Stages`:
the same timeouts, retries, fault accounting, env closing and trace) and caps
each stage's concurrency with the same worker counts
(``init_workers``/``run_workers``/``eval_workers``). ``rollout.strategy``
picks the *dispatch* — a coroutine ``dispatch(stages, episodes)`` from
:data:`DISPATCH`:

- ``sync_batch`` — the request is cut into batches of ``B`` trajectories
  (``rollout.batch_size``, 0 = ``run_workers``). Per batch: initialise all,
  then run all, then evaluate all; the next batch starts when the last
  evaluation ends. The generator idles during set-up and evaluation, and
  each phase waits for its slowest member.
- ``async_batch`` — batches of ``B`` as above, but inside a batch each
  trajectory goes init → run → eval on its own. The batch still ends when
  its slowest member ends (the barrier), and at most ``B`` episodes are in
  flight.
- ``pipeline`` — :func:`tirl.rollout.pipeline.pipeline`: the whole request
  streams through three worker pools joined by bounded queues; no barrier
  before the end of the request.

However a dispatch ends (normally, by an error or by cancellation),
:meth:`Rollout.collect` gives the trace a final snapshot and closes every env
that was opened exactly once. While it runs, a :class:`~tirl.rollout.loop_watch.LoopWatch`
warns, naming the line, when an env call holds the event loop past the shortest
rollout timeout (such a call cannot be timed out).

>>> from tirl.config import RolloutConfig
>>> async def runner(env, task, initial, traj): ...
>>> make_strategy(RolloutConfig(strategy="async_batch"), lambda task: None, runner).name
'async_batch'
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tirl.config import RolloutConfig
from tirl.rollout.base import EnvFactory, EpisodeRunner, RolloutBatch, RolloutRequest
from tirl.rollout.loop_watch import LoopWatch
from tirl.rollout.pipeline import Episode, Stages, make_episodes, pipeline
from tirl.rollout.trace import GeneratorBusy, PipelineTracer, StageBoard

__all__ = ["DISPATCH", "WATCH_FLOOR_S", "Dispatch", "Rollout", "batch_size", "make_strategy"]

T = TypeVar("T")

Dispatch = Callable[[Stages, list[Episode]], Awaitable[None]]


def _batches(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def batch_size(cfg: RolloutConfig) -> int:
    """The baselines' batch size ``B``: ``rollout.batch_size``, or ``run_workers`` when it is 0."""
    return cfg.batch_size or cfg.run_workers


class _Limited:
    """The stage bodies behind one semaphore per stage (the worker counts)."""

    def __init__(self, stages: Stages) -> None:
        cfg = stages.cfg
        self.stages = stages
        self._sems = {
            "init": asyncio.Semaphore(cfg.init_workers),
            "run": asyncio.Semaphore(cfg.run_workers),
            "eval": asyncio.Semaphore(cfg.eval_workers),
        }

    async def initialize(self, ep: Episode) -> bool:
        async with self._sems["init"]:
            return await self.stages.initialize(ep)

    async def run(self, ep: Episode) -> bool:
        self.stages.queue(ep, "run")
        async with self._sems["run"]:
            return await self.stages.run(ep)

    async def evaluate(self, ep: Episode) -> None:
        self.stages.queue(ep, "eval")
        async with self._sems["eval"]:
            await self.stages.evaluate(ep)


async def _each(episodes: Sequence[Episode], body: Callable[[Episode], Coroutine[Any, Any, None]]) -> None:
    """Run ``body`` on every episode concurrently; return when all are done (the barrier)."""
    async with asyncio.TaskGroup() as tg:
        for ep in episodes:
            tg.create_task(body(ep))


async def sync_batch(stages: Stages, episodes: list[Episode]) -> None:
    """Batches of ``B``: initialise all, then run all, then evaluate all (a barrier after each phase)."""
    limited = _Limited(stages)

    async def finish_if_failed(ep: Episode, ok: bool) -> None:
        if not ok:
            await stages.finish(ep)

    async def init_one(ep: Episode) -> None:
        await finish_if_failed(ep, await limited.initialize(ep))

    async def run_one(ep: Episode) -> None:
        await finish_if_failed(ep, await limited.run(ep))

    async def eval_one(ep: Episode) -> None:
        await limited.evaluate(ep)
        await stages.finish(ep)

    for batch in _batches(episodes, batch_size(stages.cfg)):
        await _each(batch, init_one)
        await _each([ep for ep in batch if not ep.done], run_one)
        await _each([ep for ep in batch if not ep.done], eval_one)


async def async_batch(stages: Stages, episodes: list[Episode]) -> None:
    """Batches of ``B``: each trajectory runs init → run → eval on its own; the batch ends with its slowest."""
    limited = _Limited(stages)

    async def one(ep: Episode) -> None:
        if await limited.initialize(ep) and await limited.run(ep):
            await limited.evaluate(ep)
        await stages.finish(ep)

    for batch in _batches(episodes, batch_size(stages.cfg)):
        await _each(batch, one)


#: The schedules by ``rollout.strategy`` name.
DISPATCH: dict[str, Dispatch] = {"sync_batch": sync_batch, "async_batch": async_batch, "pipeline": pipeline}


class Rollout:
    """The rollout strategy: episodes, stage bodies, tracing, shutdown and batch assembly, with one dispatch.

    ``trace_path``: append pipeline-trace JSONL there (one snapshot every
    ``cfg.trace_interval_s``). ``generator_busy``: a generator with
    ``busy_seconds()`` (:class:`~tirl.inference.base.BusyMetered`), a
    :class:`~tirl.rollout.trace.BusyMeter`, or a callable returning cumulative
    busy seconds; it becomes ``gpu_util`` in the trace.
    """

    def __init__(
        self,
        cfg: RolloutConfig,
        env_factory: EnvFactory,
        runner: EpisodeRunner,
        *,
        trace_path: str | Path | None = None,
        generator_busy: GeneratorBusy | None = None,
    ) -> None:
        try:
            self.dispatch: Dispatch = DISPATCH[cfg.strategy]
        except KeyError:
            known = ", ".join(DISPATCH)
            raise ValueError(f"unknown rollout strategy {cfg.strategy!r}: choose one of {known}") from None
        self.name: str = cfg.strategy
        self.cfg = cfg
        self.env_factory = env_factory
        self.runner = runner
        self.tracer = PipelineTracer(
            trace_path, cfg.trace_interval_s, generator_busy=generator_busy, strategy=self.name
        )
        self.last_board: StageBoard | None = None  # the live board of the latest collect
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False

    async def collect(self, request: RolloutRequest) -> RolloutBatch:
        """Run every episode of the request and return exactly one trajectory per episode, failed ones flagged."""
        if self._closed:
            raise RuntimeError(f"{self.name}: collect() called after close(); create a new strategy")
        episodes = make_episodes(request)
        board = StageBoard(done_base=dict(self.tracer.done_totals))
        self.last_board = board
        stages = Stages(self.cfg, self.env_factory, self.runner, board)
        summary = self.tracer.begin()
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        for ep in episodes:
            stages.queue(ep, "init")
        sampler = asyncio.create_task(self.tracer.sample(board, request.step, summary))
        key, shortest = _shortest_timeout(self.cfg)
        what = f"{key}={shortest:g} s, the shortest rollout timeout"
        try:
            with LoopWatch(asyncio.get_running_loop(), max(shortest, WATCH_FLOOR_S), what=what):
                await self.dispatch(stages, episodes)
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await stages.shutdown()
            self.tracer.snapshot(board, request.step, summary)
            self.tracer.end(board)
            if task is not None:
                self._tasks.discard(task)
        unfinished = [ep.traj.id for ep in episodes if not ep.done]
        if unfinished:
            raise RuntimeError(
                f"{self.name}: internal error, {len(unfinished)} episode(s) never finished: {unfinished[:5]}"
            )
        return stages.assemble(request, episodes, summary)

    async def close(self) -> None:
        """Cancel running ``collect`` calls (their envs get closed) and refuse new ones."""
        self._closed = True
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current and not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)


#: The watch's limit is the shortest stage timeout, but never below this: tirl's own loop work takes milliseconds.
WATCH_FLOOR_S = 1.0


def _shortest_timeout(cfg: RolloutConfig) -> tuple[str, float]:
    """The config key and value of the shortest stage timeout: past it, a held loop has delayed a timeout."""
    keys = ("init_timeout_s", "run_timeout_s", "eval_timeout_s")
    key = min(keys, key=lambda k: float(getattr(cfg, k)))
    return f"rollout.{key}", float(getattr(cfg, key))


#: ``make_strategy(cfg, env_factory, runner, *, trace_path=None, generator_busy=None)``: the strategy whose
#: schedule is ``cfg.strategy`` (``pipeline``, ``async_batch`` or ``sync_batch``).
make_strategy = Rollout
