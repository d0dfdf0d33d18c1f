"""Micro-batches on worker threads (tirl.trainer.parallel) give exactly the sequential update.

The reference is the plain sequential loop over the same micro-batches (``workers=1``, ``backward()``
into ``.grad``): with one intra-op thread on both sides the arithmetic is the same, so losses, gradient
norms, statistics, old log-probs and the weights after the update must be bitwise equal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch
from trainer_fakes import SMALL

from tirl.config import AlgoConfig
from tirl.models.tiny import build_tiny_model
from tirl.trainer.parallel import MicroPool, auto_workers
from tirl.trainer.update import PolicyUpdater, score_logprobs
from tirl.types import Trajectory


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _traj(i: int, n: int) -> Trajectory:
    ids = [(i * 11 + 3 * k) % 90 + 7 for k in range(n)]
    mask = [0] * 3 + [1] * (n - 3)
    lps = [0.0] * 3 + [-0.05 * ((i + k) % 7 + 1) for k in range(n - 3)]
    return Trajectory(id=str(i), messages=[], token_ids=ids, loss_mask=mask, logprobs=lps)


TRAJS = [_traj(i, 6 + (5 * i) % 13) for i in range(12)]
ADV = torch.tensor([(-1.0) ** i * (0.2 + 0.1 * i) for i in range(12)])


def _run(workers: int, budget: int, agg: str = "token_mean") -> tuple[list[float], list[float], dict, torch.Tensor]:
    model, _ = build_tiny_model(SMALL, seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    algo = AlgoConfig(minibatches=2, epochs=2, micro_batch_tokens=budget, loss_agg=agg, warmup_steps=0)
    up = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, workers=workers)
    stats = up.update(TRAJS, ADV, seed=3)
    up.pool.close()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return stats.losses, stats.grad_norms, stats.metrics(), weights


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_two_workers_equal_the_sequential_loop_bit_for_bit(agg: str) -> None:
    # workers share algo.micro_batch_tokens: 2 workers at 80 cut the same micro-batches as 1 worker at 40
    losses1, norms1, metrics1, w1 = _run(1, 40, agg)
    losses2, norms2, metrics2, w2 = _run(2, 80, agg)
    assert len(losses1) == 4 and losses1 == losses2 and norms1 == norms2
    assert metrics1 == metrics2
    assert metrics1["train/loss_tokens"] == 2 * sum(len(t.token_ids) - 3 for t in TRAJS)  # 2 epochs, every token
    assert metrics1["train/entropy"] > 0 and metrics1["train/is_ratio_min"] <= 1 <= metrics1["train/is_ratio_max"]
    assert torch.equal(w1, w2)
    # (the whole-batch reference for the gradient itself: test_batching's accumulation test, per worker count)


def test_scoring_with_a_pool_equals_scoring_without() -> None:
    model, _ = build_tiny_model(SMALL, seed=5)
    plain = score_logprobs(model, TRAJS, 0, 30)
    pool = MicroPool(3)
    pooled = score_logprobs(model, TRAJS, 0, 30, pool=pool)
    pool.close()
    assert all(torch.equal(a, b) for a, b in zip(plain, pooled, strict=True))
    assert [a.numel() for a in plain] == [len(t.token_ids) - 1 for t in TRAJS]


def test_a_non_finite_micro_batch_skips_the_step_with_workers() -> None:
    model, _ = build_tiny_model(SMALL, seed=5)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    algo = AlgoConfig(minibatches=1, micro_batch_tokens=60)
    up = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, workers=2)
    adv = ADV.clone()
    adv[7] = float("nan")
    stats = up.update(TRAJS, adv, seed=0)
    up.pool.close()
    assert stats.steps == 0 and stats.skipped == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_the_pool_keeps_order_bounds_work_in_flight_and_restores_threads() -> None:
    pool = MicroPool(2)
    started: list[int] = []
    live = {"now": 0, "max": 0}
    lock = threading.Lock()
    seen_threads: set[int] = set()

    def work(i: int) -> int:
        with lock:
            started.append(i)
            live["now"] += 1
            live["max"] = max(live["max"], live["now"])
            seen_threads.add(torch.get_num_threads())
        time.sleep(0.01 * ((i * 7) % 3))  # finish out of order
        with lock:
            live["now"] -= 1
        return i * i

    torch.set_num_threads(1)
    out = []
    for r in pool.map(work, list(range(9))):
        out.append(r)
        assert len(started) <= len(out) + 2  # never more than `workers` started and not yet consumed
    pool.close()
    assert out == [i * i for i in range(9)]
    assert live["max"] <= 2 and seen_threads == {1}
    assert torch.get_num_threads() == 1


def test_auto_workers_uses_the_thread_count_for_a_small_cpu_model() -> None:
    model, _ = build_tiny_model(SMALL, seed=5)
    torch.set_num_threads(2)
    assert auto_workers(model) == 2
    torch.set_num_threads(1)
    assert auto_workers(model) == 1


def test_every_token_statistic_has_one_fold() -> None:
    # absorb (micro-batches) and merge_stats (ranks) fold exactly these fields; a new one must be classified
    import dataclasses

    from tirl.trainer.attribution import MINS, SUMS, AttributionStats
    from tirl.trainer.update import TOKEN_MAXES, TOKEN_MINS, TOKEN_SUMS, UpdateStats

    per_step = {"losses", "grad_norms", "skipped", "steps", "attr"}  # attr: rank 0's, folded by its own absorb
    token_fields = [f.name for f in dataclasses.fields(UpdateStats) if f.name not in per_step]
    groups = [*TOKEN_SUMS, *TOKEN_MINS, *TOKEN_MAXES]
    assert sorted(groups) == sorted(token_fields)
    assert len(set(groups)) == len(groups)
    assert sorted([*SUMS, *MINS]) == sorted(f.name for f in dataclasses.fields(AttributionStats))
