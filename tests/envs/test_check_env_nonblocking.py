"""check_env's ``nonblocking`` check: a call that holds the event loop past HOLD_LIMIT_S is refused."""

from __future__ import annotations

import time

import pytest

from tirl.envs.base import EvalResult, Task
from tirl.envs.check import HOLD_LIMIT_S, EnvCheckError, check_env
from tirl.envs.tir_math import TirMathEnv
from tirl.sandbox import Sandbox


class BlockingMathEnv(TirMathEnv):
    async def evaluate(self) -> EvalResult:
        time.sleep(HOLD_LIMIT_S + 0.3)
        return await super().evaluate()


async def test_check_env_refuses_a_call_that_holds_the_loop(sandbox: Sandbox) -> None:
    task = Task(id="t", prompt="What is 2+2?", answer="4")
    report = await check_env(lambda: TirMathEnv(sandbox=sandbox), task)
    assert "nonblocking" in report.passed
    with pytest.raises(EnvCheckError, match=r"\[nonblocking\]: evaluate held the event loop for 1\.\d s"):
        await check_env(lambda: BlockingMathEnv(sandbox=sandbox), task)
