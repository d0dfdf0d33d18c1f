"""The in-process request queue serves the oldest rollout step first when a batch cannot take everything;
a dropped owner does not keep its worker thread alive."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time

import pytest

from tirl.inference.base import GenerationResult, Request, RequestBatcher, SamplingParams
from tirl.rollout.staleness import ROLLOUT_STEP


async def _submit_all(steps: list[int | None], max_batch: int | None) -> list[list[int]]:
    batches: list[list[int]] = []

    def run_batch(batch: list[Request]) -> list[GenerationResult]:
        batches.append([r.prompt_ids[0] for r in batch])
        return [GenerationResult(token_ids=[r.prompt_ids[0]], logprobs=[0.0], finish_reason="stop") for r in batch]

    batcher = RequestBatcher(run_batch, owner="test", thread_name="t", batch_window_s=0.05, max_batch=max_batch)

    async def one(i: int, step: int | None) -> int:
        ROLLOUT_STEP.set(step)  # each task has its own context: the overlapped rollout sets it per step
        res = await batcher.submit([i], SamplingParams())
        return res.token_ids[0]

    got = await asyncio.gather(*(one(i, s) for i, s in enumerate(steps)))
    batcher.close()
    assert got == list(range(len(steps)))  # every caller gets its own result
    return batches


@pytest.mark.parametrize("seed", range(5))
async def test_batches_take_the_oldest_step_first_in_arrival_order(seed: int) -> None:
    rng = random.Random(seed)
    steps: list[int | None] = [rng.choice([None, 1, 2, 3]) for _ in range(11)]
    batches = await _submit_all(steps, max_batch=3)
    # plain reference: one sort by (step, none = newest; arrival), cut into batches of 3
    order = sorted(range(len(steps)), key=lambda i: (float("inf") if steps[i] is None else steps[i], i))
    assert batches == [order[k : k + 3] for k in range(0, len(order), 3)]


async def test_without_a_cap_a_batch_keeps_arrival_order() -> None:
    assert await _submit_all([3, 1, None, 2], max_batch=None) == [[0, 1, 2, 3]]


class _Owner:
    """A generator-like owner whose batcher calls back into it (the shape of HFGenerator and VLLMGenerator)."""

    def __init__(self) -> None:
        self.batcher = RequestBatcher(self.run, owner="owner", thread_name="tirl-owner-test", batch_window_s=0.0)

    def run(self, batch: list[Request]) -> list[GenerationResult]:
        return [GenerationResult(token_ids=[1], logprobs=[0.0], finish_reason="stop") for _ in batch]


def test_an_owner_dropped_without_close_takes_its_worker_thread_with_it() -> None:
    """Before: owner -> batcher -> bound method -> owner was a cycle, so an unclosed generator's worker thread (and
    its OpenMP team) lived until the next full garbage collection; a long pytest process piled them up."""
    gc.disable()  # no collection may hide the cycle during the test
    try:
        owner = _Owner()
        asyncio.run(owner.batcher.submit([1], SamplingParams()))
        assert any(t.name.startswith("tirl-owner-test") for t in threading.enumerate())
        del owner
        deadline = time.monotonic() + 10
        while any(t.name.startswith("tirl-owner-test") for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the worker thread outlived its dropped owner"
            time.sleep(0.05)
    finally:
        gc.enable()
