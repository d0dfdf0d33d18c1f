"""``env.ood_rate``: the registry wraps every env; rate 0 changes nothing, rate 1 every tool observation, seeded.

tir-math runs through the real sandbox (the ``sandbox`` fixture); the rate statistics use a small echo env
registered under its own name, so the registry path (not a direct wrap) is what is tested for any env.
"""

from __future__ import annotations

import pytest

from tirl.config import EnvConfig, load_config
from tirl.envs import check_env, make_env, register_env, unregister_env
from tirl.envs.base import EvalResult, StepResult, Task
from tirl.envs.ood import KINDS, OodToolOutput, perturb
from tirl.envs.tir_math import TirMathEnv
from tirl.errors import ConfigError
from tirl.sandbox.base import Sandbox
from tirl.types import Message, Role

TASK = Task(id="t1", prompt="Compute 347*29.", answer="10063", kind="tir-math", data={"code": "print(347*29)"})
TURNS = ["```python\nprint(347*29)\n```", "```python\nprint(1/0)\n```", "```python\nprint('a\\nb')\n```"]


async def _play(env: object, turns: list[str], seed: int = 7) -> tuple[list[str], float]:
    await env.reset(TASK, seed=seed)  # type: ignore[attr-defined]
    seen: list[str] = []
    for text in turns:
        step = await env.step(Message(role=Role.ASSISTANT, content=text))  # type: ignore[attr-defined]
        seen += [m.content or "" for m in step.observation]
    await env.step(Message(role=Role.ASSISTANT, content="\\boxed{10063}"))  # type: ignore[attr-defined]
    reward = (await env.evaluate()).reward  # type: ignore[attr-defined]
    await env.close()  # type: ignore[attr-defined]
    return seen, reward


async def test_rate_zero_returns_the_env_itself_and_changes_nothing(sandbox: Sandbox) -> None:
    env = make_env("tir-math", config=EnvConfig(name="tir-math", ood_rate=0.0), sandbox=sandbox)
    assert isinstance(env, TirMathEnv)  # not wrapped at all
    plain = await _play(TirMathEnv(sandbox=sandbox, max_turns=6), TURNS)
    assert await _play(env, TURNS) == plain


async def test_rate_one_changes_every_tool_observation_and_not_the_reward(sandbox: Sandbox) -> None:
    plain, reward = await _play(TirMathEnv(sandbox=sandbox, max_turns=6), TURNS)
    env = make_env("tir-math", config=EnvConfig(name="tir-math", ood_rate=1.0, seed=3), sandbox=sandbox)
    assert isinstance(env, OodToolOutput) and env.name == "tir-math" and env.max_turns == 6  # attributes pass through
    noisy, noisy_reward = await _play(env, TURNS)
    assert len(noisy) == len(plain) == 3
    assert all(a != b for a, b in zip(noisy, plain, strict=True))
    assert env.changed == 3 and noisy_reward == reward == 1.0


async def test_the_draw_is_reproducible_and_follows_env_seed(sandbox: Sandbox) -> None:
    def make(seed: int) -> object:
        return make_env("tir-math", config=EnvConfig(name="tir-math", ood_rate=1.0, seed=seed), sandbox=sandbox)

    first = await _play(make(5), TURNS)
    assert await _play(make(5), TURNS) == first  # same env.seed, task and episode seed: the same text
    assert await _play(make(6), TURNS) != first  # another env.seed: another draw
    assert await _play(make(5), TURNS, seed=8) != first  # another episode seed: another draw


async def test_the_wrapped_env_passes_the_conformance_check(sandbox: Sandbox) -> None:
    cfg = EnvConfig(name="tir-math", ood_rate=1.0, max_turns=2)
    report = await check_env(
        lambda: make_env("tir-math", config=cfg, sandbox=sandbox),
        TASK,
        solution=["```python\nprint(347*29)\n```", "\\boxed{10063}"],
        idle="```python\nprint(1)\n```",
    )
    assert {"protocol", "reset", "void", "evaluate", "close", "solution"} <= set(report.passed)


class EchoEnv:
    """A tiny env for the rate statistics: every step returns one tool message echoing the action."""

    name = "echo-ood-test"

    def __init__(self, **_: object) -> None:
        self.turns = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        self.turns += 1
        return StepResult([Message(role=Role.TOOL, content=f"echo {self.turns}")])

    async def evaluate(self) -> EvalResult:
        return EvalResult(reward=0.0, correct=False)

    async def close(self) -> None:
        return None


async def test_a_fraction_of_calls_on_any_registered_env() -> None:
    register_env("echo-ood-test", EchoEnv)
    try:
        changed = total = 0
        for episode in range(200):
            env = make_env("echo-ood-test", config=EnvConfig(name="echo-ood-test", ood_rate=0.3, seed=1))
            assert isinstance(env, OodToolOutput)
            await env.reset(Task(id=f"e{episode}", prompt="p"), seed=episode)
            for _ in range(10):
                step = await env.step(Message(role=Role.ASSISTANT, content="x"))
                total += 1
                changed += step.observation[0].content != f"echo {env.env.turns}"  # type: ignore[attr-defined]
        assert 0.26 < changed / total < 0.34  # 2,000 calls at rate 0.3: +- 4 standard deviations
    finally:
        unregister_env("echo-ood-test")


def test_each_kind_changes_the_text_and_the_rate_is_bounded() -> None:
    import random

    for kind in KINDS:
        for text in ("42", "", "a\nb"):
            assert perturb(text, kind, random.Random(0)) != text, (kind, text)
    assert "Traceback (most recent call last):" in perturb("42", "traceback", random.Random(0))
    with pytest.raises(ConfigError, match=r"env\.ood_rate"):
        load_config(None, ["env.ood_rate=1.5"])
    assert load_config(None, ["env.ood_rate=0.25"]).env.ood_rate == 0.25
