"""tir-chain: the generator, the expert scripts through the real env and sandbox, check_env, the registry."""

from __future__ import annotations

import hashlib

from tirl.config import EnvConfig
from tirl.envs import check_env
from tirl.envs.registry import load_tasks
from tirl.envs.tasks.chain_gen import (
    MAX_CALLS,
    MIN_CALLS,
    STOP_BELOW,
    chain_expert_solution,
    chain_values,
    generate_chain_tasks,
)
from tirl.envs.tir_math import TirMathEnv
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import Role, TerminationReason


def test_generator_is_deterministic_and_every_chain_stops_after_2_to_4_calls() -> None:
    tasks = generate_chain_tasks(300, seed=3)
    assert [t.prompt for t in tasks] == [t.prompt for t in generate_chain_tasks(300, seed=3)]
    assert [t.prompt for t in tasks] != [t.prompt for t in generate_chain_tasks(300, seed=4)]
    lengths = set()
    for t in tasks:
        x0, a, m, values = t.data["x0"], t.data["a"], t.data["m"], t.data["values"]
        assert t.prompt == f"x={x0}. Repeat x=x*{a}%{m} until x<{STOP_BELOW}."
        assert x0 >= STOP_BELOW
        x, seen = x0, []
        for _ in range(MAX_CALLS):  # plain recomputation, independent of chain_values
            x = x * a % m
            seen.append(x)
            if x < STOP_BELOW:
                break
        assert seen == values == chain_values(x0, a, m)
        assert all(v >= STOP_BELOW for v in values[:-1]) and values[-1] < STOP_BELOW
        assert t.answer == str(values[-1])
        lengths.add(len(values))
    assert lengths == set(range(MIN_CALLS, MAX_CALLS + 1))


def test_sft_and_evaluation_draws_differ() -> None:
    from tirl.envs.seeds import eval_seed
    from tirl.sft import sft_eval_seed, sft_task_seed

    draws = [{t.prompt for t in generate_chain_tasks(200, seed=s)} for s in (eval_seed(0), eval_seed(1))]
    draws += [{t.prompt for t in generate_chain_tasks(200, seed=s)} for s in (sft_task_seed(0), sft_eval_seed(0))]
    for i, a in enumerate(draws):
        for b in draws[i + 1 :]:
            assert len(a & b) <= 2  # held-out (env.seed 0), validation (env.seed 1) and SFT draws are distinct


async def test_check_env_passes_on_a_chain_task(sandbox: Sandbox) -> None:
    task = generate_chain_tasks(1, seed=0)[0]
    report = await check_env(
        lambda: TirMathEnv(sandbox=sandbox, max_turns=6),
        task,
        solution=chain_expert_solution(task),
        idle=f"```python\nprint({task.data['x0']})\n```",
    )
    assert {"protocol", "reset", "void", "after_end", "evaluate", "close", "solution", "limit"} <= set(report.passed)


def _variant(task_id: str) -> int:
    return int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 6


async def test_expert_scripts_solve_chains_through_the_real_sandbox(sandbox: Sandbox) -> None:
    tasks = generate_chain_tasks(40, seed=5)
    picked = [t for t in tasks if _variant(t.id) == 0][:2] + [t for t in tasks if _variant(t.id) == 1][:2]
    picked += [t for t in tasks if _variant(t.id) > 1][:4]
    kinds = set()
    for task in picked:
        script = chain_expert_solution(task)
        assert 3 <= len(script) <= 6
        result = await play(TirMathEnv(sandbox=sandbox, max_turns=6), task, script)
        assert result.reason is TerminationReason.ANSWERED, (task, result)
        assert result.correct and result.reward == 1.0
        tool = [m.content or "" for m in result.messages if m.role is Role.TOOL]
        shown = [s.removeprefix("```output\n").removesuffix("\n```") for s in tool]
        numbers = [s for s in shown if s.isdigit()]
        assert numbers == [str(v) for v in task.data["values"]]  # each call's input was the real previous output
        v = _variant(task.id)
        if v == 0:
            assert any("NameError" in s and "prnt" in s for s in shown), shown
            kinds.add("traceback")
        elif v == 1:
            assert "[no output]" in shown
            kinds.add("no output")
    assert kinds == {"traceback", "no output"}


def test_registered_as_tir_chain() -> None:
    tasks = load_tasks(EnvConfig(name="tir-chain", eval_size=5), seed=9)
    assert [t.prompt for t in tasks] == [t.prompt for t in generate_chain_tasks(5, seed=9)]
    assert all(t.kind == "tir-chain" for t in tasks)
