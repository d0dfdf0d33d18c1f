"""Three ways to dispatch the same rollout work, behind one interface.

All three run the same stage bodies (:class:`tirl.rollout.pipeline.Stages`:
the same timeouts, retries, fault accounting, env closing and trace) and cap
each stage's concurrency with the same worker counts
(``init_workers``/``run_workers``/``eval_workers``); they differ only in
scheduling:

- ``sync_batch`` — the request is cut into batches of ``B`` trajectories
  (``rollout.batch_size``, 0 = ``run_workers``). Per batch: initialise all,
  then run all, then evaluate all; the next batch starts when the last
  evaluation ends. The generator idles during set-up and evaluation, and
  each phase waits for its slowest member.
- ``async_batch`` — batches of ``B`` as above, but inside a batch each
  trajectory goes init → run → eval on its own. The batch still ends when
  its slowest member ends (the barrier), and at most ``B`` episodes are in
  flight.
- ``pipeline`` — :class:`~tirl.rollout.pipeline.PipelineStrategy`: the whole
  request streams through three worker pools joined by bounded queues; no
  barrier before the end of the request.

>>> from tirl.config import RolloutConfig
>>> async def runner(env, task, initial, traj): ...
>>> make_strategy(RolloutConfig(strategy="async_batch"), lambda task: None, runner).name
'async_batch'
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from tirl.config import RolloutConfig
from tirl.rollout.base import EnvFactory, EpisodeRunner, RolloutBatch, RolloutRequest, RolloutStrategy
from tirl.rollout.pipeline import Episode, PipelineStrategy, RolloutCore, Stages
from tirl.rollout.trace import GeneratorBusy

__all__ = ["AsyncBatchStrategy", "PipelineStrategy", "SyncBatchStrategy", "make_strategy"]

T = TypeVar("T")


def _batches(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def batch_size(cfg: RolloutConfig) -> int:
    """The baselines' batch size ``B``: ``rollout.batch_size``, or ``run_workers`` when it is 0."""
    return cfg.batch_size or cfg.run_workers


class SyncBatchStrategy:
    """Batches of ``B``: initialise all, then run all, then evaluate all (a barrier after each phase)."""

    name = "sync_batch"

    def __init__(
        self,
        cfg: RolloutConfig,
        env_factory: EnvFactory,
        runner: EpisodeRunner,
        *,
        trace_path: str | Path | None = None,
        generator_busy: GeneratorBusy | None = None,
    ) -> None:
        self.cfg = cfg
        self.core = RolloutCore(
            self.name, cfg, env_factory, runner, trace_path=trace_path, generator_busy=generator_busy
        )

    async def collect(self, request: RolloutRequest) -> RolloutBatch:
        """Run the request batch by batch, phase by phase."""
        return await self.core.collect(request, self._dispatch)

    async def close(self) -> None:
        """Cancel a running ``collect`` and close its envs."""
        await self.core.close()

    async def _dispatch(self, stages: Stages, episodes: list[Episode]) -> None:
        cfg = self.cfg
        init_sem = asyncio.Semaphore(cfg.init_workers)
        run_sem = asyncio.Semaphore(cfg.run_workers)
        eval_sem = asyncio.Semaphore(cfg.eval_workers)

        async def init_one(ep: Episode) -> None:
            async with init_sem:
                ok = await stages.initialize(ep)
            if not ok:
                await stages.finish(ep)

        async def run_one(ep: Episode) -> None:
            async with run_sem:
                ok = await stages.run(ep)
            if not ok:
                await stages.finish(ep)

        async def eval_one(ep: Episode) -> None:
            async with eval_sem:
                await stages.evaluate(ep)
            await stages.finish(ep)

        for batch in _batches(episodes, batch_size(cfg)):
            async with asyncio.TaskGroup() as tg:
                for ep in batch:
                    tg.create_task(init_one(ep))
            ready = [ep for ep in batch if not ep.done]
            for ep in ready:
                stages.queue(ep, "run")
            async with asyncio.TaskGroup() as tg:
                for ep in ready:
                    tg.create_task(run_one(ep))
            ready = [ep for ep in ready if not ep.done]
            for ep in ready:
                stages.queue(ep, "eval")
            async with asyncio.TaskGroup() as tg:
                for ep in ready:
                    tg.create_task(eval_one(ep))


class AsyncBatchStrategy:
    """Batches of ``B``: each trajectory runs init → run → eval on its own; the batch ends with its slowest."""

    name = "async_batch"

    def __init__(
        self,
        cfg: RolloutConfig,
        env_factory: EnvFactory,
        runner: EpisodeRunner,
        *,
        trace_path: str | Path | None = None,
        generator_busy: GeneratorBusy | None = None,
    ) -> None:
        self.cfg = cfg
        self.core = RolloutCore(
            self.name, cfg, env_factory, runner, trace_path=trace_path, generator_busy=generator_busy
        )

    async def collect(self, request: RolloutRequest) -> RolloutBatch:
        """Run the request batch by batch, each trajectory independently inside its batch."""
        return await self.core.collect(request, self._dispatch)

    async def close(self) -> None:
        """Cancel a running ``collect`` and close its envs."""
        await self.core.close()

    async def _dispatch(self, stages: Stages, episodes: list[Episode]) -> None:
        cfg = self.cfg
        init_sem = asyncio.Semaphore(cfg.init_workers)
        run_sem = asyncio.Semaphore(cfg.run_workers)
        eval_sem = asyncio.Semaphore(cfg.eval_workers)

        async def one(ep: Episode) -> None:
            async with init_sem:
                ok = await stages.initialize(ep)
            if ok:
                stages.queue(ep, "run")
                async with run_sem:
                    ok = await stages.run(ep)
            if ok:
                stages.queue(ep, "eval")
                async with eval_sem:
                    await stages.evaluate(ep)
            await stages.finish(ep)

        for batch in _batches(episodes, batch_size(cfg)):
            async with asyncio.TaskGroup() as tg:
                for ep in batch:
                    tg.create_task(one(ep))


_STRATEGIES: dict[str, type[SyncBatchStrategy] | type[AsyncBatchStrategy] | type[PipelineStrategy]] = {
    "sync_batch": SyncBatchStrategy,
    "async_batch": AsyncBatchStrategy,
    "pipeline": PipelineStrategy,
}


def make_strategy(
    cfg: RolloutConfig,
    env_factory: EnvFactory,
    runner: EpisodeRunner,
    *,
    trace_path: str | Path | None = None,
    generator_busy: GeneratorBusy | None = None,
) -> RolloutStrategy:
    """The strategy named by ``cfg.strategy`` (``pipeline``, ``async_batch`` or ``sync_batch``).

    ``trace_path``: append pipeline-trace JSONL there (one snapshot every
    ``cfg.trace_interval_s``). ``generator_busy``: a
    :class:`~tirl.rollout.trace.BusyMeter` (or anything with
    ``busy_seconds()``, or a callable returning cumulative busy seconds) that
    the generator updates; it becomes ``gpu_util`` in the trace.
    """
    try:
        cls = _STRATEGIES[cfg.strategy]
    except KeyError:
        raise ValueError(f"unknown rollout strategy {cfg.strategy!r}: choose one of {', '.join(_STRATEGIES)}") from None
    return cls(cfg, env_factory, runner, trace_path=trace_path, generator_busy=generator_busy)
