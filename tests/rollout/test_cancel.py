"""Cancellation and shutdown leave no worker, no env and no task behind."""

from __future__ import annotations

import asyncio

import pytest
from rollout_fakes import STRATEGIES, FakeRunner, World, cfg, pending_tasks, tasks

from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy

WORK = RolloutRequest(tasks=tasks(12, init_s=0.01, step_s=0.01, eval_s=0.01, turns=20), group_size=2)


async def _wait_until_running(world: World) -> None:
    for _ in range(500):
        if world.active["run"] > 0 and world.open_envs > 2:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("episodes never started running")


@pytest.mark.parametrize("name", STRATEGIES)
async def test_cancel_mid_collect_closes_every_env_once(name: str) -> None:
    world = World()
    strategy = make_strategy(cfg(name), world.factory, FakeRunner(world))
    task = asyncio.create_task(strategy.collect(WORK))
    await _wait_until_running(world)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.envs, "the test must cancel with envs open"
    assert [e.closes for e in world.envs] == [1] * len(world.envs)
    assert world.open_envs == 0
    assert world.active["init"] == world.active["run"] == world.active["eval"] == 0
    assert pending_tasks() == []
    # the strategy is still usable after a cancelled collect
    small = RolloutRequest(tasks=tasks(2, turns=1), group_size=2)
    assert len((await strategy.collect(small)).trajectories) == 4
    await strategy.close()


@pytest.mark.parametrize("name", STRATEGIES)
async def test_close_during_collect_stops_it_and_releases_everything(name: str) -> None:
    world = World()
    strategy = make_strategy(cfg(name), world.factory, FakeRunner(world))
    task = asyncio.create_task(strategy.collect(WORK))
    await _wait_until_running(world)
    await strategy.close()
    assert task.done()
    with pytest.raises(asyncio.CancelledError):
        task.result()
    assert [e.closes for e in world.envs] == [1] * len(world.envs)
    assert pending_tasks() == []
    with pytest.raises(RuntimeError, match="after close"):
        await strategy.collect(WORK)


async def test_cancel_while_envs_wait_in_the_bounded_queues() -> None:
    world = World()
    # slow evaluation fills eval_queue and run_queue, so envs sit in queues and blocked workers
    c = cfg("pipeline", init_workers=4, run_workers=2, eval_workers=1, run_queue_size=2, eval_queue_size=2)
    strategy = make_strategy(c, world.factory, FakeRunner(world))
    req = RolloutRequest(tasks=tasks(10, eval_s=0.05, turns=1), group_size=2)
    task = asyncio.create_task(strategy.collect(req))
    for _ in range(500):
        board = strategy.last_board
        if board is not None and board.queued["eval"] >= 2 and board.blocked["init"] > 0:
            break
        await asyncio.sleep(0.002)
    else:
        raise AssertionError("the queues never filled")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.closes for e in world.envs] == [1] * len(world.envs)
    assert world.open_envs == 0 and pending_tasks() == []
