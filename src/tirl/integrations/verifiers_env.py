r"""verifiers environments (``MultiTurnEnv``/``ToolEnv``, verifiers 0.3.x) as tirl environments.

Names: ``verifiers:ENV_ID`` loads an installed verifiers environment
(``verifiers.load_environment(ENV_ID)``); ``verifiers:pkg.module:factory``
calls ``factory()``, which returns a ``vf.MultiTurnEnv`` (a ``vf.ToolEnv`` is
one). The environment is loaded once per process and shared by the episodes;
its per-episode state is verifiers' own ``State``.

How an episode runs: verifiers' ``rollout()`` is a template method that owns
the model call. The adapter runs that very loop — its stop conditions,
``env_response``, tool calls and cleanup — with a *bridge client* in place of
the model: when verifiers asks the client for a response, the adapter hands
the prompt to tirl's rollout runner (``reset`` returns the first prompt,
``step`` returns what verifiers appended after the model's turn: tool
messages keep their ``tool_call_id``), and the assistant message tirl sampled
(token-in/token-out) becomes the response. Nothing is re-tokenised here.

* Each turn is judged first by the run's action rule (:func:`action_rules`:
  tool calls act, ``\boxed{}``/``<answer>`` answer; fenced code does not, as
  verifiers does not run it). A void turn ends the episode (``void``); the
  verifiers rollout is stopped and its state kept for scoring.
* Stop conditions map to tirl's termination reasons (:data:`STOP_REASONS`):
  ``no_tools_called`` → ``answered``; ``max_turns_reached`` → ``max_turns``;
  ``prompt_too_long``/``max_total_completion_tokens_reached`` → ``overlong``;
  ``timeout_reached`` → ``timeout``; ``has_final_env_response`` and any
  environment-defined condition → ``submitted``; ``has_error`` → ``error`` (an
  infrastructure failure) unless the error is a tool parse/call error caused
  by the model's call, which is the episode's failure (``submitted``, scored
  by the rubric). tirl's own ``env.max_turns`` also truncates (``max_turns``).
* ``evaluate`` scores with the environment's rubric (``rubric.score_rollout``;
  ``reward`` = its weighted sum, ``correct`` = reward >= 1.0, the metrics in
  ``info["metrics"]``) and runs the rubric's cleanup. verifiers itself scores a
  reward function that raises or returns a non-number 0; one that returns NaN or
  ±inf makes the sum non-finite, and the episode scores 0 with ``eval_failure``
  ``nonfinite_reward`` naming that function (its metric is ``null``;
  :class:`~tirl.envs.base.EvalResult` says why it is the episode's failure).

Not covered: group-level reward functions (``Rubric.score_group``; they need
every rollout of a group at once), verifiers ``v1`` environments (0.4+),
``SingleTurnEnv`` sampling arguments (tirl's own apply), multimodal content
(text parts are joined), and environments whose ``rollout`` is not
``MultiTurnEnv``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from typing import Any

from tirl.config import EnvConfig
from tirl.envs.base import (
    EnvError,
    EpisodeOverError,
    EvalResult,
    StepResult,
    Task,
    check_evaluable,
    check_step,
    checked_result,
    reward_number,
    trainable,
)
from tirl.errors import ConfigError, SetupError
from tirl.parsing import ActionKind, ParseRules, judge_message
from tirl.types import Message, Role, TerminationReason, ToolCall

__all__ = ["RULES", "STOP_REASONS", "VerifiersEnv", "action_rules", "load_vf_env", "task_source"]

#: The action rule of verifiers envs: tool calls act; \boxed{} or <answer> answer; fenced code is not run.
RULES = ParseRules(exec_langs=frozenset())
STOP_REASONS: dict[str, TerminationReason] = {
    "no_tools_called": TerminationReason.ANSWERED,
    "max_turns_reached": TerminationReason.MAX_TURNS,
    "prompt_too_long": TerminationReason.OVERLONG,
    "max_total_completion_tokens_reached": TerminationReason.OVERLONG,
    "timeout_reached": TerminationReason.TIMEOUT,
    "has_final_env_response": TerminationReason.SUBMITTED,
    "has_error": TerminationReason.ERROR,
}
_TERMINATING = frozenset({TerminationReason.ANSWERED, TerminationReason.SUBMITTED, TerminationReason.VOID})
_ROLES = {"user": Role.USER, "tool": Role.TOOL, "system": Role.SYSTEM, "assistant": Role.ASSISTANT, "text": Role.USER}
_LOADED: dict[str, Any] = {}


def _vf() -> Any:
    try:
        import verifiers as vf
    except ImportError as exc:
        raise SetupError(
            f"verifiers is not installed ({exc}) — run `make install` or pip install 'verifiers<0.4'"
        ) from None
    if not hasattr(vf, "MultiTurnEnv"):
        raise SetupError("this verifiers has no MultiTurnEnv (0.4+ keeps only v1) — pip install 'verifiers<0.4'")
    return vf


def load_vf_env(variant: str) -> Any:
    """The verifiers environment of ``verifiers:VARIANT`` (loaded once per process)."""
    if variant in _LOADED:
        return _LOADED[variant]
    vf = _vf()
    if not variant.strip():
        raise ConfigError(
            "env.name=verifiers: names no environment — write verifiers:ENV_ID or verifiers:pkg.mod:factory"
        )
    if ":" in variant:
        from tirl.envs.registry import import_object

        env = import_object(variant, "verifiers environment factory")()
    else:
        quiet = logging.getLogger("verifiers")  # its loader logs the failure too; tirl prints one error line
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            env = vf.load_environment(variant)
        except Exception as exc:
            raise ConfigError(f"verifiers environment {variant!r} could not be loaded ({exc}) — install it, "
                              "or name a factory: verifiers:pkg.module:load_environment") from None  # fmt: skip
        finally:
            quiet.setLevel(level)
    if not isinstance(env, vf.MultiTurnEnv):
        raise ConfigError(f"verifiers:{variant} gave {type(env).__name__}, not a vf.MultiTurnEnv (or vf.ToolEnv)")
    _LOADED[variant] = env
    return env


def _variant(name: str) -> str:
    family, _, rest = name.partition(":")
    if family != "verifiers":
        raise ConfigError(f"environment {name!r} is not a verifiers name — use verifiers:ENV_ID")
    return rest


def action_rules(config: EnvConfig) -> ParseRules:
    """The rule of every verifiers environment (``filter.action_rule=auto``): :data:`RULES`."""
    return RULES


def _row_task(row: dict[str, Any], index: int) -> Task:
    prompt = row.get("prompt")
    messages = tuple(_message(m) for m in prompt) if isinstance(prompt, list) else ()
    users = [m.content or "" for m in messages if m.role is Role.USER]
    if not users and not isinstance(prompt, str):
        raise ConfigError(f"verifiers dataset row {index} has no user message in its prompt")
    answer = row.get("answer")
    example = row.get("example_id", index)
    vf_input = {k: row[k] for k in ("prompt", "answer", "info", "task", "example_id") if k in row}
    vf_input.setdefault("example_id", example)
    return Task(id=f"vf-{example}", prompt=users[-1] if users else str(prompt),
                answer=None if answer is None else str(answer), kind="verifiers",
                data={"vf_input": json.loads(json.dumps(vf_input, default=str))}, messages=messages)  # fmt: skip


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """``n`` tasks, shuffled by ``seed``: the rows of ``env.tasks_file`` (verl/SkyRL format) or the env's dataset."""
    if config.tasks_file:
        from tirl.envs.tasks.files import TaskFileSpec, read_task_rows

        spec = TaskFileSpec(prompt_key=config.prompt_key, answer_key=config.answer_key)
        rows = [{"prompt": [m.to_dict() for m in r.messages], "answer": r.answer, "info": r.extra_info,
                 "example_id": r.id} for r in read_task_rows(config.tasks_file, spec)]  # fmt: skip
    else:
        dataset = load_vf_env(_variant(config.name)).get_dataset()
        rows = [dict(r) for r in dataset]
    random.Random(seed).shuffle(rows)
    return [_row_task(row, i) for i, row in enumerate(rows[:n])]


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    parts = [p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") for p in content]
    return "".join(str(p) for p in parts)


def _message(m: Any) -> Message:
    """A verifiers message (pydantic model or dict) as a tirl message; ``tool_call_id`` carried."""
    get = m.get if isinstance(m, dict) else lambda k, d=None: getattr(m, k, d)
    role = _ROLES.get(str(get("role")), Role.USER)
    calls = tuple(
        ToolCall(name=c.get("name"), arguments=c.get("arguments"), id=c.get("id"))
        if isinstance(c, dict) and "function" not in c
        else ToolCall.from_dict(c)
        if isinstance(c, dict)
        else ToolCall(name=c.name, arguments=c.arguments, id=c.id)
        for c in get("tool_calls") or ()
    )
    return Message(role=role, content=_text(get("content")), tool_calls=calls, tool_call_id=get("tool_call_id"))


def _response(action: Message, turn: int) -> Any:
    """The tirl assistant message as verifiers' ``Response`` (tool-call ids made when the model gave none)."""
    from verifiers.legacy.types import Response, ResponseMessage
    from verifiers.legacy.types import ToolCall as VfToolCall

    calls = [
        VfToolCall(id=c.id or f"call_{turn}_{k}", name=c.name or "",
                   arguments=c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
        for k, c in enumerate(action.tool_calls)
    ]  # fmt: skip
    message = ResponseMessage(content=action.content, tool_calls=calls or None, is_truncated=False,
                              finish_reason="tool_calls" if calls else "stop")  # fmt: skip
    return Response(id=f"tirl-{turn}", created=int(time.time()), model="tirl", message=message)


def _bridge_class() -> type:
    from verifiers.legacy.clients.client import Client

    class BridgeClient(Client):  # type: ignore[misc, valid-type]
        """A verifiers client whose "model" is tirl: prompts go out on a queue, sampled turns come back."""

        def __init__(self) -> None:
            super().__init__(None)
            self.prompts: asyncio.Queue[Any] = asyncio.Queue()
            self.actions: asyncio.Queue[Message] = asyncio.Queue()
            self.turn = 0
            self.state: Any = None  # verifiers' State of the rollout (kept if the rollout is stopped)

        def setup_client(self, config: Any) -> None:
            return None

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[Any, dict[str, Any]]:
            return messages, {}

        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any, tools: Any, **kw: Any) -> Any:
            self.state = kw.get("state", self.state)
            await self.prompts.put(prompt)
            action = await self.actions.get()
            self.turn += 1
            return _response(action, self.turn)

        async def raise_from_native_response(self, response: Any) -> None:
            return None

        async def from_native_response(self, response: Any) -> Any:
            return response

        async def close(self) -> None:
            return None

    return BridgeClient


class VerifiersEnv:
    """One episode of a verifiers ``MultiTurnEnv`` (see the module docstring)."""

    name = "verifiers"
    takes_rules = True  # make_env passes the run's action rule (the void filter's)
    takes_offer_tools = True  # make_env passes env.offer_tools

    def __init__(
        self,
        *,
        variant: str = "",
        max_turns: int = 4,
        rules: ParseRules = RULES,
        offer_tools: bool = True,
        **_: Any,  # sandbox, sandbox_config: verifiers envs run their own tools
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.vf_env = load_vf_env(variant)
        self.variant = variant
        self.max_turns = max_turns
        self.rules = rules
        defs = getattr(self.vf_env, "tool_defs", None) or []
        schema = [{"type": "function", "function": {"name": d.name, "description": d.description,
                                                    "parameters": d.parameters}} for d in defs]  # fmt: skip
        self.tools: tuple[dict[str, Any], ...] = tuple(schema) if offer_tools else ()  # rendered by the AgentLoop
        self.state: Any = None
        self._client: Any = None
        self._rollout: asyncio.Task[Any] | None = None
        self._prompt: list[Any] = []
        self._turns = 0
        self._reason: TerminationReason | None = None
        self._closed = False

    async def _next_prompt(self) -> list[Any] | None:
        """The next prompt verifiers asks the model about, or ``None`` when its rollout ended."""
        assert self._rollout is not None
        getter = asyncio.ensure_future(self._client.prompts.get())
        done, _ = await asyncio.wait({getter, self._rollout}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return list(getter.result())
        getter.cancel()
        self.state = self._rollout.result()
        return None

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Start verifiers' rollout of ``task`` and return its first prompt (``seed`` unused)."""
        if self._closed or self._rollout is not None:
            raise EpisodeOverError("an env serves one episode: create a new env per episode")
        vf_input = dict(task.data.get("vf_input") or {})
        vf_input.setdefault("prompt", [m.to_dict() for m in task.messages] or task.prompt)
        vf_input.setdefault("example_id", task.id)
        if task.answer is not None:
            vf_input.setdefault("answer", task.answer)
        self._client = _bridge_class()()
        self._rollout = asyncio.ensure_future(self.vf_env.rollout(vf_input, self._client, "tirl", {}))
        prompt = await self._next_prompt()
        if prompt is None:
            raise EnvError(f"verifiers ended the rollout before the first turn: {self.state.get('error')!r}")
        self._prompt = prompt
        return [_message(m) for m in prompt]

    async def _stop(self) -> None:
        """Stop a rollout that still waits for a turn; its cleanup renders the state."""
        if self._rollout is not None and not self._rollout.done():
            self._rollout.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rollout
        if self.state is None and self._rollout is not None:
            self.state = self._client.state if self._rollout.cancelled() else self._rollout.result()

    def _end(self, reason: TerminationReason, obs: list[Message], info: dict[str, Any]) -> StepResult:
        self._reason = reason
        info["reason"] = reason.value
        terminated = reason in _TERMINATING
        return StepResult(obs, terminated=terminated, truncated=not terminated, reason=reason, info=info)

    def _stop_reason(self) -> TerminationReason:
        vf = _vf()
        condition = str(self.state.get("stop_condition") or "")
        error = self.state.get("error")
        if condition == "has_error" and isinstance(error, vf.ToolParseError | vf.ToolCallError):
            return TerminationReason.SUBMITTED  # the model's call failed: the episode's failure, scored
        return STOP_REASONS.get(condition, TerminationReason.SUBMITTED)

    async def step(self, action: Message) -> StepResult:
        """Judge the turn; hand it to verifiers' rollout; return what verifiers appended, or the ending."""
        check_step(action, started=self._rollout is not None, ended=self._reason is not None, closed=self._closed)
        self._turns += 1
        verdict = judge_message(action, self.rules)
        info: dict[str, Any] = {"turn": self._turns, "action": verdict.kind.value}
        await self._client.actions.put(action)
        prompt = await self._next_prompt()
        if verdict.kind is ActionKind.VOID:
            await self._stop()
            return self._end(TerminationReason.VOID, [], info)
        if prompt is None:
            info["stop_condition"] = self.state.get("stop_condition")
            return self._end(self._stop_reason(), [], info)
        obs = [_message(m) for m in prompt[len(self._prompt) + 1 :]]
        self._prompt = prompt
        if self._turns >= self.max_turns:
            await self._stop()
            return self._end(TerminationReason.MAX_TURNS, obs, info)
        return StepResult(obs, info=info)

    async def evaluate(self) -> EvalResult:
        """The rubric's score of the rollout as it stands (see the module docstring)."""
        check_evaluable(self._rollout, self._closed)
        await self._stop()
        if self.state is None:
            raise EnvError("the verifiers rollout was cancelled before it produced a state")
        await self.vf_env.rubric.score_rollout(self.state)
        await self.vf_env.rubric.cleanup(self.state)
        metrics = {k: float(v) for k, v in (self.state.get("metrics") or {}).items()}
        bad = [k for k, v in metrics.items() if not trainable(v)]
        scorer = f"reward function {', '.join(bad)}" if bad else "rubric"
        source = f"the {scorer} of verifiers env {self.variant!r}"
        raw = self.state.get("reward")
        reward = 0.0 if raw is None else reward_number(raw, source)
        info = {"metrics": metrics, "stop_condition": self.state.get("stop_condition"), "turns": self._turns,
                "reason": None if self._reason is None else self._reason.value}  # fmt: skip
        return checked_result(EvalResult(reward=reward, correct=reward >= 1.0 - 1e-9, info=info), source)

    async def close(self) -> None:
        """Stop the rollout if it still runs; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self._stop()
