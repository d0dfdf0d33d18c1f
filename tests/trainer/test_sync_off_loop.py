"""The trainer's ``on_update`` hook (a weight sync that blocks for seconds on vLLM) runs off the event loop."""

from __future__ import annotations

import asyncio
import threading


async def test_on_update_runs_in_a_worker_thread_while_the_loop_keeps_going(make_trainer) -> None:
    trainer = make_trainer()
    loop_thread = threading.current_thread()
    ticks: list[int] = []
    seen: dict[str, object] = {}

    def on_update(version: int) -> None:
        seen["thread"] = threading.current_thread()
        seen["version"] = version
        before = len(ticks)
        threading.Event().wait(0.3)  # a blocking sync
        seen["ticks_during"] = len(ticks) - before

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.01)

    trainer.on_update = on_update
    task = asyncio.create_task(ticker())
    try:
        metrics, _ = await trainer.train_step(1)
    finally:
        task.cancel()
    assert metrics["train/optimizer_steps"] > 0 and seen["version"] == 1
    assert seen["thread"] is not loop_thread
    assert seen["ticks_during"] >= 5  # the loop ran other tasks during the 0.3 s sync
