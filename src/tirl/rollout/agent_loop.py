"""One episode, token by token: generate a turn, let the env judge and run it, append the observation.

:class:`AgentLoop` is the :class:`~tirl.rollout.base.EpisodeRunner` of tirl's
token-level backends. The context is built by concatenation only: prompt ids,
then each turn's sampled ids exactly as the generator returned them, then the
observation ids rendered by the :class:`~tirl.models.chat_format.ChatFormat`.
Nothing is decoded and re-tokenised, so the ids the trainer scores are the ids
that were sampled, and their log-probs are the sampler's.

The loss mask is 1 exactly on sampled ids. Prompt, template and tool-output
ids are forced into the context, not chosen by the policy: a gradient on them
would train the model to predict the sandbox's output (or the template),
which is not its action, and their log-probs under the sampler do not exist.

Stop conditions, in order: the env terminates (answer, void turn) or
truncates; the total token cap (``max_total_tokens``, prompt included) is hit
(``overlong``); ``max_turns`` turns were taken (``max_turns``). An exception
from the env or the generator ends the episode with ``error`` and the message
in ``Trajectory.error`` (never lost). The env judges each turn with the shared
rule (:mod:`tirl.parsing`); the loop records the verdict in the turn record.

Tool calls: the sampled turn becomes the assistant message through
:meth:`~tirl.models.chat_format.ChatFormat.assistant_message`, so with a
template that renders Hermes ``<tool_call>`` blocks (``tirl model init``'s)
the calls are parsed into ``tool_calls`` (ids ``call_{turn}_{k}``), the void
rule counts well-formed ones as actions and the env executes them. Tool
messages the env returns without a ``tool_call_id`` get the ids of the
turn's calls in order, and are rendered as the template renders a ``tool``
turn. Tool definitions for the prompt: the env's own ``tools`` attribute when
it declares some (a verifiers env's functions), else :attr:`AgentLoop.tools`
(``env.tools = true``: the built-in env's python or bash/submit tools).

Not covered: the loop never calls ``env.evaluate`` or ``env.close`` (the
rollout stages do: training, held-out evaluation and SFT demonstrations all
run their episodes through :mod:`tirl.rollout.pipeline`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

from tirl.envs.base import Env, StepResult, Task
from tirl.errors import describe
from tirl.inference.base import GenerationResult, Generator, SamplingParams
from tirl.models.chat_format import ChatFormat
from tirl.parsing import ParseRules, judge_message
from tirl.types import Message, Role, TerminationReason, Trajectory, TurnRecord


@dataclass(slots=True)
class AgentLoop:
    """Multi-turn episode runner over token ids.

    >>> import inspect
    >>> inspect.iscoroutinefunction(AgentLoop.__call__)
    True
    """

    generator: Generator
    chat: ChatFormat
    params: SamplingParams = field(default_factory=SamplingParams)  # max_new_tokens is the per-turn cap
    max_turns: int = 4
    max_total_tokens: int = 512
    rules: ParseRules = field(default_factory=ParseRules)  # only to label turn records; the env judges
    seed: int | None = None  # set: each turn samples with a seed from (seed, trajectory id, turn) — reproducible
    tools: tuple[dict[str, Any], ...] = ()  # tool definitions (OpenAI schema) rendered into the prompt

    def turn_seed(self, traj_id: str, turn: int) -> int | None:
        """The sampling seed of one turn (``None`` when ``seed`` is unset: the generator's own RNG)."""
        if self.seed is None:
            return self.params.seed
        digest = hashlib.sha256(f"{self.seed}/{traj_id}/{turn}".encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns={self.max_turns} must be at least 1")
        if self.max_total_tokens <= 1:
            raise ValueError(f"max_total_tokens={self.max_total_tokens} must be greater than 1")

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Run the episode; fills the token view, messages, turn records and the termination."""
        try:
            await self._run(env, initial, traj)
        except Exception as exc:  # generator or chat-format failure: flagged, never lost
            traj.termination = TerminationReason.ERROR
            traj.error = describe(exc)
        traj.check_token_view()

    def _append(self, traj: Trajectory, ids: list[int], logprobs: list[float] | None) -> None:
        traj.token_ids.extend(ids)
        if logprobs is None:  # forced ids (prompt, template, tool output): not the policy's actions
            traj.loss_mask.extend([0] * len(ids))
            traj.logprobs.extend([0.0] * len(ids))
        else:  # sampled ids: trained on, with the sampler's log-probs
            traj.loss_mask.extend([1] * len(ids))
            traj.logprobs.extend(logprobs)

    async def _run(self, env: Env, initial: list[Message], traj: Trajectory) -> None:
        if not traj.messages:
            traj.messages.extend(initial)
        prompt = self.chat.prompt_ids(initial, tools=list(getattr(env, "tools", None) or self.tools or ()) or None)
        self._append(traj, prompt, None)
        traj.prompt_len = len(prompt)
        versions: list[int] = []
        for index in range(self.max_turns):
            budget = self.max_total_tokens - len(traj.token_ids)
            if budget <= 0:
                traj.termination = TerminationReason.OVERLONG
                return
            max_new = min(self.params.max_new_tokens, budget)
            t0 = time.perf_counter()
            res: GenerationResult = await self.generator.generate(
                list(traj.token_ids), replace(self.params, max_new_tokens=max_new, seed=self.turn_seed(traj.id, index))
            )
            gen_s = time.perf_counter() - t0
            versions.append(res.policy_version)
            traj.policy_version = min(versions)
            self._append(traj, list(res.token_ids), list(res.logprobs))
            message = self.chat.assistant_message(res.token_ids, call_id_prefix=f"call_{index}")
            traj.messages.append(message)
            action = judge_message(message, self.rules).kind.value
            record = TurnRecord(
                index=index,
                action=action,
                sampled_tokens=len(res.token_ids),
                observation_tokens=0,
                gen_s=gen_s,
                env_s=0.0,
                finish_reason=res.finish_reason,
                policy_version=res.policy_version,
            )
            traj.turns.append(record)
            cut_by_total = res.finish_reason == "length" and len(traj.token_ids) >= self.max_total_tokens
            if (cut_by_total and max_new < self.params.max_new_tokens) or not res.token_ids:
                traj.termination = TerminationReason.OVERLONG  # the whole-episode cap cut this turn
                return
            t1 = time.perf_counter()
            try:
                step: StepResult = await env.step(message)
            except Exception as exc:
                record.env_s = time.perf_counter() - t1
                traj.termination = TerminationReason.ERROR
                traj.error = f"env.step failed in turn {index}: {describe(exc)}"
                return
            record.env_s = time.perf_counter() - t1
            if action == "tool_call":  # the env ran the calls (code or an answer in the content wins over calls)
                step.observation = answer_calls(message, step.observation)
            traj.messages.extend(step.observation)
            if step.terminated or step.truncated:
                default = TerminationReason.ANSWERED if step.terminated else TerminationReason.MAX_TURNS
                traj.termination = step.reason or default
                return
            obs = self.chat.observation_ids(step.observation, res.token_ids)
            record.observation_tokens = len(obs)
            if len(traj.token_ids) + len(obs) >= self.max_total_tokens:
                traj.termination = TerminationReason.OVERLONG  # no room left for another turn
                return
            self._append(traj, obs, None)
        traj.termination = TerminationReason.MAX_TURNS


def answer_calls(message: Message, observation: list[Message]) -> list[Message]:
    """Tool messages without a ``tool_call_id`` get the ids of ``message``'s calls, in order."""
    ids = iter([c.id for c in message.tool_calls if c.id])
    out = []
    for m in observation:
        if m.role is Role.TOOL and m.tool_call_id is None:
            call_id = next(ids, None)
            m = replace(m, tool_call_id=call_id) if call_id else m
        out.append(m)
    return out
