r"""tir-math: tool-integrated math (SimpleTIR-style). The model writes Python, the sandbox runs it.

Episode
    ``reset(task)`` returns ``[system?, user]`` (the system prompt is short
    and may be turned off with ``system_prompt=None``). Each ``step(message)``
    judges the assistant message with :func:`tirl.parsing.judge_message` —
    the same rule the void-turn filter uses — and acts on the verdict:

    ============  ==================================================  =====================
    verdict       what happens                                        episode
    ============  ==================================================  =====================
    answer        the answer is recorded; code in the turn is not run terminated, ``answered``
    code          the executable blocks run in order in the sandbox;  continues
                  the observation is one tool message (format below)
    tool call     a ``python`` call with ``{"code": ...}`` runs the   continues
                  code; other names get ``[unknown tool: NAME]``
    void          nothing runs                                        terminated, ``void``
    ============  ==================================================  =====================

    After a code or tool turn, reaching ``max_turns`` truncates the episode
    (``max_turns``). A message longer than ``max_action_chars`` truncates it
    (``overlong``) without running anything; the token-level cap
    (``generation.max_new_tokens``) is the rollout runner's to report, as
    ``overlong``, before it calls ``step``. A sandbox failure (not a failing
    program) truncates with ``error`` and ``info["error"]``. The call order,
    this dispatch and the limits are :class:`~tirl.envs.tool_env.ToolEnv`'s;
    this module writes only the execution and the reward.

Observation format
    ``tool`` message, content ``"```output\n<text>\n```"`` — see
    :mod:`tirl.envs.observation` (stdout, then the last line of a Python
    traceback, then markers such as ``[timed out]``; ``[no output]`` when
    empty; clipped to ``max_obs_chars``).

Reward
    ``evaluate()`` returns 1.0 when the last final answer matches
    ``task.answer`` under :func:`tirl.answers.answers_match` (exact numbers
    and fractions, ``\boxed``/units/``%`` removed, symbolic forms through math-verify
    off the event loop; hostile answers such as ``1e5000`` score 0), else 0.0.
    ``step`` rewards are always 0.

Not covered: Python state is not kept between turns unless ``keep_state=True``
*and* the sandbox backend keeps sessions (the process backend does not); a
model that reuses a variable from an earlier turn gets a ``NameError``. With
``keep_state`` each episode's session has a random name, so no other episode
reaches it; an episode dropped without ``close()`` leaves its session open in
the pool until the pool closes (at most 256 are open at a time).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Unpack

from tirl.answers import answers_match_async
from tirl.config import EnvConfig
from tirl.envs.base import EvalResult, Task
from tirl.envs.common import block_lang
from tirl.envs.observation import tool_message, wrap_output
from tirl.envs.tasks.math_gen import expert_solution, generate_tasks, load_math_tasks
from tirl.envs.tool_env import ToolEnv, ToolEnvOptions, call_arguments
from tirl.parsing import ActionKind, TurnVerdict
from tirl.sandbox.base import Lang
from tirl.types import Message

__all__ = ["DEFAULT_SYSTEM_PROMPT", "TirMathEnv", "expert_solution", "generate_tasks", "load_math_tasks", "task_source"]

DEFAULT_SYSTEM_PROMPT = "Use python to compute. Print the result. Then answer as \\boxed{...}."
PYTHON_TOOL_NAMES = frozenset({"python", "run_python", "execute_python"})


class TirMathEnv(ToolEnv):
    """One tir-math episode (create one per trajectory; share the sandbox)."""

    name = "tir-math"

    defaults: ClassVar[ToolEnvOptions] = {
        "max_turns": 4,
        "system_prompt": DEFAULT_SYSTEM_PROMPT,
        "max_obs_chars": 300,
    }

    def __init__(
        self,
        *,
        compact_errors: bool = True,
        keep_state: bool = False,
        timeout_s: float | None = None,
        **options: Unpack[ToolEnvOptions],
    ) -> None:
        """``options``: :class:`~tirl.envs.tool_env.ToolEnvOptions`; defaults here: 4 turns, 300 output chars."""
        super().__init__(**options)
        self.compact_errors = compact_errors
        self.keep_state = keep_state
        self.timeout_s = timeout_s
        self._session: str | None = None

    async def setup(self, task: Task) -> dict[str, Any]:
        """Check the task has an answer; name the Python session when ``keep_state``."""
        if task.answer is None:
            raise ValueError(f"tir-math task {task.id!r} has no answer to check against")
        # A random name, never id(self): an episode dropped without close() leaves its session open, and a later
        # env of the same task at the same address read that episode's globals (red team, session 44).
        self._session = f"tir-math-{task.id}-{os.urandom(8).hex()}" if self.keep_state else None
        return {}

    async def act(self, verdict: TurnVerdict, info: dict[str, Any]) -> tuple[list[Message], bool]:
        """Run the turn's executable blocks, or its ``python`` function calls; never submits."""
        if verdict.kind is ActionKind.CODE:
            blocks: list[tuple[Lang, str]] = [(block_lang(b), b.body) for b in verdict.code]
            return await self._execute(blocks, info), False
        out: list[Message] = []
        for call in verdict.tool_calls:
            code = call_arguments(call).get("code")
            if call.name not in PYTHON_TOOL_NAMES or not isinstance(code, str):
                out.append(tool_message(wrap_output(f'[unknown tool: {call.name}; use python with {{"code": ...}}]')))
                continue
            out.extend(await self._execute([("python", code)], info))
            if "error" in info:
                break
        return out, False

    async def _execute(self, blocks: list[tuple[Lang, str]], info: dict[str, Any]) -> list[Message]:
        return await self.run_commands(
            blocks, info, timeout_s=self.timeout_s, session=self._session, compact_errors=self.compact_errors
        )

    async def score(self, task: Task) -> EvalResult:
        """1.0 if the final answer matches the task's answer, else 0.0."""
        expected = task.answer or ""
        correct = await answers_match_async(self.answer, expected)  # the math-verify fallback runs off the loop
        info = {"answer": self.answer, "expected": expected}
        return EvalResult(reward=1.0 if correct else 0.0, correct=correct, info=info)

    async def teardown(self) -> None:
        """End the Python session, if any."""
        if self._session is not None:
            sandbox = await self.sandbox()
            await sandbox.end_session(self._session)


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """Registry task source: ``config.tasks_file`` (first ``n``; parquet or JSONL, see tasks/files.py) or generated."""
    if config.tasks_file:
        from tirl.envs.tasks.files import load_tasks_file

        return load_tasks_file(config, n, kind="tir-math")
    return generate_tasks(n, difficulty=config.difficulty, seed=seed)
