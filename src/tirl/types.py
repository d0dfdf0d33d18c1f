"""Typed core objects passed between tirl's modules.

Messages follow the OpenAI chat shape (``role``, ``content``, ``tool_calls``).
A :class:`Trajectory` carries both the message view (what the filter and the
diagnostics read) and the token view (what the trainer scores): the token ids
are the ones that were sampled and observed, concatenated turn by turn, never
re-tokenised from the messages.

Not covered here: multimodal content parts (only string content is supported)
and per-token metadata other than log-probs and the loss mask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class TerminationReason(StrEnum):
    """Why an episode ended.

    ``answered`` and ``submitted`` end the task (Gymnasium's *terminated*);
    ``max_turns`` and ``overlong`` are limits (*truncated*); ``void`` is the
    void-turn rule; the rest are infrastructure failures, which are counted and
    excluded from the update (never silently dropped).
    """

    ANSWERED = "answered"
    SUBMITTED = "submitted"
    VOID = "void"
    MAX_TURNS = "max_turns"
    OVERLONG = "overlong"
    ERROR = "error"
    INIT_FAILED = "init_failed"
    EVAL_FAILED = "eval_failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def is_failure(self) -> bool:
        """True for infrastructure failures that must not enter the update."""
        return self in _FAILURES


_FAILURES = frozenset(
    {
        TerminationReason.ERROR,
        TerminationReason.INIT_FAILED,
        TerminationReason.EVAL_FAILED,
        TerminationReason.TIMEOUT,
        TerminationReason.CANCELLED,
    }
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the assistant (OpenAI shape).

    ``arguments`` is kept as the raw value the model produced (normally a JSON
    string) so that malformed calls can be judged, not repaired.
    """

    name: str | None
    arguments: Any
    id: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ToolCall:
        """Read ``{"id", "type": "function", "function": {"name", "arguments"}}`` or a flat dict."""
        if not isinstance(data, dict):
            return cls(name=None, arguments=None)
        fn = data.get("function", data)
        if not isinstance(fn, dict):
            return cls(name=None, arguments=None, id=data.get("id"))
        name = fn.get("name")
        return cls(name=name if isinstance(name, str) else None, arguments=fn.get("arguments"), id=data.get("id"))

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI wire shape."""
        out: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # a tool message: the id of the call it answers

    @classmethod
    def from_dict(cls, data: Any) -> Message:
        """Parse a message dict; raises ``ValueError`` with the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a message must be an object, got {type(data).__name__}")
        try:
            role = Role(str(data.get("role")))
        except ValueError:
            raise ValueError(f"message role {data.get('role')!r} is not one of system, user, assistant, tool") from None
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"message content must be a string or null, got {type(content).__name__}")
        raw_calls = data.get("tool_calls") or ()
        if not isinstance(raw_calls, list | tuple):
            raise ValueError("tool_calls must be a list")
        call_id = data.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise ValueError(f"tool_call_id must be a string or null, got {type(call_id).__name__}")
        calls = tuple(ToolCall.from_dict(c) for c in raw_calls)
        return cls(role=role, content=content, tool_calls=calls, tool_call_id=call_id)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of the trajectory format."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(slots=True)
class TurnRecord:
    """What happened in one assistant turn of a token-level episode."""

    index: int
    action: str  # parsing.ActionKind value: code | answer | tool_call | void
    sampled_tokens: int
    observation_tokens: int
    gen_s: float
    env_s: float
    finish_reason: str = "stop"
    policy_version: int = 0  # the policy version that sampled this turn (asynchronous RL: may lag the trainer)


@dataclass(slots=True)
class StageTiming:
    """Wall-clock times (seconds since the rollout started) of one pipeline stage."""

    queued: float | None = None
    started: float | None = None
    finished: float | None = None
    attempts: int = 0


@dataclass(slots=True)
class Trajectory:
    """One episode: messages, the token view for training, the outcome and its timings.

    Token view invariants (checked by :meth:`check_token_view`):
    ``len(token_ids) == len(loss_mask) == len(logprobs)``; ``loss_mask[i] == 1``
    exactly for tokens the policy sampled (tool output, prompt and template
    tokens are 0); ``logprobs[i]`` is the sampler's log-prob for sampled
    tokens and 0.0 elsewhere.

    Typed facts that cross modules (never ``info`` keys): ``policy_version``
    (the rollout: the oldest policy version that sampled a turn), ``correct``
    (the evaluator's verdict; ``None`` when not evaluated), ``void`` and
    ``void_turns`` (the void-turn filter's verdict) and ``loss_weight`` (the
    filter's weight: 0 keeps the trajectory in its group's statistics but
    takes it out of the loss). ``info`` holds free-form extras only.
    """

    id: str
    messages: list[Message]
    group: str | None = None
    reward: float | None = None
    answer: str | None = None
    termination: TerminationReason | None = None
    error: str | None = None
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_len: int = 0
    turns: list[TurnRecord] = field(default_factory=list)
    stages: dict[str, StageTiming] = field(default_factory=dict)
    policy_version: int = 0
    correct: bool | None = None
    void: bool = False
    void_turns: list[int] = field(default_factory=list)
    loss_weight: float = 1.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """An infrastructure failure: flagged, counted, excluded from the update."""
        return self.termination is not None and self.termination.is_failure

    @property
    def assistant_messages(self) -> list[Message]:
        """The assistant messages, in order (the ones the void rule judges)."""
        return [m for m in self.messages if m.role is Role.ASSISTANT]

    def check_token_view(self) -> None:
        """Raise ``ValueError`` if the token arrays disagree in length or the mask is not 0/1."""
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"trajectory {self.id}: token_ids ({n}), loss_mask ({len(self.loss_mask)}) and "
                f"logprobs ({len(self.logprobs)}) must have the same length"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"trajectory {self.id}: loss_mask must contain only 0 and 1")

    def to_dict(self, *, tokens: bool = False) -> dict[str, Any]:
        """The trajectory JSONL shape of ``DESIGN.md`` plus tirl's optional fields."""
        out: dict[str, Any] = {"id": self.id, "group": self.group, "messages": [m.to_dict() for m in self.messages]}
        if self.reward is not None:
            out["reward"] = self.reward
        if self.answer is not None:
            out["answer"] = self.answer
        if self.termination is not None:
            out["termination"] = self.termination.value
        if self.error is not None:
            out["error"] = self.error
        if self.turns:
            out["turns"] = [
                {
                    "index": t.index,
                    "action": t.action,
                    "sampled_tokens": t.sampled_tokens,
                    "observation_tokens": t.observation_tokens,
                    "gen_s": round(t.gen_s, 6),
                    "env_s": round(t.env_s, 6),
                    "finish_reason": t.finish_reason,
                    "policy_version": t.policy_version,
                }
                for t in self.turns
            ]
        if self.stages:
            out["stages"] = {
                name: {"queued": s.queued, "started": s.started, "finished": s.finished, "attempts": s.attempts}
                for name, s in self.stages.items()
            }
        out["policy_version"] = self.policy_version
        if self.correct is not None:
            out["correct"] = self.correct
        if self.void:
            out["void"] = True
            out["void_turns"] = list(self.void_turns)
        if self.loss_weight != 1.0:
            out["loss_weight"] = self.loss_weight
        if self.info:
            out["info"] = self.info
        if tokens:
            out["token_ids"] = self.token_ids
            out["loss_mask"] = self.loss_mask
            out["prompt_len"] = self.prompt_len
        return out

    @classmethod
    def from_dict(cls, data: Any, *, default_id: str = "") -> Trajectory:
        """Parse one trajectory object; raises ``ValueError`` naming the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a trajectory must be a JSON object, got {type(data).__name__}")
        if "messages" not in data:
            raise ValueError("missing the required field 'messages'")
        raw = data["messages"]
        if not isinstance(raw, list):
            raise ValueError("'messages' must be a list of message objects")
        messages: list[Message] = []
        for i, m in enumerate(raw):
            try:
                messages.append(Message.from_dict(m))
            except ValueError as exc:
                raise ValueError(f"messages[{i}]: {exc}") from None
        reward = data.get("reward")
        if reward is not None and not isinstance(reward, int | float):
            raise ValueError("'reward' must be a number or null")
        answer = data.get("answer")
        term = data.get("termination")
        traj_id = data.get("id", default_id)
        group = data.get("group")
        info = data.get("info")
        if info is None:
            info = {}
        elif not isinstance(info, dict):  # "info": 5 crashed every reader that looks inside it
            raise ValueError(f"'info' must be an object or null, got {type(info).__name__}")
        error = data.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"'error' must be a string or null, got {type(error).__name__}")
        legacy = info  # files written before these fields were typed keep them in info
        void = data.get("void", legacy.get("void", False))
        if void is not None and not isinstance(void, bool):  # "false" (a string) was read as void
            raise ValueError(f"'void' must be true, false or null, got {type(void).__name__}")
        correct = data.get("correct", legacy.get("correct"))
        version = data.get("policy_version", legacy.get("policy_version", 0))
        void_turns = data.get("void_turns", legacy.get("void_turns"))
        weight = data.get("loss_weight", legacy.get("loss_weight", 1.0))
        return cls(
            id=str(traj_id),
            group=None if group is None else str(group),
            messages=messages,
            reward=None if reward is None else float(reward),
            answer=None if answer is None else str(answer),
            termination=TerminationReason(str(term)) if term in TerminationReason._value2member_map_ else None,
            error=error,
            policy_version=int(version) if isinstance(version, int | float) else 0,
            correct=correct if isinstance(correct, bool) else None,
            void=bool(void),
            void_turns=[i for i in void_turns if isinstance(i, int)] if isinstance(void_turns, list) else [],
            loss_weight=float(weight) if isinstance(weight, int | float) else 1.0,
            info=info,
        )

    def to_json(self, *, tokens: bool = False) -> str:
        """One JSONL line."""
        return json.dumps(self.to_dict(tokens=tokens), ensure_ascii=False)


@dataclass(slots=True)
class Group:
    """Trajectories sampled from the same prompt (the unit of GRPO normalisation)."""

    id: str
    trajectories: list[Trajectory]

    def __len__(self) -> int:
        return len(self.trajectories)
