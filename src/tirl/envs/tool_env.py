"""``ToolEnv``: the concrete base of the built-in environments; it owns the episode bookkeeping.

An environment that subclasses :class:`ToolEnv` writes only what is its own:

* :meth:`ToolEnv.setup` — provision the episode (Initializer stage); returns
  timing facts for ``info`` (default: nothing to do);
* :meth:`ToolEnv.act` — carry out an executable turn (fenced code or function
  calls) and return the observation, and whether the turn submitted;
* :meth:`ToolEnv.score` — the reward (Evaluator stage);
* :meth:`ToolEnv.teardown` — release what ``setup`` made (default: nothing).

The base does the rest, the same way for every environment:

* the call order: one episode per instance (``reset`` twice, or after
  ``close``, raises :class:`~tirl.envs.base.EpisodeOverError`), ``step``
  before ``reset``, after the end or after ``close`` raises, ``evaluate``
  before ``reset`` raises, ``close`` is idempotent;
* the dispatch of each assistant message by the one shared rule,
  :func:`tirl.parsing.judge_message` (the rule the void filter uses):

  ============  ==============================================  =========================
  verdict       what happens                                    episode
  ============  ==============================================  =========================
  answer        recorded in :attr:`answer` and ``info["answer"]``  terminated, ``answer_reason``
  code / call   :meth:`act` runs it                             continues, or ``submitted``
  void          nothing runs                                    terminated, ``void``
  ============  ==============================================  =========================

* the limits: a message longer than ``max_action_chars`` truncates the
  episode (``overlong``) without running anything; a sandbox failure during
  ``act`` (``info["error"]``) truncates it (``error``); after ``max_turns``
  turns it is truncated (``max_turns``);
* ``evaluate`` adds ``reason`` and ``turns`` (and the ``setup`` facts) to the
  result's ``info``;
* the sandbox: a shared one is borrowed, otherwise one is created at
  ``reset`` and closed at ``close`` (:class:`~tirl.envs.common.SandboxLease`).

Not covered: the token-level cap (``generation.max_new_tokens``), time
limits and cancellation — the rollout runner and the pipeline stages report
those on the trajectory (``overlong``, ``timeout``, ``cancelled``); the env
is then evaluated (or not) as it stands.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar, Self, TypedDict, Unpack

from tirl.config import EnvConfig, SandboxConfig
from tirl.envs.base import EpisodeOverError, EvalResult, StepResult, Task, check_evaluable, check_step
from tirl.envs.common import SandboxLease, run_blocks
from tirl.envs.observation import clip, observation_text, tool_message, wrap_output
from tirl.parsing import DEFAULT_RULES, ActionKind, ParseRules, TurnVerdict, judge_message, requested_answer_format
from tirl.sandbox.base import Lang, Sandbox
from tirl.types import Message, Role, TerminationReason, ToolCall

#: Reasons that end the *task* (Gymnasium's terminated); every other reason truncates the episode.
TERMINATING: frozenset[TerminationReason] = frozenset(
    {TerminationReason.ANSWERED, TerminationReason.SUBMITTED, TerminationReason.VOID}
)


def final_result(reason: TerminationReason, observation: list[Message], info: dict[str, Any]) -> StepResult:
    """The last ``StepResult`` of an episode: ``terminated`` for task endings, ``truncated`` for the rest."""
    terminated = reason in TERMINATING
    return StepResult(observation, terminated=terminated, truncated=not terminated, reason=reason, info=info)


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """The arguments of a function call as a dict (``{}`` when they are JSON but not an object).

    The shared rule only calls a turn a tool call when every call's arguments
    parse as JSON, so this does not fail on a judged turn.
    """
    args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
    return args if isinstance(args, dict) else {}


class ToolEnvOptions(TypedDict, total=False):
    """The keyword arguments of :class:`ToolEnv` (a subclass passes them on with ``**options``)."""

    sandbox: Sandbox | None  # shared sandbox (or warm pool); None = create one per episode
    sandbox_config: SandboxConfig | None  # used when the env creates its own sandbox
    max_turns: int  # assistant turns before the episode is truncated (max_turns)
    system_prompt: str | None  # None = no system message
    max_obs_chars: int  # tool output budget per turn (>= 64)
    max_action_chars: int | None  # a longer assistant message truncates the episode (overlong)
    rules: ParseRules  # the shared action rule (the void filter's)


class ToolEnv:
    """One episode of a tool-using task; subclasses implement ``act`` and ``score`` (see the module docstring).

    A subclass takes its own keyword arguments and passes the rest on;
    :attr:`defaults` holds its own defaults of the shared ones::

        defaults: ClassVar[ToolEnvOptions] = {"max_turns": 4}

        def __init__(self, *, timeout_s: float | None = None, **options: Unpack[ToolEnvOptions]) -> None:
            super().__init__(**options)
    """

    name = "tool-env"
    answer_reason: TerminationReason = TerminationReason.ANSWERED  # how a final answer ends the episode
    defaults: ClassVar[ToolEnvOptions] = {}  # a subclass's defaults for the options it does not get

    def __init__(self, **options: Unpack[ToolEnvOptions]) -> None:
        unknown = sorted(set(options) - set(ToolEnvOptions.__annotations__))
        if unknown:  # a typo must not be dropped silently: the same TypeError as a plain signature
            raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s): {', '.join(unknown)}")
        given: ToolEnvOptions = {**self.defaults, **options}
        max_turns = given.get("max_turns", 4)
        max_obs_chars = given.get("max_obs_chars", 2000)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_obs_chars < 64:
            raise ValueError(f"max_obs_chars must be >= 64, got {max_obs_chars}")
        self.max_turns = max_turns
        self.system_prompt = given.get("system_prompt")
        self.max_obs_chars = max_obs_chars
        self.max_action_chars = given.get("max_action_chars")
        self.rules = given.get("rules", DEFAULT_RULES)
        self.info: dict[str, Any] = {}  # facts from setup, added to every evaluation
        self.answer: str | None = None  # the last final answer the model gave
        self._lease = SandboxLease(given.get("sandbox"), given.get("sandbox_config"))
        self._task: Task | None = None
        self._turns = 0
        self._reason: TerminationReason | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: EnvConfig, **kwargs: Any) -> Self:
        """An env with ``max_turns`` from ``config``."""
        kwargs.setdefault("max_turns", config.max_turns)
        return cls(**kwargs)

    # ------------------------------------------------------------ what subclasses write
    async def setup(self, task: Task) -> dict[str, Any]:
        """Provision the episode of ``task``; returns facts for ``info`` (the base: nothing)."""
        return {}

    async def act(self, verdict: TurnVerdict, info: dict[str, Any]) -> tuple[list[Message], bool]:
        """Carry out a ``code`` or ``tool_call`` turn: ``(observation, submitted)``.

        Put a sandbox failure (not a failing program) into ``info["error"]``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement act()")

    async def score(self, task: Task) -> EvalResult:
        """The reward of the episode as it stands."""
        raise NotImplementedError(f"{type(self).__name__} must implement score()")

    async def teardown(self) -> None:
        """Release what ``setup`` made (the base: nothing)."""

    # ---------------------------------------------------------------- the lifecycle
    @property
    def task(self) -> Task | None:
        """The episode's task (``None`` before reset)."""
        return self._task

    @property
    def turns(self) -> int:
        """Assistant turns taken so far."""
        return self._turns

    @property
    def reason(self) -> TerminationReason | None:
        """Why the episode ended (``None`` while it runs)."""
        return self._reason

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Start the one episode of this instance; ``seed`` is unused by the built-ins (deterministic per task)."""
        if self._closed or self._task is not None:
            raise EpisodeOverError("an env serves one episode: create a new env per episode")
        start = time.perf_counter()
        facts = await self.setup(task)
        await self._lease.get()  # create an owned sandbox now (the Initializer stage), not mid-episode
        self._task = task
        self.info = {"init_s": round(time.perf_counter() - start, 6), **facts}
        messages = [] if self.system_prompt is None else [Message(role=Role.SYSTEM, content=self.system_prompt)]
        if task.messages:  # a task file's chat: its own instructions win over the env's system prompt
            own = any(m.role is Role.SYSTEM for m in task.messages) or any(
                requested_answer_format(m.content or "") for m in task.messages if m.role is Role.USER
            )
            return [*([] if own else messages), *task.messages]
        messages.append(Message(role=Role.USER, content=task.prompt))
        return messages

    def _end(self, reason: TerminationReason, observation: list[Message], info: dict[str, Any]) -> StepResult:
        self._reason = reason
        return final_result(reason, observation, info)

    async def step(self, action: Message) -> StepResult:
        """Judge and apply one assistant message (see the module docstring)."""
        check_step(action, started=self._task is not None, ended=self._reason is not None, closed=self._closed)
        self._turns += 1
        info: dict[str, Any] = {"turn": self._turns}
        if self.max_action_chars is not None and len(action.content or "") > self.max_action_chars:
            info["action"] = "overlong"
            return self._end(TerminationReason.OVERLONG, [], info)
        verdict = judge_message(action, self.rules)
        info["action"] = verdict.kind.value
        if verdict.kind is ActionKind.ANSWER:
            self.answer = verdict.answer
            info["answer"] = verdict.answer
            return self._end(self.answer_reason, [], info)
        if verdict.kind is ActionKind.VOID:
            return self._end(TerminationReason.VOID, [], info)
        observation, submitted = await self.act(verdict, info)
        if "error" in info:
            return self._end(TerminationReason.ERROR, observation, info)
        if submitted:
            return self._end(TerminationReason.SUBMITTED, observation, info)
        if self._turns >= self.max_turns:
            return self._end(TerminationReason.MAX_TURNS, observation, info)
        return StepResult(observation, info=info)

    async def evaluate(self) -> EvalResult:
        """:meth:`score` plus the episode facts (``reason``, ``turns``, the ``setup`` facts) in ``info``."""
        result = await self.score(check_evaluable(self._task, self._closed))
        reason = None if self._reason is None else self._reason.value
        result.info = {**self.info, **result.info, "reason": reason, "turns": self._turns}
        return result

    async def close(self) -> None:
        """Release the episode (``teardown``) and an owned sandbox; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.teardown()
        finally:
            await self._lease.close()

    # ---------------------------------------------------------------- for subclasses
    async def sandbox(self) -> Sandbox:
        """The episode's sandbox (shared, or owned by this env)."""
        return await self._lease.get()

    async def run_commands(
        self,
        commands: list[tuple[Lang, str]],
        info: dict[str, Any],
        *,
        timeout_s: float | None = None,
        workdir: Any = None,
        session: str | None = None,
        compact_errors: bool = True,
        show_status: bool = False,
    ) -> list[Message]:
        """Run ``(lang, code)`` pairs in order; one tool message with their outputs (see :mod:`.observation`).

        Exit codes, time-outs and the run time go into ``info``; a sandbox
        failure stops the remaining commands and sets ``info["error"]``.
        """
        sandbox = await self._lease.get()
        runs = await run_blocks(sandbox, commands, timeout_s=timeout_s, workdir=workdir, session=session)
        info.update(runs.info())
        if runs.infra_error is not None:
            info["error"] = f"sandbox error: {runs.infra_error}"
        text = "\n".join(
            observation_text(r, compact_errors=compact_errors, show_status=show_status) for r in runs.results
        )
        return [tool_message(wrap_output(clip(text, self.max_obs_chars)))]
