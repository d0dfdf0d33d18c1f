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
    program) truncates with ``error`` and ``info["error"]``.

Observation format
    ``tool`` message, content ``"```output\n<text>\n```"`` — see
    :mod:`tirl.envs.observation` (stdout, then the last line of a Python
    traceback, then markers such as ``[timed out]``; ``[no output]`` when
    empty; clipped to ``max_obs_chars``).

Reward
    ``evaluate()`` returns 1.0 when the last final answer matches
    ``task.answer`` under :func:`tirl.answers.answers_match` (exact numbers
    and fractions: ``1/2 == 0.5 == \frac{1}{2}``, ``1,000 == 1000``), else 0.0.
    ``step`` rewards are always 0.

Not covered: Python state is not kept between turns unless ``keep_state=True``
*and* the sandbox backend keeps sessions (the process backend does not); a
model that reuses a variable from an earlier turn gets a ``NameError``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tirl.answers import answers_match
from tirl.config import EnvConfig, SandboxConfig
from tirl.envs.base import EpisodeOverError, EvalResult, StepResult, Task
from tirl.envs.common import SandboxLease, block_lang, final_result, run_blocks
from tirl.envs.observation import clip, observation_text, tool_message, wrap_output
from tirl.envs.tasks.math_gen import expert_solution, generate_tasks, load_math_tasks
from tirl.parsing import DEFAULT_RULES, ActionKind, ParseRules, judge_message
from tirl.sandbox.base import Lang, Sandbox
from tirl.types import Message, Role, TerminationReason, ToolCall

__all__ = ["DEFAULT_SYSTEM_PROMPT", "TirMathEnv", "expert_solution", "generate_tasks", "load_math_tasks", "task_source"]

DEFAULT_SYSTEM_PROMPT = "Use python to compute. Print the result. Then answer as \\boxed{...}."
PYTHON_TOOL_NAMES = frozenset({"python", "run_python", "execute_python"})


class TirMathEnv:
    """One tir-math episode (create one per trajectory; share the sandbox)."""

    name = "tir-math"

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        sandbox_config: SandboxConfig | None = None,
        max_turns: int = 4,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        max_obs_chars: int = 300,
        max_action_chars: int | None = None,
        compact_errors: bool = True,
        keep_state: bool = False,
        timeout_s: float | None = None,
        rules: ParseRules = DEFAULT_RULES,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_obs_chars < 64:
            raise ValueError(f"max_obs_chars must be >= 64, got {max_obs_chars}")
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.max_obs_chars = max_obs_chars
        self.max_action_chars = max_action_chars
        self.compact_errors = compact_errors
        self.keep_state = keep_state
        self.timeout_s = timeout_s
        self.rules = rules
        self._lease = SandboxLease(sandbox, sandbox_config)
        self._task: Task | None = None
        self._turns = 0
        self._answer: str | None = None
        self._reason: TerminationReason | None = None
        self._session: str | None = None
        self._closed = False
        self.info: dict[str, Any] = {}

    @property
    def turns(self) -> int:
        """Assistant turns taken so far."""
        return self._turns

    @property
    def reason(self) -> TerminationReason | None:
        """Why the episode ended (``None`` while it runs)."""
        return self._reason

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Start the episode; ``seed`` is unused (the env is deterministic given the task)."""
        if self._closed:
            raise EpisodeOverError("reset after close: create a new env per episode")
        if task.answer is None:
            raise ValueError(f"tir-math task {task.id!r} has no answer to check against")
        start = time.perf_counter()
        await self._lease.get()  # create an owned sandbox now (the Initializer stage), not mid-episode
        self.info = {"init_s": round(time.perf_counter() - start, 6)}
        self._task = task
        self._turns = 0
        self._answer = None
        self._reason = None
        self._session = f"tir-math-{task.id}-{id(self)}" if self.keep_state else None
        messages = [] if self.system_prompt is None else [Message(role=Role.SYSTEM, content=self.system_prompt)]
        messages.append(Message(role=Role.USER, content=task.prompt))
        return messages

    def _end(self, reason: TerminationReason, observation: list[Message], info: dict[str, Any]) -> StepResult:
        self._reason = reason
        return final_result(reason, observation, info)

    async def end(self, reason: TerminationReason, info: dict[str, Any] | None = None) -> StepResult:
        """End the episode for a reason only the runner sees (token cap → ``overlong``, timeout, cancel).

        Later ``step`` calls raise; ``evaluate`` still works and reports the reason.
        """
        if self._reason is not None:
            raise EpisodeOverError(f"the episode already ended ({self._reason.value})")
        return self._end(reason, [], dict(info or {}))

    async def step(self, action: Message) -> StepResult:
        """Judge and apply one assistant message (see the module docstring)."""
        if self._task is None or self._reason is not None:
            raise EpisodeOverError("step called before reset or after the episode ended")
        if action.role is not Role.ASSISTANT:
            raise ValueError(f"step takes an assistant message, got role {action.role.value!r}")
        self._turns += 1
        info: dict[str, Any] = {"turn": self._turns}
        content = action.content or ""
        if self.max_action_chars is not None and len(content) > self.max_action_chars:
            info["action"] = "overlong"
            return self._end(TerminationReason.OVERLONG, [], info)
        verdict = judge_message(action, self.rules)
        info["action"] = verdict.kind.value
        if verdict.kind is ActionKind.ANSWER:
            self._answer = verdict.answer
            info["answer"] = verdict.answer
            return self._end(TerminationReason.ANSWERED, [], info)
        if verdict.kind is ActionKind.VOID:
            return self._end(TerminationReason.VOID, [], info)
        if verdict.kind is ActionKind.CODE:
            blocks: list[tuple[Lang, str]] = [(block_lang(b), b.body) for b in verdict.code]
            observation = await self._execute(blocks, info)
        else:
            observation = await self._call_tools(verdict.tool_calls, info)
        if "error" in info:
            return self._end(TerminationReason.ERROR, observation, info)
        if self._turns >= self.max_turns:
            return self._end(TerminationReason.MAX_TURNS, observation, info)
        return StepResult(observation, info=info)

    async def _execute(self, blocks: list[tuple[Lang, str]], info: dict[str, Any]) -> list[Message]:
        sandbox = await self._lease.get()
        runs = await run_blocks(sandbox, blocks, timeout_s=self.timeout_s, session=self._session)
        info.update(runs.info())
        if runs.infra_error is not None:
            info["error"] = f"sandbox error: {runs.infra_error}"
        text = "\n".join(observation_text(r, compact_errors=self.compact_errors) for r in runs.results)
        return [tool_message(wrap_output(clip(text, self.max_obs_chars)))]

    async def _call_tools(self, calls: tuple[ToolCall, ...], info: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        for call in calls:
            args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
            code = args.get("code") if isinstance(args, dict) else None
            if call.name not in PYTHON_TOOL_NAMES or not isinstance(code, str):
                out.append(tool_message(wrap_output(f'[unknown tool: {call.name}; use python with {{"code": ...}}]')))
                continue
            out.extend(await self._execute([("python", code)], info))
            if "error" in info:
                break
        return out

    async def evaluate(self) -> EvalResult:
        """1.0 if the final answer matches the task's answer, else 0.0."""
        if self._task is None:
            raise EpisodeOverError("evaluate called before reset")
        expected = self._task.answer or ""
        correct = answers_match(self._answer, expected)
        info = {
            **self.info,
            "answer": self._answer,
            "expected": expected,
            "reason": None if self._reason is None else self._reason.value,
            "turns": self._turns,
        }
        return EvalResult(reward=1.0 if correct else 0.0, correct=correct, info=info)

    async def close(self) -> None:
        """End the Python session (if any) and close an owned sandbox; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._session is not None:
                sandbox = await self._lease.get()
                await sandbox.end_session(self._session)
        finally:
            await self._lease.close()

    @classmethod
    def from_config(cls, config: EnvConfig, **kwargs: Any) -> TirMathEnv:
        """An env with ``max_turns`` from ``config``."""
        kwargs.setdefault("max_turns", config.max_turns)
        return cls(**kwargs)


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """Registry task source: the JSONL file ``config.tasks_file`` (first ``n``) or ``n`` generated tasks."""
    if config.tasks_file:
        tasks = load_math_tasks(Path(config.tasks_file))
        return tasks[:n]
    return generate_tasks(n, difficulty=config.difficulty, seed=seed)
