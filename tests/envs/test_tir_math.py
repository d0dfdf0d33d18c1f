"""tir-math through the real sandbox: conformance, scripted solutions, the void rule, limits and failures."""

from __future__ import annotations

import json

import pytest

from tirl.envs import check_env
from tirl.envs.base import EpisodeOverError, Task
from tirl.envs.tir_math import TirMathEnv, expert_solution, generate_tasks
from tirl.filters.void_turn import judge_trajectory
from tirl.parsing import judge_message
from tirl.sandbox.base import ExecResult, Sandbox
from tirl.testing import play
from tirl.types import Message, Role, TerminationReason, ToolCall, Trajectory


def asst(text: str | None, **kw: object) -> Message:
    return Message(role=Role.ASSISTANT, content=text, **kw)  # type: ignore[arg-type]


TASK = Task(id="t1", prompt="Compute 347*29.", answer="10063", kind="tir-math", data={"code": "print(347*29)"})


async def test_check_env_passes(sandbox: Sandbox) -> None:
    report = await check_env(
        lambda: TirMathEnv(sandbox=sandbox, max_turns=2),
        TASK,
        solution=["```python\nprint(347*29)\n```", "\\boxed{10063}"],
        idle="```python\nprint(1)\n```",
    )
    assert {"protocol", "reset", "void", "after_end", "evaluate", "close", "solution", "limit"} <= set(report.passed)


async def test_scripted_policy_solves_a_task_end_to_end(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox)
    first = await env.reset(TASK)
    assert [m.role for m in first] == [Role.SYSTEM, Role.USER]
    step = await env.step(asst("I'll compute it.\n```python\nprint(347*29)\n```"))
    assert not step.terminated and not step.truncated and step.reason is None
    assert step.observation == [Message(role=Role.TOOL, content="```output\n10063\n```")]
    assert step.info["exit_codes"] == [0]
    done = await env.step(asst("The product is \\boxed{10,063}."))
    assert done.terminated and done.reason is TerminationReason.ANSWERED
    result = await env.evaluate()
    assert result.reward == 1.0 and result.correct
    assert result.info["answer"] == "10,063"
    await env.close()


@pytest.mark.parametrize("difficulty", [1, 3, 5])
async def test_expert_solutions_through_the_real_env(sandbox: Sandbox, difficulty: int) -> None:
    tasks = generate_tasks(6, difficulty=difficulty, seed=11)
    for task in tasks:
        script = expert_solution(task)
        result = await play(TirMathEnv(sandbox=sandbox, max_turns=4), task, script)
        assert result.reason is TerminationReason.ANSWERED, (task, result)
        assert result.correct and result.reward == 1.0
        tool = [m.content for m in result.messages if m.role is Role.TOOL]
        # the answer turn repeats the real output of the last code turn
        assert tool[-1] == f"```output\n{task.answer}\n```"
        if len(script) == 3:  # failed first attempt: no output or a NameError, then the fix
            assert tool[0] == "```output\n[no output]\n```" or tool[0].startswith(
                "```output\nNameError: name 'prnt' is not defined"
            )


async def test_wrong_answer_and_fraction_normalisation(sandbox: Sandbox) -> None:
    half = Task(id="h", prompt="What is 1/2?", answer="0.5")
    for given, reward in [("\\frac{1}{2}", 1.0), ("1/2", 1.0), ("0.5", 1.0), ("0.6", 0.0)]:
        result = await play(TirMathEnv(sandbox=sandbox), half, [f"\\boxed{{{given}}}"])
        assert result.reward == reward, given


async def test_void_turn_ends_the_episode(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox)
    await env.reset(TASK)
    result = await env.step(asst("Let me double-check that.\n```output\n10063\n```"))
    assert result.terminated and not result.truncated
    assert result.reason is TerminationReason.VOID
    assert result.observation == []
    with pytest.raises(EpisodeOverError):
        await env.step(asst("\\boxed{10063}"))
    assert (await env.evaluate()).reward == 0.0
    await env.close()


AGREEMENT_CASES = [
    "```python\nprint(1)\n```",
    "```py\nprint(2)\n```",
    "```bash\necho 3\n```",
    "```text\nprint(1)\n```",
    "```python\nprint(1)",  # unclosed fence
    "```python\n   \n```",  # blank body
    "`print(1)` inline only",
    "let me double-check \\boxed{}",
    "\\boxed{42}",
    "<answer>7</answer>",
    "```python\nx = '\\boxed{5}'\n```",  # boxed inside code is not an answer
    "I think the answer is 42.",
    "",
    None,
]


@pytest.mark.parametrize("content", AGREEMENT_CASES)
async def test_env_and_void_filter_agree(sandbox: Sandbox, content: str | None) -> None:
    """The env decides what to execute from the same verdict the filter uses."""
    env = TirMathEnv(sandbox=sandbox, max_turns=3)
    initial = await env.reset(TASK)
    action = asst(content)
    step = await env.step(action)
    await env.close()
    traj = Trajectory(id="x", messages=[*initial, action, *step.observation])
    filter_void = judge_trajectory(traj).void
    assert (step.reason is TerminationReason.VOID) == filter_void == judge_message(action).is_void
    assert step.info["action"] == judge_message(action).kind.value
    ran_code = bool(step.observation)
    assert ran_code == (judge_message(action).kind.value == "code")


async def test_max_turns_truncates(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox, max_turns=2)
    await env.reset(TASK)
    assert (await env.step(asst("```python\nprint(1)\n```"))).reason is None
    last = await env.step(asst("```python\nprint(2)\n```"))
    assert last.truncated and not last.terminated
    assert last.reason is TerminationReason.MAX_TURNS
    assert last.observation[0].content == "```output\n2\n```"
    await env.close()


async def test_overlong_action_truncates_without_running(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox, max_action_chars=20)
    await env.reset(TASK)
    result = await env.step(asst("```python\nprint('this is far too long')\n```"))
    assert result.truncated and result.reason is TerminationReason.OVERLONG
    assert result.observation == []
    await env.close()


async def test_timeout_is_an_observation_not_an_error(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox, timeout_s=1.0)
    await env.reset(TASK)
    result = await env.step(asst("```python\nwhile True: pass\n```"))
    assert result.reason is None
    assert "[timed out]" in (result.observation[0].content or "")
    assert result.info["timed_out"] is True
    await env.close()


async def test_output_is_clipped(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox, max_obs_chars=100)
    await env.reset(TASK)
    result = await env.step(asst("```python\nprint('x' * 5000)\n```"))
    content = result.observation[0].content or ""
    assert content.startswith("```output\n") and content.endswith("\n```")
    assert len(content) <= 100 + len("```output\n\n```")
    assert "characters cut" in content
    await env.close()


async def test_python_tool_call(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox)
    await env.reset(TASK)
    call = ToolCall(name="python", arguments=json.dumps({"code": "print(6*7)"}))
    result = await env.step(asst(None, tool_calls=(call,)))
    assert result.observation[0].content == "```output\n42\n```"
    other = await env.step(asst(None, tool_calls=(ToolCall(name="search", arguments="{}"),)))
    assert "unknown tool" in (other.observation[0].content or "")
    await env.close()


async def test_system_prompt_can_be_dropped(sandbox: Sandbox) -> None:
    env = TirMathEnv(sandbox=sandbox, system_prompt=None)
    assert await env.reset(TASK) == [Message(role=Role.USER, content="Compute 347*29.")]
    await env.close()


class BrokenSandbox:
    """A sandbox whose infrastructure fails (not the program)."""

    name = "broken"

    async def run(self, code: str, **kw: object) -> ExecResult:
        return ExecResult("", "", None, error="could not start bwrap")

    async def end_session(self, session: str) -> None:
        pass

    async def close(self) -> None:
        pass


class RaisingSandbox(BrokenSandbox):
    async def run(self, code: str, **kw: object) -> ExecResult:
        raise OSError("no space left on device")


async def test_sandbox_failure_ends_with_error() -> None:
    env = TirMathEnv(sandbox=BrokenSandbox())
    await env.reset(TASK)
    result = await env.step(asst("```python\nprint(1)\n```"))
    assert result.truncated and result.reason is TerminationReason.ERROR
    assert "could not start bwrap" in result.info["error"]
    assert result.reason.is_failure


async def test_env_that_raises_gives_error_result_not_exception() -> None:
    result = await play(TirMathEnv(sandbox=RaisingSandbox()), TASK, ["```python\nprint(1)\n```"])
    assert result.reason is TerminationReason.ERROR and result.reason.is_failure
    assert result.error is not None and "OSError: no space left on device" in result.error


async def test_task_without_answer_fails_reset(sandbox: Sandbox) -> None:
    result = await play(TirMathEnv(sandbox=sandbox), Task(id="q", prompt="?"), ["\\boxed{1}"])
    assert result.reason is TerminationReason.INIT_FAILED
    assert result.error is not None and "no answer" in result.error


async def test_a_dropped_keep_state_episode_is_not_reached_by_a_later_one_at_its_address() -> None:
    """Red team (session 44): the session was named after ``id(self)``; an episode dropped without ``close()``
    (its session still open) and a new env of the same task at the freed address shared one Python kernel:
    the later episode printed the earlier one's ``secret``."""
    import gc
    import weakref

    from tirl.config import SandboxConfig
    from tirl.sandbox import create_sandbox

    pool = create_sandbox(SandboxConfig(warm_pool=True, pool_size=1), warn=False)  # either pool keeps sessions
    task = Task(id="t-session", prompt="2+2?", answer="4")
    later = None
    try:
        for _ in range(10):  # CPython usually hands the freed block to a new env soon; a round may miss it
            first = TirMathEnv(sandbox=pool, keep_state=True)
            await first.reset(task)
            await first.step(Message(role=Role.ASSISTANT, content="```python\nsecret = 'episode A'\n```"))
            address, gone = id(first), weakref.ref(first)
            del first  # dropped, never closed: its session stays open in the pool
            gc.collect()
            assert gone() is None
            kept = [TirMathEnv(sandbox=pool, keep_state=True) for _ in range(500)]
            later = next((env for env in kept if id(env) == address), None)
            if later is not None:
                break
        if later is None:  # the allocator never reused the address: a fresh env of the same task stands in for it
            later = TirMathEnv(sandbox=pool, keep_state=True)  # (under id(self) naming only a reused address shared)
        await later.reset(task)
        step = await later.step(Message(role=Role.ASSISTANT, content="```python\nprint(secret)\n```"))
        assert "episode A" not in (step.observation[0].content or "")
        assert "NameError" in (step.observation[0].content or "")
    finally:
        await pool.close()
