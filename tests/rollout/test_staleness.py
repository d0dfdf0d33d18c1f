"""Bounded staleness: the gate never lets a step train on a rollout more than K updates old; K=0 alternates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.rollout.staleness import ROLLOUT_STEP, OldestStepFirst, StalenessGate, run_overlapped
from tirl.testing.clock import VirtualTimeLoop


def _simulate(k: int, rollout_s: list[float], train_s: list[float]) -> tuple[list[Any], list[tuple[str, int, float]]]:
    events: list[tuple[str, int, float]] = []
    finished = {"n": 0}
    started_at: dict[int, int] = {}

    async def produce(step: int) -> int:
        loop = asyncio.get_running_loop()
        started_at[step] = finished["n"]  # updates done when this rollout started (the reference)
        events.append(("rollout_start", step, loop.time()))
        await asyncio.sleep(rollout_s[step - 1])
        events.append(("rollout_end", step, loop.time()))
        return step

    async def consume(step: int, batch: int, lag: int) -> None:
        assert batch == step
        assert lag == finished["n"] - started_at[step]  # the reported lag is the plain count
        events.append(("train_start", step, asyncio.get_running_loop().time()))
        await asyncio.sleep(train_s[step - 1])
        finished["n"] += 1

    timings = VirtualTimeLoop.run(run_overlapped(range(1, len(rollout_s) + 1), k, produce, consume))
    return timings, events


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(0, 4),
    durations=st.lists(st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 50.0)), min_size=1, max_size=12),
)
def test_lag_never_exceeds_k_and_steps_train_in_order(k: int, durations: list[tuple[float, float]]) -> None:
    rollout_s = [d[0] for d in durations]
    train_s = [d[1] for d in durations]
    timings, events = _simulate(k, rollout_s, train_s)
    assert [t.step for t in timings] == list(range(1, len(durations) + 1))
    assert all(0 <= t.lag <= k for t in timings)
    # reference: replay the events; a rollout of step s starts only after the trainings of steps 1..s-1-k ended
    ends = {t.step: t.train_end for t in timings}
    for kind, step, at in events:
        if kind == "rollout_start":
            must_be_done = [s for s in range(1, step - k)]
            assert all(ends[s] <= at for s in must_be_done), (step, at, must_be_done)
    for t in timings:
        assert t.rollout_end <= t.train_start <= t.train_end


def test_k0_is_strict_alternation() -> None:
    _, events = _simulate(0, [3.0, 1.0, 2.0], [2.0, 2.0, 2.0])
    kinds = [(kind, step) for kind, step, _ in events]
    assert kinds == [
        ("rollout_start", 1), ("rollout_end", 1), ("train_start", 1),
        ("rollout_start", 2), ("rollout_end", 2), ("train_start", 2),
        ("rollout_start", 3), ("rollout_end", 3), ("train_start", 3),
    ]  # fmt: skip


def test_k1_overlaps_rollout_with_training() -> None:
    timings, _ = _simulate(1, [4.0, 4.0, 4.0, 4.0], [4.0, 4.0, 4.0, 4.0])
    # steps 1 and 2 roll out together; step 3 rolls out while step 1 trains, and so on
    assert [t.lag for t in timings] == [0, 1, 1, 1]
    assert timings[-1].train_end == pytest.approx(4.0 + 4 * 4.0)  # the trainer never waits after step 1
    sync, _ = _simulate(0, [4.0] * 4, [4.0] * 4)
    assert sync[-1].train_end == pytest.approx(32.0)


def test_error_in_consume_cancels_rollouts_and_propagates() -> None:
    started: list[int] = []

    async def produce(step: int) -> int:
        started.append(step)
        await asyncio.sleep(10.0)
        return step

    async def consume(step: int, batch: int, lag: int) -> None:
        raise ValueError("update failed")

    with pytest.raises(ExceptionGroup) as info:
        VirtualTimeLoop.run(run_overlapped(range(1, 6), 2, produce, consume))
    assert info.group_contains(ValueError)
    assert started == [1, 2, 3]  # the gate held 4 and 5 back


def test_gate_rejects_negative_k() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessGate(-1)


def _service_order(slots: int, steps: list[int | None], cancel: frozenset[int] = frozenset()) -> list[int]:
    """Indices of the waiters in the order ``OldestStepFirst`` serves them (all arrive while every slot is held)."""
    served: list[int] = []

    async def main() -> None:
        sem = OldestStepFirst(slots)
        for _ in range(slots):
            await sem.acquire()
        assert sem.locked()

        async def waiter(i: int, step: int | None) -> None:
            ROLLOUT_STEP.set(step)
            async with sem:
                served.append(i)
                await asyncio.sleep(1)

        tasks = []
        for i, step in enumerate(steps):
            tasks.append(asyncio.create_task(waiter(i, step)))
            await asyncio.sleep(0)  # arrival order = index order
        for i in cancel:
            tasks[i].cancel()
        for _ in range(slots):
            sem.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert not sem.locked()  # every slot came back, cancelled waiters included
        for _ in range(slots):  # and all of them are free again
            await asyncio.wait_for(sem.acquire(), timeout=1)

    VirtualTimeLoop.run(main())
    return served


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=1, max_value=3),
    st.lists(st.one_of(st.none(), st.integers(min_value=1, max_value=4)), max_size=12),
    st.data(),
)
def test_oldest_step_first_matches_a_reference_order(slots: int, steps: list[int | None], data: Any) -> None:
    cancel = frozenset(data.draw(st.sets(st.integers(min_value=0, max_value=max(0, len(steps) - 1)))) if steps else ())
    # reference: a plain sort, oldest step first, no step last, arrival order within a step; cancelled never served
    ref = sorted(
        (i for i in range(len(steps)) if i not in cancel),
        key=lambda i: (float("inf") if steps[i] is None else steps[i], i),
    )
    assert _service_order(slots, steps, cancel) == ref


def test_oldest_step_first_is_fifo_with_one_step() -> None:
    assert _service_order(2, [5] * 7) == list(range(7))


def test_oldest_step_first_hands_back_a_slot_handed_to_a_cancelled_waiter() -> None:
    async def main() -> bool:
        sem = OldestStepFirst(1)
        await sem.acquire()
        waiter = asyncio.create_task(sem.acquire())
        await asyncio.sleep(0)
        sem.release()  # handed to the waiter ...
        waiter.cancel()  # ... which is cancelled before it runs
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.wait_for(sem.acquire(), timeout=1)  # the slot is free again
        return sem.locked()

    assert VirtualTimeLoop.run(main()) is True


def test_run_overlapped_marks_each_rollout_and_its_child_tasks_with_its_step() -> None:
    seen: dict[int, list[int | None]] = {}

    async def produce(step: int) -> int:
        async def child() -> int | None:
            await asyncio.sleep(0.1)
            return ROLLOUT_STEP.get()

        seen[step] = [ROLLOUT_STEP.get(), *(await asyncio.gather(child(), child()))]
        return step

    async def consume(step: int, batch: int, lag: int) -> None:
        assert ROLLOUT_STEP.get() is None  # the trainer's own context is not a rollout's
        await asyncio.sleep(0.5)

    VirtualTimeLoop.run(run_overlapped(range(3, 7), 2, produce, consume))
    assert seen == {s: [s, s, s] for s in range(3, 7)}
    assert ROLLOUT_STEP.get() is None


def test_openai_generator_sends_queued_requests_oldest_step_first() -> None:
    """Real HTTP: a local aiohttp server records the order ``OpenAIGenerator`` (1 slot) sends requests in."""
    from aiohttp import web

    from tirl.inference.base import SamplingParams
    from tirl.inference.openai_http import OpenAIGenerator

    order: list[int] = []

    async def main() -> None:
        release = asyncio.Event()

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "t"}]})

        async def completions(request: web.Request) -> web.Response:
            body = await request.json()
            order.append(body["prompt"][0])
            if body["prompt"][0] == 0:
                await release.wait()  # hold the only slot until every other request is queued
            choice = {"text": "", "token_ids": [7], "logprobs": {"token_logprobs": [-0.1]}, "finish_reason": "length"}
            return web.json_response({"choices": [choice]})

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        gen = OpenAIGenerator(f"http://127.0.0.1:{port}/v1", max_concurrency=1, retries=0)
        params = SamplingParams(max_new_tokens=1)
        try:

            async def ask(step: int | None, prompt: int) -> None:
                ROLLOUT_STEP.set(step)
                await gen.generate([prompt], params)

            await gen.start()
            first = asyncio.create_task(ask(9, 0))
            while not order:
                await asyncio.sleep(0.01)
            rest = [asyncio.create_task(ask(s, p)) for s, p in [(3, 1), (None, 2), (1, 3), (2, 4), (1, 5)]]
            while sum(not f.done() for _, _, f in gen._sem._waiters) < len(rest):
                await asyncio.sleep(0.01)
            release.set()
            await asyncio.gather(first, *rest)
        finally:
            await gen.close()
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert order == [0, 3, 5, 4, 1, 2]  # the slot holder, then step 1 (FIFO), 2, 3, and no step last
