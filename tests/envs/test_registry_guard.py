"""Registry by name and import string; failing envs give flagged results through the rollout stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirl.config import EnvConfig, load_config
from tirl.envs import (
    Env,
    EvalResult,
    StepResult,
    Task,
    env_factory,
    list_envs,
    load_tasks,
    make_env,
    register_env,
    unregister_env,
)
from tirl.envs.check import EnvCheckError, check_env
from tirl.envs.swe_lite import SweLiteEnv
from tirl.envs.tir_math import TirMathEnv
from tirl.errors import ConfigError
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import Message, Role, TerminationReason


def test_builtins_are_registered(sandbox: Sandbox) -> None:
    assert {"tir-math", "swe-lite"} <= set(list_envs())
    env = make_env("tir-math", sandbox=sandbox, config=EnvConfig(max_turns=7))
    assert isinstance(env, TirMathEnv) and isinstance(env, Env) and env.max_turns == 7
    assert isinstance(make_env("swe-lite", sandbox=sandbox), SweLiteEnv)
    # explicit keyword beats the config
    assert make_env("tir-math", sandbox=sandbox, config=EnvConfig(max_turns=7), max_turns=2).max_turns == 2  # type: ignore[attr-defined]


def test_register_by_callable_and_by_import_string(sandbox: Sandbox) -> None:
    register_env("my-math", TirMathEnv)
    register_env("my-math-str", "tirl.envs.tir_math:TirMathEnv")
    try:
        assert isinstance(make_env("my-math", sandbox=sandbox), TirMathEnv)
        assert isinstance(make_env("my-math-str", sandbox=sandbox), TirMathEnv)
        with pytest.raises(ValueError, match="already registered"):
            register_env("my-math", TirMathEnv)
        register_env("my-math", SweLiteEnv, override=True)
        assert isinstance(make_env("my-math", sandbox=sandbox), SweLiteEnv)
    finally:
        unregister_env("my-math")
        unregister_env("my-math-str")
    # an unregistered import string works directly
    assert isinstance(make_env("tirl.envs.swe_lite:SweLiteEnv", sandbox=sandbox), SweLiteEnv)


def test_registry_errors_say_how_to_fix() -> None:
    with pytest.raises(ConfigError, match=r"unknown environment 'nope'.*register_env"):
        make_env("nope")
    with pytest.raises(ConfigError, match="cannot import module") as err:
        make_env("no_such_pkg.mod:Env")
    assert "PYTHONPATH" in str(err.value)  # a user's module beside them: the `tirl` script does not look there
    with pytest.raises(ConfigError, match="has no 'Missing'"):
        make_env("tirl.envs.tir_math:Missing")
    with pytest.raises(ValueError, match=r"package\.module:Name"):
        register_env("bad", "not-an-import-string")
    register_env("not-env", "builtins:dict")
    try:
        with pytest.raises(ConfigError, match="lacks the Env methods"):
            make_env("not-env")
    finally:
        unregister_env("not-env")


def test_env_factory_makes_fresh_envs(sandbox: Sandbox) -> None:
    factory = env_factory("tir-math", sandbox=sandbox)
    task = Task(id="a", prompt="p", answer="1")
    a, b = factory(task), factory(task)
    assert a is not b and isinstance(a, TirMathEnv)
    with pytest.raises(ConfigError):
        env_factory("missing.module:X")


def test_load_tasks_from_config(tmp_path: Path) -> None:
    cfg = load_config(None, ["env.name=tir-math", "env.difficulty=2", "env.seed=4"]).env
    tasks = load_tasks(cfg, 5)
    assert len(tasks) == 5 and all(t.data["difficulty"] == 2 for t in tasks)
    assert tasks == load_tasks(cfg, 5)
    f = tmp_path / "m.jsonl"
    f.write_text('{"question": "1+1?", "answer": 2}\n{"question": "2+2?", "answer": 4}\n')
    from_file = load_tasks(EnvConfig(tasks_file=str(f)), 10)
    assert [t.answer for t in from_file] == ["2", "4"]
    swe = load_tasks(EnvConfig(name="swe-lite"), 3, seed=1)
    assert len(swe) == 3 and all(t.kind == "swe-lite" for t in swe)


class ExplodingEnv:
    """Raises from every method, as a broken environment would."""

    name = "exploding"

    def __init__(self, where: str) -> None:
        self.where = where

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        if self.where == "reset":
            raise RuntimeError("image pull failed")
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        if self.where == "step":
            raise KeyError("workspace vanished")
        return StepResult([], terminated=True, reason=TerminationReason.ANSWERED)

    async def evaluate(self) -> EvalResult:
        if self.where == "evaluate":
            raise TimeoutError("tests hung")
        return EvalResult(1.0, True)

    async def close(self) -> None:
        if self.where == "close":
            raise OSError("busy")


TASK = Task(id="x", prompt="p", answer="1")


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("reset", TerminationReason.INIT_FAILED),
        ("step", TerminationReason.ERROR),
        ("evaluate", TerminationReason.EVAL_FAILED),
        ("none", TerminationReason.ANSWERED),
    ],
)
async def test_scripted_episode_keeps_failures_counted(where: str, reason: TerminationReason) -> None:
    result = await play(ExplodingEnv(where), TASK, ["\\boxed{1}"])
    assert result.reason is reason
    assert (result.error is not None) == (where != "none")
    assert result.reason.is_failure == (where != "none")


async def test_check_env_rejects_a_broken_env() -> None:
    with pytest.raises(EnvCheckError, match=r"\[role\]"):
        await check_env(lambda: ExplodingEnv("none"), TASK)  # accepts a user-role action


class NoVoidEnv(ExplodingEnv):
    async def step(self, action: Message) -> StepResult:
        if action.role is not Role.ASSISTANT:
            raise ValueError("assistant only")
        return StepResult([], terminated=True, reason=TerminationReason.ANSWERED)


async def test_check_env_catches_a_missed_void_turn() -> None:
    with pytest.raises(EnvCheckError, match=r"\[void\]"):
        await check_env(lambda: NoVoidEnv("none"), TASK)


def test_expert_solution_dispatch() -> None:
    from tirl.envs import expert_solution
    from tirl.envs.swe_lite import generate_swe_tasks
    from tirl.envs.tir_math import generate_tasks

    assert expert_solution(generate_tasks(1)[0])[-1].startswith("\\boxed{")
    assert expert_solution(generate_swe_tasks(1)[0])[-1] == "```bash\nsubmit\n```"
    with pytest.raises(ValueError, match="no scripted solution"):
        expert_solution(Task(id="z", prompt="p", kind="other"))
