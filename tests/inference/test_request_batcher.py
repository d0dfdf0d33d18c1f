"""The in-process request queue serves the oldest rollout step first when a batch cannot take everything."""

from __future__ import annotations

import asyncio
import random

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
