"""ToolEnv owns the lifecycle: a subclass writes act/score only, and every built-in gets the same call order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tirl.envs import ToolEnv, check_env
from tirl.envs.base import EpisodeOverError, EvalResult, Task
from tirl.envs.swe_lite import SweLiteEnv, generate_swe_tasks
from tirl.envs.tir_math import TirMathEnv
from tirl.parsing import TurnVerdict
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import Message, Role, TerminationReason


class CountEnv(ToolEnv):
    """Counts the executable blocks it is shown; the answer must equal that count. No sandbox use."""

    name = "count"

    def __init__(self, **kw: Any) -> None:
        super().__init__(sandbox=object(), **kw)  # type: ignore[arg-type]  # borrowed, never used
        self.blocks = 0

    async def act(self, verdict: TurnVerdict, info: dict[str, Any]) -> tuple[list[Message], bool]:
        self.blocks += len(verdict.code)
        return [Message(role=Role.TOOL, content=str(self.blocks))], False

    async def score(self, task: Task) -> EvalResult:
        ok = self.answer == str(self.blocks)
        return EvalResult(reward=float(ok), correct=ok, info={"blocks": self.blocks})


CODE = "```python\nprint(1)\n```"
TASK = Task(id="c", prompt="count", answer="2")


async def test_a_subclass_that_writes_only_act_and_score_passes_check_env() -> None:
    report = await check_env(lambda: CountEnv(max_turns=3), TASK, solution=[CODE, CODE, "\\boxed{2}"], idle=CODE)
    assert {"protocol", "reset", "void", "after_end", "evaluate", "close", "solution", "limit"} <= set(report.passed)


async def test_the_base_adds_reason_turns_and_limits() -> None:
    result = await play(CountEnv(max_turns=2), TASK, [CODE, CODE, "\\boxed{2}"])
    assert result.reason is TerminationReason.MAX_TURNS and result.steps == 2
    assert result.info["reason"] == "max_turns" and result.info["turns"] == 2 and "init_s" in result.info
    long = await play(CountEnv(max_action_chars=5), TASK, [CODE])
    assert long.reason is TerminationReason.OVERLONG and long.info["blocks"] == 0  # nothing ran


def _builtins(sandbox: Sandbox, swe_cache: Path, work_root: Path) -> list[tuple[Callable[[], ToolEnv], Task]]:
    return [
        (lambda: TirMathEnv(sandbox=sandbox), Task(id="m", prompt="1+1?", answer="2")),
        (lambda: SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=work_root), generate_swe_tasks(1)[0]),
    ]


async def test_every_builtin_enforces_the_same_call_order(sandbox: Sandbox, swe_cache: Path, work_root: Path) -> None:
    for make, task in _builtins(sandbox, swe_cache, work_root):
        env = make()
        with pytest.raises(EpisodeOverError):
            await env.step(Message(role=Role.ASSISTANT, content="\\boxed{1}"))  # before reset
        with pytest.raises(EpisodeOverError):
            await env.evaluate()  # before reset
        await env.reset(task)
        with pytest.raises(EpisodeOverError):
            await env.reset(task)  # one episode per instance
        await env.close()
        with pytest.raises(EpisodeOverError):
            await env.step(Message(role=Role.ASSISTANT, content="\\boxed{1}"))  # after close
        with pytest.raises(EpisodeOverError):
            await env.evaluate()  # after close
        await env.close()  # idempotent


async def test_the_filter_rules_reach_toolenv_builtins_through_the_registry(sandbox: Sandbox) -> None:
    from tirl.config import FilterConfig
    from tirl.envs import env_factory
    from tirl.filters import rules_from_config

    rules = rules_from_config(FilterConfig(exec_langs=["python"]))
    env = env_factory("tir-math", sandbox=sandbox, rules=rules)(TASK)
    assert isinstance(env, TirMathEnv) and env.rules is rules
    await env.reset(Task(id="m", prompt="1+1?", answer="2"))
    result = await env.step(Message(role=Role.ASSISTANT, content="```bash\necho 2\n```"))
    assert result.reason is TerminationReason.VOID  # bash is not an action under these rules: the env agrees
    await env.close()


def test_an_unknown_option_is_a_type_error_not_ignored() -> None:
    with pytest.raises(TypeError, match="max_turn"):
        TirMathEnv(max_turn=3)  # type: ignore[call-arg]
