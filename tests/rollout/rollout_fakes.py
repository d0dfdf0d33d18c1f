"""Fake envs and runners for the rollout strategy tests (real asyncio, tiny sleeps)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tirl.config import RolloutConfig
from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.rollout.trace import BusyMeter
from tirl.types import Message, Role, TerminationReason, Trajectory


@dataclass
class World:
    """Everything the fakes record: concurrency high-water marks, calls and closes."""

    envs: list[FakeEnv] = field(default_factory=list)
    active: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    open_envs: int = 0
    peak_open: int = 0
    events: list[tuple[str, str]] = field(default_factory=list)  # (stage:phase, key)
    meter: BusyMeter = field(default_factory=BusyMeter)

    def enter(self, stage: str) -> None:
        self.active[stage] += 1
        self.peak[stage] = max(self.peak[stage], self.active[stage])

    def leave(self, stage: str) -> None:
        self.active[stage] -= 1

    def factory(self, task: Task) -> Env:
        env = FakeEnv(self, task)
        self.envs.append(env)
        return env


class FakeEnv:
    """Sleeps ``task.data['init_s'/'step_s'/'eval_s']``; the reward is ``task.data['reward']``."""

    name = "fake"

    def __init__(self, world: World, task: Task) -> None:
        self.world = world
        self.task = task
        self.key = ""
        self.closes = 0
        self.steps = 0
        world.open_envs += 1
        world.peak_open = max(world.peak_open, world.open_envs)

    def _d(self, key: str) -> float:
        return float(self.task.data.get(key, 0.0))

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        self.key = f"{task.id}#{seed}"
        self.world.enter("init")
        self.world.events.append(("init:start", self.key))
        try:
            await asyncio.sleep(self._d("init_s"))
        finally:
            self.world.leave("init")
        self.world.events.append(("init:end", self.key))
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        self.steps += 1
        await asyncio.sleep(self._d("step_s"))
        return StepResult(observation=[Message(role=Role.TOOL, content="ok")])

    async def evaluate(self) -> EvalResult:
        self.world.enter("eval")
        self.world.events.append(("eval:start", self.key))
        try:
            await asyncio.sleep(self._d("eval_s"))
        finally:
            self.world.leave("eval")
        reward = float(self.task.data.get("reward", 1.0))
        return EvalResult(reward=reward, correct=reward > 0, info={"steps": self.steps})

    async def close(self) -> None:
        self.closes += 1
        self.world.open_envs -= 1
        await asyncio.sleep(0)


class FakeRunner:
    """``task.data['turns']`` turns of (generation sleep under the busy meter, env.step)."""

    def __init__(self, world: World, gen_s: float = 0.0) -> None:
        self.world = world
        self.gen_s = gen_s

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        self.world.enter("run")
        self.world.events.append(("run:start", traj.id))
        try:
            traj.messages = list(initial)
            for _ in range(int(task.data.get("turns", 1))):
                with self.world.meter.busy():
                    await asyncio.sleep(self.gen_s)
                action = Message(role=Role.ASSISTANT, content="```python\nprint(1)\n```")
                result = await env.step(action)
                traj.messages += [action, *result.observation]
            traj.termination = TerminationReason.ANSWERED
        finally:
            self.world.leave("run")
        self.world.events.append(("run:end", traj.id))


def tasks(n: int, **data: Any) -> list[Task]:
    return [Task(id=f"task-{i}", prompt=f"p{i}", answer=str(i), data=dict(data)) for i in range(n)]


def cfg(strategy: str = "pipeline", **kw: Any) -> RolloutConfig:
    base: dict[str, Any] = {
        "strategy": strategy,
        "init_workers": 3,
        "run_workers": 4,
        "eval_workers": 2,
        "run_queue_size": 2,
        "eval_queue_size": 2,
        "trace_interval_s": 0.01,
        "init_timeout_s": 5.0,
        "run_timeout_s": 5.0,
        "eval_timeout_s": 5.0,
        "retries": 1,
    }
    base.update(kw)
    return RolloutConfig(**base)


def pending_tasks() -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not current and not t.done()]


STRATEGIES = ("sync_batch", "async_batch", "pipeline")
