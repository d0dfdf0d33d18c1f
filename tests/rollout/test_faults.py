"""Faults at every stage, for hundreds of trajectories: every outcome is predicted and accounted."""

from __future__ import annotations

from collections import Counter

import pytest
from faults import FaultLog, FaultPlan, FaultyRunner, faulty_factory
from rollout_fakes import STRATEGIES, FakeRunner, World, cfg, pending_tasks, tasks

from tirl.rollout.base import RolloutRequest
from tirl.rollout.pipeline import episode_seed
from tirl.rollout.strategies import make_strategy
from tirl.testing.clock import VirtualTimeLoop
from tirl.trainer.trainer import rollout_metrics
from tirl.types import TerminationReason as TR

PLAN = FaultPlan(
    init_error=0.15,
    init_hang=0.07,
    run_error=0.08,
    run_hang=0.05,
    eval_error=0.12,
    eval_hang=0.06,
    seed=11,
    hang_s=30.0,
)


def predict(plan: FaultPlan, key: str, traj_id: str, retries: int) -> tuple[TR, int, int]:
    """Plain re-statement of the rules: (termination, init attempts, eval attempts)."""
    tries = retries + 1
    init_attempts = 0
    for a in range(1, tries + 1):
        init_attempts = a
        if plan.decide("init", key, a) is None:
            break
    else:
        return TR.INIT_FAILED, init_attempts, 0
    run = plan.decide("run", traj_id, 1)
    if run == "error":
        return TR.ERROR, init_attempts, 0
    if run == "hang":
        return TR.TIMEOUT, init_attempts, 0
    for a in range(1, tries + 1):
        if plan.decide("eval", key, a) is None:
            return TR.ANSWERED, init_attempts, a
    return TR.EVAL_FAILED, init_attempts, tries


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("retries", [0, 2])
def test_injected_faults_add_up(name: str, retries: int) -> None:
    # Virtual time: hangs cost no wall time, and a loaded machine cannot push a healthy stage
    # past its timeout, so every outcome is exactly the plan's.
    VirtualTimeLoop.run(_faults_add_up(name, retries))


async def _faults_add_up(name: str, retries: int) -> None:
    world = World()
    log = FaultLog()
    c = cfg(
        name,
        init_workers=8,
        run_workers=16,
        eval_workers=8,
        run_queue_size=8,
        eval_queue_size=8,
        init_timeout_s=5.0,
        run_timeout_s=5.0,
        eval_timeout_s=5.0,
        retries=retries,
        batch_size=50,
    )
    strategy = make_strategy(c, faulty_factory(world.factory, PLAN, log), FaultyRunner(FakeRunner(world), PLAN, log))
    step, n_tasks, g = 2, 60, 5
    request = RolloutRequest(tasks=tasks(n_tasks, turns=2), group_size=g, step=step)
    batch = await strategy.collect(request)

    # the trainer gets exactly what it asked for, in order
    assert len(batch.trajectories) == n_tasks * g
    assert [len(gr) for gr in batch.groups] == [g] * n_tasks

    expected: Counter[TR] = Counter()
    for ti, group in enumerate(batch.groups):
        for k, traj in enumerate(group.trajectories):
            key = f"task-{ti}#{episode_seed(step, ti, k)}"
            term, init_attempts, eval_attempts = predict(PLAN, key, traj.id, retries)
            expected[term] += 1
            assert traj.termination is term, traj.id
            assert traj.stages["init"].attempts == init_attempts
            assert traj.stages["eval"].attempts == eval_attempts
            assert traj.stages["run"].attempts == (0 if term is TR.INIT_FAILED else 1)
            if term is TR.ANSWERED:
                assert not traj.failed and traj.error is None and traj.reward == 1.0
            else:
                assert traj.failed and traj.error and traj.reward is None
            if term is TR.EVAL_FAILED:
                assert traj.info["run_termination"] == "answered"

    # every kind of fault really happened, so the test covers them all (with retries=2 a stage
    # fails only after three faults in a row, which is rare by design)
    kinds = [TR.ERROR, TR.TIMEOUT, TR.ANSWERED] + ([TR.INIT_FAILED, TR.EVAL_FAILED] if retries == 0 else [])
    assert all(expected[t] > 0 for t in kinds), expected
    trajs = batch.trajectories
    row = {**rollout_metrics(trajs), **batch.stats.metrics()}  # what the trainer writes for this batch
    for term, n in expected.items():
        assert row[f"rollout/termination/{term.value}"] == n
    assert sum(v for k, v in row.items() if k.startswith("rollout/termination/")) == n_tasks * g
    assert row["rollout/failed"] == n_tasks * g - expected[TR.ANSWERED]

    init_attempts = sum(t.stages["init"].attempts for t in trajs)
    eval_attempts = sum(t.stages["eval"].attempts for t in trajs)
    assert (
        row["rollout/init_attempts"]
        == init_attempts
        == sum(v for (stage, _), v in log.attempts.items() if stage == "init")
    )
    assert row["rollout/init_retries"] == init_attempts - n_tasks * g
    assert row["rollout/eval_attempts"] == eval_attempts
    evaluated = sum(t.stages["eval"].attempts > 0 for t in trajs)
    assert row["rollout/eval_retries"] == eval_attempts - evaluated
    assert row["rollout/init_timeouts"] == log.injected["init", "hang"]
    assert row["rollout/eval_timeouts"] == log.injected["eval", "hang"]
    assert row["rollout/run_timeouts"] == log.injected["run", "hang"] == expected[TR.TIMEOUT]
    assert log.injected["run", "error"] == expected[TR.ERROR]
    if retries:
        assert row["rollout/init_retries"] > 0 and row["rollout/eval_retries"] > 0

    # one env per init attempt, each closed exactly once; nothing left running
    assert log.created == init_attempts
    assert [log.closes[i] for i in range(log.created)] == [1] * log.created
    assert world.open_envs == 0
    assert pending_tasks() == []
    await strategy.close()


async def test_errors_name_the_stage_and_the_limit() -> None:
    plan = FaultPlan(init_hang=1.0, hang_s=30.0)
    world, log = World(), FaultLog()
    c = cfg("pipeline", init_timeout_s=0.01, retries=1)
    batch = await make_strategy(c, faulty_factory(world.factory, plan, log), FakeRunner(world)).collect(
        RolloutRequest(tasks=tasks(1), group_size=2)
    )
    for traj in batch.trajectories:
        assert traj.termination is TR.INIT_FAILED
        assert traj.error == "env reset timed out after 0.01s (rollout.init_timeout_s) [2 attempt(s)]"

    plan = FaultPlan(eval_error=1.0)
    world, log = World(), FaultLog()
    strategy = make_strategy(cfg("sync_batch", retries=0), faulty_factory(world.factory, plan, log), FakeRunner(world))
    batch = await strategy.collect(RolloutRequest(tasks=tasks(1), group_size=1))
    (traj,) = batch.trajectories
    assert traj.termination is TR.EVAL_FAILED
    assert traj.error is not None and traj.error.startswith("evaluation failed: InjectedFault: injected eval error")


async def test_a_close_that_raises_is_counted_not_fatal() -> None:
    world = World()

    class BadClose:
        def __init__(self, inner):
            self.inner = inner
            self.name = "bad-close"

        async def reset(self, task, *, seed=None):
            return await self.inner.reset(task, seed=seed)

        async def step(self, action):
            return await self.inner.step(action)

        async def evaluate(self):
            return await self.inner.evaluate()

        async def close(self):
            await self.inner.close()
            raise OSError("workspace busy")

    strategy = make_strategy(cfg("pipeline"), lambda task: BadClose(world.factory(task)), FakeRunner(world))
    batch = await strategy.collect(RolloutRequest(tasks=tasks(3), group_size=2))
    assert batch.stats.close_errors == 6
    assert all(t.termination is TR.ANSWERED for t in batch.trajectories)
    assert [e.closes for e in world.envs] == [1] * 6


def test_fault_plan_rejects_impossible_probabilities() -> None:
    with pytest.raises(ValueError, match="init_error"):
        FaultPlan(init_error=0.7, init_hang=0.5)
    assert FaultPlan(run_error=1.0).decide("run", "x", 3) == "error"
    assert FaultPlan(run_hang=1.0).decide("run", "x", 3) == "hang"


async def test_a_factory_that_raises_is_init_failed_and_named() -> None:
    world = World()
    calls = []

    def factory(task):
        calls.append(task.id)
        raise OSError("no space left for the workspace")

    strategy = make_strategy(cfg("async_batch", retries=1), factory, FakeRunner(world))
    batch = await strategy.collect(RolloutRequest(tasks=tasks(2), group_size=1))
    for traj in batch.trajectories:
        assert traj.termination is TR.INIT_FAILED
        assert traj.error == "env factory failed: OSError: no space left for the workspace [2 attempt(s)]"
    assert len(calls) == 4 and batch.stats.stages["init"].retries == 2
