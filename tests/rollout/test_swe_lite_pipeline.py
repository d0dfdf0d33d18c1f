"""The strategies on the real swe-lite env (real workspaces, real sandbox, hidden pytest) with a scripted runner."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollout_fakes import cfg, pending_tasks

from tirl.config import SandboxConfig
from tirl.envs.base import Env, Task
from tirl.envs.registry import env_factory
from tirl.envs.swe_lite import expert_solution, generate_swe_tasks
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.sandbox import create_sandbox
from tirl.sandbox.base import Sandbox
from tirl.types import Message, Role, TerminationReason, Trajectory

TASKS = generate_swe_tasks(2, seed=0)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sb = create_sandbox(SandboxConfig(warm_pool=False, timeout_s=20.0), warn=False)
    yield sb


@pytest.fixture
def work_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tirl-rollout-test-", dir="/tmp"))
    os.chmod(root, 0o755)  # the bubblewrap sandbox runs as an unprivileged uid
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def scripted(env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
    """Sample 0 of each group applies the expert fix; the others submit without fixing."""
    traj.messages = list(initial)
    turns = expert_solution(task) if traj.id.endswith("-g0") else [expert_solution(task)[-1]]
    for text in turns:
        action = Message(role=Role.ASSISTANT, content=text)
        result = await env.step(action)
        traj.messages += [action, *result.observation]
        if result.terminated or result.truncated:
            traj.termination = result.reason or TerminationReason.SUBMITTED
            return
    traj.termination = TerminationReason.MAX_TURNS


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pipeline"])
async def test_real_env_rewards_and_no_workspace_left(name: str, sandbox: Sandbox, work_root: Path, tmp_path) -> None:
    factory = env_factory("swe-lite", sandbox=sandbox, work_root=work_root, cache_dir=tmp_path / "cache", max_turns=4)
    strategy = make_strategy(cfg(name, init_timeout_s=60, run_timeout_s=120, eval_timeout_s=120), factory, scripted)
    batch = await strategy.collect(RolloutRequest(tasks=TASKS, group_size=2, step=5))
    await strategy.close()
    for group in batch.groups:
        fixed, unfixed = group.trajectories
        assert fixed.termination is TerminationReason.SUBMITTED and fixed.reward == 1.0, fixed.error
        assert unfixed.termination is TerminationReason.SUBMITTED and unfixed.reward == 0.0, unfixed.error
        assert fixed.correct is True and unfixed.correct is False
    assert not any(t.failed for t in batch.trajectories)
    assert list(work_root.iterdir()) == []  # every workspace was removed by env.close()


@pytest.mark.slow
async def test_cancel_mid_collect_removes_every_workspace(sandbox: Sandbox, work_root: Path, tmp_path) -> None:
    factory = env_factory("swe-lite", sandbox=sandbox, work_root=work_root, cache_dir=tmp_path / "cache", max_turns=4)

    async def slow(env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        await env.step(Message(role=Role.ASSISTANT, content="```bash\nls\n```"))
        await asyncio.sleep(30)

    strategy = make_strategy(cfg("pipeline"), factory, slow)
    task = asyncio.create_task(strategy.collect(RolloutRequest(tasks=TASKS, group_size=3)))
    for _ in range(600):
        if len(list(work_root.iterdir())) >= 3:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("no workspace was ever provisioned")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert list(work_root.iterdir()) == []
    assert pending_tasks() == []
