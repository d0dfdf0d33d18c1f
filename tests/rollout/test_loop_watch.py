"""Code that holds the event loop: measured per call, and named by the watchdog during a rollout."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from rollout_fakes import FakeEnv, FakeRunner, World, cfg, tasks

from tirl.envs.base import EvalResult
from tirl.rollout.base import RolloutRequest
from tirl.rollout.loop_watch import Held, LoopWatch, held
from tirl.rollout.strategies import make_strategy


async def _steps(*sleeps: float) -> str:
    """Blocks for each of ``sleeps`` in turn, yielding to the loop between them."""
    for s in sleeps:
        time.sleep(s)
        await asyncio.sleep(0)
    return "done"


def longest_stretch(sleeps: tuple[float, ...]) -> float:
    """The plain reference: the longest blocking stretch is the longest single sleep."""
    return max(sleeps)


@pytest.mark.parametrize("sleeps", [(0.05,), (0.02, 0.15, 0.05), (0.1, 0.0, 0.03)])
async def test_held_measures_the_longest_stretch_without_awaiting(sleeps: tuple[float, ...]) -> None:
    meter = Held()
    assert await held(_steps(*sleeps), meter) == "done"
    want = longest_stretch(sleeps)
    assert want <= meter.longest_s < want + 0.1  # a stretch cannot be shorter than its sleep


async def test_held_passes_exceptions_and_cancellation_through() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    with pytest.raises(KeyError):
        await held(fails(), Held())
    seen: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    task = asyncio.create_task(held(waits(), Held()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled inside"]


async def evaluate() -> None:  # named like the env method the warning traces back to
    await asyncio.sleep(0)
    _block(0.8)


def _block(seconds: float) -> None:
    time.sleep(seconds)


async def test_the_watch_names_the_blocking_line_and_the_env_method(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    with (
        caplog.at_level(logging.WARNING, logger="tirl.rollout.loop_watch"),
        LoopWatch(loop, 0.2, what="rollout.eval_timeout_s=0.2 s") as watch,
    ):
        await evaluate()
        await asyncio.sleep(0.3)  # the loop runs again: the watch sees the stall end
    assert len(watch.stalls) == 1
    stall = watch.stalls[0]
    assert 0.6 < stall.seconds < 2.0
    assert "test_loop_watch.py" in stall.where and "(_block)" in stall.where and "(evaluate)" in stall.where
    text = caplog.text
    assert "held for" in text and "past rollout.eval_timeout_s=0.2 s" in text and "asyncio.to_thread" in text
    assert "ran again" in text


async def test_the_watch_is_silent_while_the_loop_awaits(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING, logger="tirl.rollout.loop_watch"), LoopWatch(loop, 0.5) as watch:
        await asyncio.sleep(1.2)  # slow, but awaiting
    assert watch.stalls == [] and caplog.text == ""


class BlockingEvalEnv(FakeEnv):
    """A user env whose evaluate computes without awaiting (``time.sleep`` standing in for in-process work)."""

    async def evaluate(self) -> EvalResult:
        time.sleep(float(self.task.data["block_s"]))
        return EvalResult(reward=1.0, correct=True)


async def test_a_rollout_warns_about_an_evaluate_that_holds_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    """The limit is the shortest stage timeout (1 s at least); the evaluate runs 2 s against eval_timeout_s=0.4."""
    world = World()
    rollout = make_strategy(
        cfg("pipeline", eval_timeout_s=0.4, init_timeout_s=5.0, run_timeout_s=5.0),
        lambda task: BlockingEvalEnv(world, task),
        FakeRunner(world),
    )
    with caplog.at_level(logging.WARNING, logger="tirl.rollout.loop_watch"):
        batch = await rollout.collect(RolloutRequest(tasks=tasks(1, block_s=2.0), group_size=1, step=0))
    await rollout.close()
    # the timeout could not fire: the episode was scored, late, and the warning says why and where
    assert [t.reward for g in batch.groups for t in g.trajectories] == [1.0]
    assert "rollout.eval_timeout_s=0.4 s, the shortest rollout timeout" in caplog.text
    assert "BlockingEvalEnv.evaluate" in caplog.text and "test_loop_watch.py" in caplog.text
