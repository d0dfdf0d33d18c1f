"""A run cut by ``rollout.run_timeout_s`` while the episode's own commands ran is the episode's, not infrastructure.

The attack: a turn of many code blocks, each running to the sandbox's timeout, so that the turn alone outlasts
``rollout.run_timeout_s``. The pipeline ended such an episode ``timeout``, an infrastructure failure left out of
the update: a policy about to fail could leave its trajectory out (DESIGN.md: a failure the episode causes, a
timeout among them, is its reward 0). A run cut while the *generator* was slow stays ``timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tirl.config import RolloutConfig
from tirl.envs.base import Task
from tirl.envs.tir_math import TirMathEnv
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tokenizer import build_char_tokenizer
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.sandbox import WarmPool
from tirl.sandbox.bwrap import bwrap_problem
from tirl.sft import ScriptedGenerator
from tirl.types import TerminationReason, Trajectory

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap unusable: {bwrap_problem()}")

TASK = Task(id="t", prompt="What is 6*7?", answer="42")
STALL = "\n".join("```python\nwhile True:\n    pass\n```" for _ in range(12))  # 12 blocks x 0.4 s > the 1.5 s run


@pytest.fixture
async def pool() -> AsyncIterator[WarmPool]:
    sb = WarmPool(isolate=True, size=1, timeout_s=0.4)
    await sb.run("pass")  # started here: a server's start-up is not in the runs timed below
    yield sb
    await sb.close()


class SlowGenerator(ScriptedGenerator):
    """Takes ``delay_s`` to sample each scripted turn (a slow or stuck generator: infrastructure)."""

    def __init__(self, chat: SimpleChatFormat, contents: list[str], delay_s: float) -> None:
        super().__init__(chat, contents)
        self.delay_s = delay_s

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        await asyncio.sleep(self.delay_s)
        return await super().generate(prompt_ids, params)


async def _episode(pool: WarmPool, turns: list[str], delay_s: float = 0.0) -> Trajectory:
    chat = SimpleChatFormat(build_char_tokenizer())
    loop = AgentLoop(SlowGenerator(chat, turns, delay_s), chat, max_turns=4, max_total_tokens=20_000)
    loop.params = SamplingParams(max_new_tokens=5000)
    cfg = RolloutConfig(strategy="pipeline", retries=0, run_timeout_s=1.5)
    strategy = make_strategy(cfg, lambda task: TirMathEnv(sandbox=pool, max_turns=4), loop)
    try:
        batch = await strategy.collect(RolloutRequest(tasks=[TASK], group_size=1))
    finally:
        await strategy.close()
    return batch.trajectories[0]


async def test_a_turn_whose_own_commands_outlast_the_run_is_the_episodes_reward_0(pool: WarmPool) -> None:
    traj = await _episode(pool, [STALL, "\\boxed{42}"])
    assert traj.termination is TerminationReason.TOOL_TIMEOUT, (traj.termination, traj.error)
    assert not traj.failed
    assert traj.reward == 0.0 and traj.correct is False
    assert traj.info["run_timeout"]["tool_s"] >= 0.75


async def test_a_run_cut_while_the_generator_was_slow_stays_an_infrastructure_timeout(pool: WarmPool) -> None:
    """Two quick code turns, then the third turn's generation is in flight when the run is cut."""
    traj = await _episode(pool, ["```python\nprint(6*7)\n```"] * 3 + ["\\boxed{42}"], delay_s=0.6)
    assert len(traj.turns) == 2 and all(t.env_s > 0 for t in traj.turns), traj.turns
    assert traj.termination is TerminationReason.TIMEOUT
    assert traj.failed and traj.reward is None
