"""``RolloutStats``: a collect's figures against what its episodes really did, and added rounds against a plain loop.

Covered: the stage times, queue means, busy fraction and peak of a real ``collect`` (fake envs, virtual time, so
the figures are exact), the arithmetic of :meth:`RolloutStats.add` + :meth:`RolloutStats.metrics` over random
rounds, and the key set of an empty batch. The attempt/retry/timeout counts under injected faults are checked in
test_faults.py; the trainer writing all of it into metrics.jsonl in tests/trainer/test_rollout_stats_run.py.
"""

from __future__ import annotations

import random

import pytest
from rollout_fakes import FakeRunner, World, cfg, tasks

from tirl.rollout.base import RolloutRequest
from tirl.rollout.batch_stats import RolloutStats, StageStats
from tirl.rollout.strategies import make_strategy
from tirl.testing.clock import VirtualTimeLoop

#: The keys RolloutStats.metrics writes into every metrics row (docs/trainer.md lists the same).
KEYS = {
    "rollout/wall_s", "rollout/trajectories_per_s", "rollout/max_live_envs", "rollout/close_errors",
    "rollout/gpu_util", "rollout/init_retries", "rollout/eval_retries",
    *(f"rollout/{s}_{what}" for s in ("init", "run", "eval")
      for what in ("attempts", "timeouts", "queue_mean", "s_mean", "wait_s_mean")),
}  # fmt: skip


async def _slow_evaluator() -> tuple[RolloutStats, list[float], list[float]]:
    """4 episodes: instant set-up, 0.5 s of generation each (in parallel), 1 s of evaluation each on ONE worker."""
    world = World()
    c = cfg("pipeline", init_workers=4, run_workers=4, eval_workers=1, run_queue_size=4, eval_queue_size=4)
    strategy = make_strategy(c, world.factory, FakeRunner(world, gen_s=0.5), generator_busy=world.meter)
    batch = await strategy.collect(RolloutRequest(tasks=tasks(4, eval_s=1.0, turns=1), group_size=1))
    await strategy.close()
    evals = [t.stages["eval"] for t in batch.trajectories]
    busy = [e.finished - e.started for e in evals if e.finished is not None and e.started is not None]
    waits = [e.started - e.queued for e in evals if e.started is not None and e.queued is not None]
    return batch.stats, busy, waits


def test_a_slow_evaluator_shows_in_the_stage_times_and_the_eval_queue() -> None:
    stats, busy, waits = VirtualTimeLoop.run(_slow_evaluator())
    row = stats.metrics()
    assert set(row) == KEYS
    # a plain reference: the trajectories' own stage timings
    assert row["rollout/eval_s_mean"] == pytest.approx(sum(busy) / len(busy)) == pytest.approx(1.0)
    assert row["rollout/eval_wait_s_mean"] == pytest.approx(sum(waits) / len(waits)) == pytest.approx(1.5)  # 0,1,2,3
    assert row["rollout/run_s_mean"] == pytest.approx(0.5) and row["rollout/init_s_mean"] == pytest.approx(0.0)
    assert row["rollout/wall_s"] == pytest.approx(4.5) and row["rollout/trajectories_per_s"] == pytest.approx(4 / 4.5)
    assert row["rollout/gpu_util"] == pytest.approx(0.5 / 4.5, abs=0.01)  # generation is 0.5 s of the 4.5
    assert row["rollout/eval_queue_mean"] == pytest.approx((3 + 2 + 1) / 4.5, abs=0.05)  # 3, 2, 1, 0 waiting, 1 s each
    assert row["rollout/run_queue_mean"] == pytest.approx(0.0) and row["rollout/max_live_envs"] == 4.0
    assert row["rollout/eval_attempts"] == 4 and row["rollout/eval_retries"] == row["rollout/eval_timeouts"] == 0


def _random_stats(rng: random.Random) -> RolloutStats:
    stages = {
        s: StageStats(attempts=rng.randrange(9), retries=rng.randrange(3), timeouts=rng.randrange(3),
                      episodes=rng.randrange(5), busy_s=rng.random() * 9, wait_s=rng.random() * 9,
                      queue_depth_sum=rng.randrange(50))
        for s in ("init", "run", "eval")
    }  # fmt: skip
    return RolloutStats(
        episodes=rng.randrange(1, 9), wall_s=rng.random() * 5, max_live_envs=rng.randrange(20),
        close_errors=rng.randrange(2), snapshots=rng.randrange(4), traced_s=rng.random() * 5,
        generator_busy_s=rng.choice([None, rng.random() * 6]), stages=stages,
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_added_rounds_match_a_plain_reference(seed: int) -> None:
    rng = random.Random(seed)
    rounds = [_random_stats(rng) for _ in range(rng.randrange(1, 5))]
    total = RolloutStats()
    for r in rounds:
        total.add(r)
    got = total.metrics()
    want: dict[str, float | None] = {}
    wall = sum(r.wall_s for r in rounds)
    want["rollout/wall_s"] = wall
    want["rollout/trajectories_per_s"] = sum(r.episodes for r in rounds) / wall if wall > 0 else 0.0
    want["rollout/max_live_envs"] = float(max(r.max_live_envs for r in rounds))
    want["rollout/close_errors"] = float(sum(r.close_errors for r in rounds))
    metered = [r for r in rounds if r.generator_busy_s is not None]
    traced = sum(r.traced_s for r in rounds)
    busy = sum(r.generator_busy_s or 0.0 for r in metered)
    want["rollout/gpu_util"] = min(1.0, busy / traced) if metered and traced > 0 else None
    snapshots = sum(r.snapshots for r in rounds)
    for s in ("init", "run", "eval"):
        parts = [r.stages[s] for r in rounds]
        n = sum(p.episodes for p in parts)
        want[f"rollout/{s}_attempts"] = float(sum(p.attempts for p in parts))
        if s != "run":
            want[f"rollout/{s}_retries"] = float(sum(p.retries for p in parts))
        want[f"rollout/{s}_timeouts"] = float(sum(p.timeouts for p in parts))
        want[f"rollout/{s}_queue_mean"] = sum(p.queue_depth_sum for p in parts) / snapshots if snapshots else None
        want[f"rollout/{s}_s_mean"] = sum(p.busy_s for p in parts) / n if n else None
        want[f"rollout/{s}_wait_s_mean"] = sum(p.wait_s for p in parts) / n if n else None
    assert set(got) == set(want) == KEYS
    for key, value in want.items():
        assert got[key] == (None if value is None else pytest.approx(value)), key


def test_an_empty_batch_has_every_key_counts_0_and_means_null() -> None:
    row = RolloutStats().metrics()
    assert set(row) == KEYS
    means = {k for k in KEYS if k.endswith("_mean") or k == "rollout/gpu_util"}
    assert all(row[k] is None for k in means)
    assert all(row[k] == 0.0 for k in KEYS - means)
