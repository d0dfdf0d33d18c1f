"""``check_env`` refuses an ``info`` the trainer could not store as written: NaN/inf, a set, an object.

A NaN or infinite number in ``step``'s or ``evaluate``'s ``info`` passed the checker (``json.dumps`` writes
``NaN``), though a run stores it as ``null`` (:func:`tirl.envs.base.checked_result`): the metric an env author
kept there vanished without a word. The checker now applies the runtime's rule (:func:`tirl.jsonl.json_value`),
so numpy values, which the run converts, pass where ``json.dumps`` refused them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tirl.envs import EvalResult, StepResult, Task, check_env
from tirl.envs.base import checked_result
from tirl.envs.check import EnvCheckError
from tirl.types import Message, Role, TerminationReason

TASK = Task(id="x", prompt="p", answer="1")


class InfoEnv:
    """A conforming one-turn env whose ``step`` and ``evaluate`` return the ``info`` given."""

    name = "info"

    def __init__(self, step_info: Any, eval_info: Any) -> None:
        self.step_info, self.eval_info, self.ended = step_info, eval_info, False

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        if action.role is not Role.ASSISTANT:
            raise ValueError("assistant only")
        if self.ended:
            raise RuntimeError("the episode is over")
        self.ended = True  # every turn of this env is void: it has no tools and no answer
        return StepResult([], terminated=True, reason=TerminationReason.VOID, info=self.step_info)

    async def evaluate(self) -> EvalResult:
        return EvalResult(0.0, False, info=self.eval_info)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("step_info", "eval_info", "line"),
    [
        ({}, {"ratio": math.nan}, "check_env [evaluate]: evaluate returned info.ratio, which is NaN — store a finite"),
        ({"scores": [1.0, math.inf]}, {}, "check_env [void]: step returned info.scores[1], which is Infinity — "),
        ({}, {"m": {"x": np.float32("-inf")}}, "evaluate returned info.m.x, which is -Infinity — store a finite"),
        ({}, {"tests": {"a", "b"}}, "evaluate returned info.tests, which is a set — store numbers, text, lists"),
        ({"n": 3}, ["not", "a", "dict"], "check_env [evaluate]: evaluate returned info of type list, not a dict"),
    ],
)
async def test_an_info_the_run_would_not_store_as_written_is_one_line_naming_function_and_key(
    step_info: Any, eval_info: Any, line: str
) -> None:
    with pytest.raises(EnvCheckError) as exc:
        await check_env(lambda: InfoEnv(step_info, eval_info), TASK)
    assert line in str(exc.value) and "\n" not in str(exc.value)


async def test_the_nan_the_checker_reports_is_what_a_run_would_store_as_null() -> None:
    assert checked_result(EvalResult(0.0, False, {"ratio": math.nan}), "f").info == {"ratio": None}


async def test_numpy_values_a_run_converts_pass_and_finite_info_passes() -> None:
    info = {"n": np.int64(3), "xs": np.arange(3), "r": 0.5, "none": None, "nested": [{"k": "v"}]}
    report = await check_env(lambda: InfoEnv(info, info), TASK)
    checks = ["protocol", "reset", "role", "void", "results", "after_end", "evaluate", "close", "nonblocking"]
    assert report.passed == checks
