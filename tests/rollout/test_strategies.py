"""The three strategies on the same fake work: results, ids, timings, concurrency limits, barriers."""

from __future__ import annotations

import pytest
from rollout_fakes import STRATEGIES, FakeRunner, World, cfg, pending_tasks, tasks

from tirl.config import RolloutConfig, load_config
from tirl.envs.base import Env, Task
from tirl.errors import ConfigError
from tirl.rollout.base import RolloutRequest, RolloutStrategy
from tirl.rollout.pipeline import episode_seed
from tirl.rollout.strategies import DISPATCH, Rollout, batch_size, make_strategy
from tirl.types import Message, TerminationReason, Trajectory


@pytest.mark.parametrize("name", STRATEGIES)
async def test_every_trajectory_comes_back_grouped_and_labelled(name: str) -> None:
    world = World()
    strategy = make_strategy(cfg(name), world.factory, FakeRunner(world))
    assert isinstance(strategy, RolloutStrategy)
    request = RolloutRequest(tasks=tasks(5, turns=2, reward=1.0), group_size=3, policy_version=7, step=4)
    batch = await strategy.collect(request)
    await strategy.close()

    assert [g.id for g in batch.groups] == [f"task-{i}" for i in range(5)]
    for ti, group in enumerate(batch.groups):
        assert [t.id for t in group.trajectories] == [f"s4-t{ti}-g{k}" for k in range(3)]
        for traj in group.trajectories:
            assert traj.group == f"task-{ti}"
            assert traj.answer == str(ti)
            assert traj.policy_version == 7
            assert traj.termination is TerminationReason.ANSWERED
            assert traj.reward == 1.0 and traj.correct is True
            assert traj.info["eval"] == {"steps": 2}
            assert len(traj.messages) == 1 + 2 * 2
            for stage in ("init", "run", "eval"):
                s = traj.stages[stage]
                assert s.attempts == 1
                assert s.queued is not None and s.started is not None and s.finished is not None
                assert s.queued <= s.started <= s.finished
            assert traj.stages["init"].finished <= traj.stages["run"].started  # type: ignore[operator]
            assert traj.stages["run"].finished <= traj.stages["eval"].started  # type: ignore[operator]
    assert len(batch.trajectories) == 15
    assert batch.stats.episodes == 15
    assert all(t.termination is TerminationReason.ANSWERED and not t.failed for t in batch.trajectories)
    assert batch.stats.stages["init"].attempts == 15 and batch.stats.stages["init"].retries == 0
    assert batch.wall_s >= max(t.stages["eval"].finished for t in batch.trajectories) - 1e-6  # type: ignore[type-var]
    assert len(world.envs) == 15 and all(e.closes == 1 for e in world.envs)
    assert world.open_envs == 0
    assert pending_tasks() == []


@pytest.mark.parametrize("name", STRATEGIES)
async def test_stage_concurrency_never_exceeds_the_worker_counts(name: str) -> None:
    world = World()
    c = cfg(name, init_workers=2, run_workers=3, eval_workers=1, run_queue_size=1, eval_queue_size=1)
    strategy = make_strategy(c, world.factory, FakeRunner(world))
    work = tasks(6, init_s=0.003, step_s=0.002, eval_s=0.003, turns=2)
    batch = await strategy.collect(RolloutRequest(tasks=work, group_size=2))
    assert len(batch.trajectories) == 12
    assert world.peak["init"] <= 2 and world.peak["run"] <= 3 and world.peak["eval"] <= 1
    assert world.peak["run"] >= 2  # some overlap really happened


async def test_pipeline_bounded_queues_bound_live_envs_and_show_backpressure(tmp_path) -> None:
    world = World()
    c = cfg("pipeline", init_workers=4, run_workers=2, eval_workers=1, run_queue_size=1, eval_queue_size=1)
    trace = tmp_path / "trace.jsonl"
    strategy = Rollout(c, world.factory, FakeRunner(world), trace_path=trace)
    # Evaluation is the slow stage: the queues fill and hold the Initializer back.
    work = tasks(10, init_s=0.0, step_s=0.0, eval_s=0.01, turns=1)
    batch = await strategy.collect(RolloutRequest(tasks=work, group_size=2))
    bound = c.init_workers + c.run_queue_size + c.run_workers + c.eval_queue_size + c.eval_workers
    assert world.peak_open <= bound
    assert 1 <= batch.stats.max_live_envs <= bound
    assert world.peak_open < 20  # without backpressure all 20 would be open at once
    from tirl.rollout.trace import read_trace

    snaps = read_trace(trace)
    assert max(s["eval_queue"] for s in snaps) <= c.eval_queue_size
    assert max(s["run_queue"] for s in snaps) <= c.run_queue_size
    assert any(s["init_blocked"] > 0 or s["run_blocked"] > 0 for s in snaps)


async def test_sync_batch_runs_phase_by_phase_within_each_batch() -> None:
    world = World()
    c = cfg("sync_batch", init_workers=4, run_workers=4, eval_workers=4, batch_size=4)
    strategy = Rollout(c, world.factory, FakeRunner(world))
    work = [Task(id=f"t{i}", prompt="", data={"init_s": 0.001 * i, "turns": 1 + i}) for i in range(8)]
    batch = await strategy.collect(RolloutRequest(tasks=work, group_size=1))
    trajs = batch.trajectories
    for lo in (0, 4):
        chunk = trajs[lo : lo + 4]
        last_init = max(t.stages["init"].finished for t in chunk)  # type: ignore[type-var]
        first_run = min(t.stages["run"].started for t in chunk)  # type: ignore[type-var]
        last_run = max(t.stages["run"].finished for t in chunk)  # type: ignore[type-var]
        first_eval = min(t.stages["eval"].started for t in chunk)  # type: ignore[type-var]
        assert last_init <= first_run and last_run <= first_eval
    last_eval_b0 = max(t.stages["eval"].finished for t in trajs[:4])  # type: ignore[type-var]
    assert min(t.stages["init"].started for t in trajs[4:]) >= last_eval_b0  # type: ignore[type-var]


async def test_async_batch_has_a_barrier_between_batches_and_pipeline_has_none() -> None:
    # Episode 0 of each batch is long; the rest are short.
    work = [Task(id=f"t{i}", prompt="", data={"turns": 12 if i % 3 == 0 else 1, "step_s": 0.002}) for i in range(6)]
    request = RolloutRequest(tasks=work, group_size=1)

    world = World()
    c = cfg("async_batch", init_workers=3, run_workers=3, eval_workers=3, batch_size=3)
    batch = await Rollout(c, world.factory, FakeRunner(world)).collect(request)
    t = batch.trajectories
    end_b0 = max(x.stages["eval"].finished for x in t[:3])  # type: ignore[type-var]
    assert min(x.stages["init"].started for x in t[3:]) >= end_b0  # type: ignore[type-var]
    # inside a batch each trajectory moves on alone: a short one is evaluated before the long one ends
    assert t[1].stages["eval"].finished < t[0].stages["run"].finished  # type: ignore[operator]

    world = World()
    c = cfg("pipeline", init_workers=3, run_workers=3, eval_workers=3)
    batch = await Rollout(c, world.factory, FakeRunner(world)).collect(request)
    t = batch.trajectories
    # the pipeline starts later episodes while the first long one is still running
    assert t[4].stages["init"].started < t[0].stages["run"].finished  # type: ignore[operator]


@pytest.mark.parametrize("name", STRATEGIES)
async def test_empty_request_gives_an_empty_batch(name: str) -> None:
    world = World()
    strategy = make_strategy(cfg(name), world.factory, FakeRunner(world))
    batch = await strategy.collect(RolloutRequest(tasks=[], group_size=4))
    assert batch.groups == [] and batch.stats.episodes == 0


async def test_reset_seed_is_deterministic_and_distinct_per_sample() -> None:
    world = World()
    strategy = make_strategy(cfg("pipeline"), world.factory, FakeRunner(world))
    await strategy.collect(RolloutRequest(tasks=tasks(2), group_size=2, step=3))
    keys = sorted(e.key for e in world.envs)
    expected = sorted(f"task-{ti}#{episode_seed(3, ti, k)}" for ti in range(2) for k in range(2))
    assert keys == expected and len(set(keys)) == 4


async def test_a_resample_request_gets_new_ids_and_seeds_within_the_step() -> None:
    world = World()
    strategy = make_strategy(cfg("pipeline"), world.factory, FakeRunner(world))
    work = tasks(3)
    first = await strategy.collect(RolloutRequest(tasks=work, group_size=2, step=5))
    again = await strategy.collect(RolloutRequest(tasks=[work[2]], group_size=2, step=5, task_indices=(2,), round=1))
    assert [t.id for t in again.trajectories] == ["s5-t2-g2", "s5-t2-g3"]
    ids = [t.id for t in first.trajectories + again.trajectories]
    seeds = [e.key for e in world.envs]
    assert len(set(ids)) == len(ids) == 8 and len(set(seeds)) == len(seeds) == 8
    with pytest.raises(ValueError, match="task_indices"):
        RolloutRequest(tasks=work, group_size=2, task_indices=(0,))


async def test_runner_that_forgets_the_termination_is_flagged_as_error() -> None:
    world = World()

    async def lazy(env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        return None

    strategy = make_strategy(cfg("pipeline"), world.factory, lazy)
    batch = await strategy.collect(RolloutRequest(tasks=tasks(2), group_size=2))
    for traj in batch.trajectories:
        assert traj.termination is TerminationReason.ERROR and traj.failed
        assert "termination" in (traj.error or "")
        assert traj.reward is None and traj.stages["eval"].attempts == 0
    assert all(e.closes == 1 for e in world.envs)


async def test_runner_reported_failure_skips_evaluation() -> None:
    world = World()

    async def broken(env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        traj.termination = TerminationReason.ERROR
        traj.error = "generator went away"

    batch = await make_strategy(cfg("async_batch"), world.factory, broken).collect(
        RolloutRequest(tasks=tasks(3), group_size=1)
    )
    assert [t.error for t in batch.trajectories] == ["generator went away"] * 3
    assert all(t.stages["eval"].attempts == 0 for t in batch.trajectories)


def test_make_strategy_maps_config_names_and_batch_size() -> None:
    def runner_factory(task: Task) -> Env:
        raise AssertionError

    async def runner(env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        return None

    for name in ("sync_batch", "async_batch", "pipeline"):
        strategy = make_strategy(RolloutConfig(strategy=name), runner_factory, runner)  # type: ignore[arg-type]
        assert type(strategy) is Rollout and strategy.name == name and strategy.dispatch is DISPATCH[name]
    bad = RolloutConfig()
    bad.strategy = "warp"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="warp"):
        make_strategy(bad, runner_factory, runner)
    assert batch_size(RolloutConfig(run_workers=12)) == 12
    assert batch_size(RolloutConfig(run_workers=12, batch_size=5)) == 5
    assert load_config(None, ["rollout.batch_size=9"]).rollout.batch_size == 9
    with pytest.raises(ConfigError, match=r"rollout\.batch_size"):
        RolloutConfig(batch_size=-1)
    with pytest.raises(ConfigError, match=r"rollout\.eval_timeout_s"):
        RolloutConfig(eval_timeout_s=0)
