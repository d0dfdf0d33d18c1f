"""Task environments: the async Env contract, the ToolEnv base, a registry, a conformance checker, two built-ins.

Public API::

    from tirl.envs import (
        Env, Task, StepResult, EvalResult, EnvError, EpisodeOverError,      # contract (base.py)
        register_env, make_env, env_factory, load_tasks, list_envs,         # registry.py
        ToolEnv,                                                            # tool_env.py (the base class)
        check_env, EnvCheckError,                                           # check.py
        expert_solution,                                                    # by task.kind
    )
    from tirl.envs.tir_math import TirMathEnv, generate_tasks, load_math_tasks, expert_solution
    from tirl.envs.swe_lite import SweLiteEnv, generate_swe_tasks, load_swe_tasks, expert_solution
"""

from typing import TYPE_CHECKING, Any

from tirl.envs.base import Env, EnvError, EpisodeOverError, EvalResult, StepResult, Task
from tirl.envs.check import CheckReport, EnvCheckError, check_env
from tirl.envs.registry import env_factory, list_envs, load_tasks, make_env, register_env, unregister_env

if TYPE_CHECKING:
    from tirl.envs.tool_env import ToolEnv


def __getattr__(name: str) -> Any:
    """``ToolEnv`` on first use: it imports the sandbox (and asyncio), which ``tirl filter`` never needs."""
    if name == "ToolEnv":
        from tirl.envs.tool_env import ToolEnv

        return ToolEnv
    raise AttributeError(f"module 'tirl.envs' has no attribute {name!r}")


def expert_solution(task: Task) -> list[str]:
    """Scripted assistant turns that solve a generated task of either built-in env (by ``task.kind``)."""
    if task.kind == "swe-lite":
        from tirl.envs.tasks.swe_gen import expert_solution as swe

        return swe(task)
    if task.kind == "tir-math":
        from tirl.envs.tasks.math_gen import expert_solution as math

        return math(task)
    raise ValueError(f"no scripted solution for task kind {task.kind!r} (tir-math and swe-lite have one)")


__all__ = [
    "CheckReport",
    "Env",
    "EnvCheckError",
    "EnvError",
    "EpisodeOverError",
    "EvalResult",
    "StepResult",
    "Task",
    "ToolEnv",
    "check_env",
    "env_factory",
    "expert_solution",
    "list_envs",
    "load_tasks",
    "make_env",
    "register_env",
    "unregister_env",
]
