"""A real verifiers ToolEnv (local ``add`` tool, no network) as a tirl env: check_env, tools, stops, training."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers")

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))  # verifiers_calc, the example verifiers env

from tirl.cli import main
from tirl.config import EnvConfig
from tirl.envs import check_env, env_factory, load_tasks, register_env, unregister_env
from tirl.integrations.verifiers_env import VerifiersEnv
from tirl.types import Message, Role, TerminationReason, ToolCall

NAME = "verifiers:verifiers_calc:load_environment"


def _task(i: int = 0) -> Any:
    return load_tasks(EnvConfig(name=NAME), 8)[i]


def _call(name: str, args: Any, call_id: str = "c1", content: str = "") -> Message:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return Message(
        role=Role.ASSISTANT, content=content, tool_calls=(ToolCall(name=name, arguments=arguments, id=call_id),)
    )


def _operands(task: Any) -> tuple[int, int]:
    a, b = task.prompt.removeprefix("What is ").split("?")[0].split(" + ")
    return int(a), int(b)


async def test_the_verifiers_tool_env_passes_check_env() -> None:
    task = _task()
    factory = env_factory(NAME, config=EnvConfig(name=NAME, max_turns=3))
    report = await check_env(lambda: factory(task), task, solution=[f"It is \\boxed{{{task.answer}}}"])
    assert {"protocol", "reset", "void", "after_end", "evaluate", "close", "solution"} <= set(report.passed)


async def test_a_tool_call_runs_the_local_tool_and_the_rubric_scores() -> None:
    task = _task(1)
    a, b = _operands(task)
    env = env_factory(NAME, config=EnvConfig(name=NAME))(task)
    first = await env.reset(task)
    assert [m.role for m in first] == [Role.SYSTEM, Role.USER]
    assert [t["function"]["name"] for t in env.tools] == ["add"]  # offered to the model through the chat template
    called = await env.step(_call("add", {"a": a, "b": b}, call_id="call_7"))
    assert not (called.terminated or called.truncated)
    assert [(m.role, m.content, m.tool_call_id) for m in called.observation] == [(Role.TOOL, str(a + b), "call_7")]
    done = await env.step(Message(role=Role.ASSISTANT, content=f"\\boxed{{{a + b}}}"))
    assert done.terminated and done.reason is TerminationReason.ANSWERED
    result = await env.evaluate()
    assert result.reward == 1.0 and result.correct
    assert result.info["metrics"]["add_calls"] == 1.0 and result.info["stop_condition"] == "no_tools_called"
    await env.close()


async def test_stop_conditions_map_to_termination_reasons() -> None:
    task = _task(2)
    wrong = env_factory(NAME, config=EnvConfig(name=NAME))(task)
    await wrong.reset(task)
    end = await wrong.step(Message(role=Role.ASSISTANT, content="\\boxed{0}"))
    assert end.reason is TerminationReason.ANSWERED and (await wrong.evaluate()).reward == 0.0
    looping = env_factory(NAME, config=EnvConfig(name=NAME, max_turns=10))(task)
    await looping.reset(task)
    results = [await looping.step(_call("add", {"a": 1, "b": 1}, call_id=f"c{i}")) for i in range(3)]
    assert results[-1].truncated and results[-1].reason is TerminationReason.MAX_TURNS  # verifiers' max_turns=3
    assert (await looping.evaluate()).info["stop_condition"] == "max_turns_reached"
    unknown = env_factory(NAME, config=EnvConfig(name=NAME))(task)
    await unknown.reset(task)
    step = await unknown.step(_call("mul", {"a": 1}, call_id="c9"))  # a failing tool is a message to the model
    assert step.observation[0].tool_call_id == "c9" and "mul" in (step.observation[0].content or "")
    for env in (wrong, looping, unknown):
        await env.close()


async def test_a_void_turn_stops_the_verifiers_rollout_and_still_scores() -> None:
    task = _task(3)
    env = env_factory(NAME, config=EnvConfig(name=NAME))(task)
    await env.reset(task)
    a, b = _operands(task)
    await env.step(_call("add", {"a": a, "b": b}))
    void = await env.step(Message(role=Role.ASSISTANT, content="```python\nprint(1)\n```"))  # code is not run here
    assert void.terminated and void.reason is TerminationReason.VOID
    result = await env.evaluate()
    assert result.reward == 0.0 and result.info["metrics"]["add_calls"] == 1.0
    await env.close()


async def test_a_reward_function_that_returns_nan_scores_the_episode_0_and_is_named(monkeypatch: Any) -> None:
    """The rubric's weighted sum was NaN, stored as the reward (and written as ``NaN`` into trajectories.jsonl)."""
    import verifiers as vf
    from verifiers_calc import boxed_sum, load_environment

    from tirl.integrations import verifiers_env

    def relative_error(completion: Any, answer: str, **_: Any) -> float:
        return float("nan")  # e.g. abs(pred - truth) / truth of a pred the model wrote as "nan"

    calc = load_environment()
    vf_env = vf.ToolEnv(tools=[calc.tools[0]], dataset=calc.dataset, system_prompt=calc.system_prompt,
                        rubric=vf.Rubric(funcs=[boxed_sum, relative_error]), max_turns=3)  # fmt: skip
    monkeypatch.setitem(verifiers_env._LOADED, "nan-test", vf_env)
    task = _task(0)
    env = VerifiersEnv(variant="nan-test", offer_tools=False)
    await env.reset(task)
    await env.step(Message(role=Role.ASSISTANT, content=f"\\boxed{{{task.answer}}}"))
    result = await env.evaluate()
    await env.close()
    assert result.reward == 0.0 and not result.correct
    metrics = result.info["metrics"]
    assert metrics["boxed_sum"] == 1.0 and metrics["relative_error"] is None  # null in the line, not NaN
    assert result.info["eval_failure"] == "nonfinite_reward" and result.info["reward_returned"] == "NaN"
    assert result.info["reward_source"] == "the reward function relative_error of verifiers env 'nan-test'"


TINY = ["--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "filter.mode=off",
        "--set", "generation.max_new_tokens=16", "--set", "generation.max_total_tokens=300", "--set", "env.eval_size=2",
        "--set", "trainer.threads=1", "--set", "trainer.eval_before_after=false"]  # fmt: skip


@pytest.mark.slow
def test_one_training_step_with_offer_tools_off_from_the_command_line(tmp_path: Path) -> None:
    """`--set env.offer_tools=false`: the built-in model (no tool template) trains on the ToolEnv by name."""
    run_dir = tmp_path / "run"
    args = ["train", "--steps", "1", "--run-dir", str(run_dir), "--no-progress", *TINY, "--set", f"env.name={NAME}",
            "--set", "env.offer_tools=false", "--set", f"env.tasks_file={_task_file(tmp_path)}"]  # fmt: skip
    assert main(args) == 0
    trained = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trained) == 4 and all("metrics" in t["info"]["eval"] for t in trained)  # scored, none failed


@pytest.mark.slow
def test_one_training_step_on_the_verifiers_env(tmp_path: Path) -> None:
    """The tiny model's template renders no tools, so the env is registered without offering them."""
    maker = functools.partial(VerifiersEnv, variant="verifiers_calc:load_environment", offer_tools=False)
    register_env("vf-calc-test", maker, tasks="tirl.integrations.verifiers_env:task_source")
    try:
        run_dir = tmp_path / "run"
        args = ["train", "--steps", "1", "--run-dir", str(run_dir), "--no-progress", *TINY,
                "--set", "env.name=vf-calc-test", "--set", f"env.tasks_file={_task_file(tmp_path)}"]  # fmt: skip
        assert main(args) == 0
    finally:
        unregister_env("vf-calc-test")
    trained = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trained) == 4 and all("metrics" in t["info"]["eval"] for t in trained)  # scored by the rubric
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 1 and metrics[-1]["rollout/trajectories"] == 4


def _task_file(tmp_path: Path) -> Path:
    path = tmp_path / "calc.jsonl"
    system = {"role": "system", "content": "Answer as \\boxed{...}."}
    rows = [{"prompt": [system, {"role": "user", "content": f"What is {a} + {b}?"}],
             "reward_spec": {"ground_truth": str(a + b)}}
            for a, b in [(3, 4), (10, 32), (7, 8), (20, 22), (1, 1), (12, 30)]]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_unknown_verifiers_env_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = ["train", "--steps", "1", "--run-dir", str(tmp_path / "r"), "--set", "env.name=verifiers:no_such_env_xyz"]
    assert main(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: verifiers environment 'no_such_env_xyz'")
