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
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tirl.errors import show_value


class Role(StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class TerminationReason(StrEnum):
    """Why an episode ended.

    ``answered`` and ``submitted`` end the task (Gymnasium's *terminated*);
    ``max_turns``, ``overlong`` and ``tool_timeout`` are limits (*truncated*;
    ``tool_timeout``: ``rollout.run_timeout_s`` cut the run while most of its
    time went to the episode's own commands, :mod:`tirl.rollout.pipeline`);
    ``void`` is the void-turn rule; the rest are infrastructure failures, which
    are counted and excluded from the update (never silently dropped).
    """

    ANSWERED = "answered"
    SUBMITTED = "submitted"
    VOID = "void"
    MAX_TURNS = "max_turns"
    OVERLONG = "overlong"
    TOOL_TIMEOUT = "tool_timeout"
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
            raise ValueError(f"a message must be an object, got {json_kind(data)}")
        try:
            role = Role(str(data.get("role")))
        except ValueError:
            raise ValueError(f"message role {data.get('role')!r} is not one of system, user, assistant, tool") from None
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"message content must be a string or null, got {json_kind(content)}")
        raw_calls = data.get("tool_calls")
        if raw_calls is None:
            raw_calls = ()
        elif not isinstance(raw_calls, list | tuple):  # {} and "" were read as no calls
            raise ValueError(f"tool_calls must be a list or null, got {json_kind(raw_calls)}")
        call_id = data.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise ValueError(f"tool_call_id must be a string or null, got {json_kind(call_id)}")
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


class FieldError(ValueError):
    """A trajectory field of the wrong type or value: ``str()`` names the field, what it must be and what it is.

    ``fix`` says what to write instead (the reader's ``error:`` line ends with it).
    """

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.fix = fix


def json_kind(value: Any) -> str:
    """How an error names a JSON value: ``null``, ``true``, ``2.5``, ``NaN``, ``'yes'`` (cut short), ``a list``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not _fits_float(value):
        return f"an integer of {len(str(abs(value)))} digits (beyond 1.8e308)"
    if isinstance(value, int | float | str):
        return show_value(value)
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _is_finite(value: Any) -> bool:
    """A finite JSON number: not a bool, ``NaN``, ``Infinity`` (``1e400`` reads as one) or an integer beyond 1.8e308."""
    return (type(value) is float and math.isfinite(value)) or (type(value) is int and _fits_float(value))


def _fits_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Spec:
    """What one optional top-level field of a trajectory line may hold (``null`` reads as absent unless not).

    ``ok`` tests ``type(v) is int``, never ``isinstance``: ``true`` is an int to Python, not to a JSON reader.
    """

    ok: Callable[[Any], bool]
    expected: str
    fix: str
    nullable: bool = True
    legacy: bool = False  # files written before the typed facts keep this one in 'info'
    item: Callable[[Any], bool] | None = None  # a list's items, each (the error names the first bad one)


_TERMINATIONS = ", ".join(TerminationReason)
_PROMPT_FIX = (
    "write how many leading messages came with the task's prompt as a whole number, at most the number of "
    "messages (or leave the field out: every assistant message is then judged as the policy's)"
)
_SPECS: dict[str, _Spec] = {
    "id": _Spec(lambda v: type(v) is str or type(v) is int, "a string or an integer",
                'write the id as a string, e.g. "id": "t1" (or leave it out: the line number names it)',
                nullable=False),
    "group": _Spec(lambda v: type(v) is str or type(v) is int, "a string, an integer or null",
                   'write the group as a string, e.g. "group": "task-3"'),
    "reward": _Spec(_is_finite, "a finite number or null",
                    "write the reward as a finite number (1 or 0, not true or false; NaN and Infinity are not JSON: "
                    "score the episode 0, or leave the field out)"),
    "answer": _Spec(lambda v: type(v) is str or type(v) is int or (type(v) is float and math.isfinite(v)),
                    "a string, a finite number or null", 'write the answer as a string, e.g. "answer": "3/4"'),
    "termination": _Spec(lambda v: type(v) is str and v in TerminationReason._value2member_map_,
                         f"one of {_TERMINATIONS} or null", "use one of those values, or leave the field out"),
    "error": _Spec(lambda v: type(v) is str, "a string or null", "write the error message as a string"),
    "info": _Spec(lambda v: type(v) is dict, "an object or null", "put free-form extras in an object"),
    "void": _Spec(lambda v: type(v) is bool, "true, false or null", "write true or false", legacy=True),
    "correct": _Spec(lambda v: type(v) is bool, "true, false or null", "write true or false", legacy=True),
    "policy_version": _Spec(lambda v: type(v) is int and v >= 0, "an integer >= 0 or null",
                            "write the policy version as a whole number, e.g. 3", legacy=True),
    "void_turns": _Spec(lambda v: type(v) is list, "a list of integers >= 0 or null",
                        "list the void assistant turns by index from 0, e.g. [0, 2]", legacy=True,
                        item=lambda i: type(i) is int and i >= 0),
    "loss_weight": _Spec(lambda v: _is_finite(v) and v >= 0, "a finite number >= 0 or null",
                         "write the weight as a number >= 0 (0 takes it out of the loss, 1 keeps it)", legacy=True),
    "prompt_messages": _Spec(lambda v: type(v) is int and v >= 0, "an integer >= 0 or null", _PROMPT_FIX),
}  # fmt: skip


def _field(data: dict[str, Any], info: dict[str, Any], name: str) -> Any:
    """The value of field ``name`` (``None`` when absent or null), checked against its spec; else FieldError."""
    spec = _SPECS[name]
    if name in data:
        value, where = data[name], name
    elif spec.legacy and name in info:
        value, where = info[name], f"info.{name}"
    else:
        return None
    if value is None and spec.nullable:
        return None
    if not spec.ok(value):
        raise FieldError(f"'{where}' must be {spec.expected}, got {json_kind(value)}", spec.fix)
    if spec.item is not None:
        for k, item in enumerate(value):
            if not spec.item(item):
                raise FieldError(f"'{where}' must be {spec.expected}, got {json_kind(item)} at [{k}]", spec.fix)
    return value


def _fits(spec: _Spec, value: Any) -> bool:
    return spec.ok(value) and (spec.item is None or all(map(spec.item, value)))


_LEGACY = tuple(name for name, spec in _SPECS.items() if spec.legacy)


def fields_ok(data: dict[str, Any]) -> bool:
    """Whether :func:`trajectory_fields` accepts ``data``: the same checks, nothing built (the filter's fast path)."""
    for name, value in data.items():  # inlined: the fast path runs this on every line
        spec = _SPECS.get(name)
        if spec is None or (value is None and spec.nullable):
            continue
        if not spec.ok(value) or (spec.item is not None and not all(map(spec.item, value))):
            return False
    info = data.get("info")
    if type(info) is dict and info:
        for name in _LEGACY:
            value = info.get(name)
            if value is not None and name not in data and not _fits(_SPECS[name], value):
                return False
    return True


def trajectory_fields(data: dict[str, Any], default_id: str) -> dict[str, Any]:
    """The fields of a trajectory line other than ``messages``, typed: :class:`Trajectory`'s keyword arguments.

    Every field has one type (:data:`_SPECS`); any other raises :class:`FieldError` naming the field, the type
    and the value: nothing is converted from another type (``"id": null`` was the id ``"None"``, ``"reward":
    true`` the reward 1.0, ``"correct": "yes"`` no verdict). A number must be finite: ``NaN``, ``Infinity`` and
    ``1e400`` (which :func:`json.loads` reads as ``Infinity``) are refused in ``reward`` and ``loss_weight``
    (other JSON tools cannot read them, and tirl never writes them: :meth:`Trajectory.to_json` is strict), and so
    is a negative ``loss_weight`` (the trainer treats a weight as "in the loss or not", so -1 silently meant 0);
    ``info`` is free-form and not looked into. ``null`` reads as absent, except for ``id``; a
    missing ``id`` is ``default_id``. The typed facts (``void``, ``correct``, ...) of files written before they
    were typed are read from ``info``. Integers and finite floats of ``answer`` become their text (as the task
    files' ground truth does). ``tirl filter``'s fast path asks :func:`fields_ok` (the same checks) instead.
    """
    info = _field(data, {}, "info") or {}
    tid, group, answer = _field(data, info, "id"), _field(data, info, "group"), _field(data, info, "answer")
    reward, term = _field(data, info, "reward"), _field(data, info, "termination")
    version, void_turns = _field(data, info, "policy_version"), _field(data, info, "void_turns")
    weight = _field(data, info, "loss_weight")
    return {
        "prompt_messages": _field(data, info, "prompt_messages"),
        "id": default_id if tid is None else str(tid),
        "group": None if group is None else str(group),
        "reward": None if reward is None else float(reward),
        "answer": None if answer is None else str(answer),
        "termination": None if term is None else TerminationReason(term),
        "error": _field(data, info, "error"),
        "policy_version": version or 0,
        "correct": _field(data, info, "correct"),
        "void": bool(_field(data, info, "void")),
        "void_turns": list(void_turns or []),
        "loss_weight": 1.0 if weight is None else float(weight),
        "info": info,
    }


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
    prompt_messages: int | None = None  # leading messages that came with the prompt, as a file records it
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
        """The assistant messages, in order (the void rule judges those the policy wrote)."""
        return [m for m in self.messages if m.role is Role.ASSISTANT]

    @property
    def prompt_message_count(self) -> int | None:
        """How many leading messages came with the prompt, not from the policy; ``None`` when nothing tells.

        ``prompt_messages`` when set (a file tirl wrote records it: :meth:`to_dict`); else, from the turn
        records (the runner records one :class:`TurnRecord` per sampled turn, so the policy's assistant messages
        are the last ``len(turns)``), the messages before the policy's first one. A trajectory read from a file
        without ``prompt_messages`` carries no turn records: ``None``, and every assistant message counts as the
        policy's.
        """
        if self.prompt_messages is not None:
            return min(self.prompt_messages, len(self.messages))
        at = [i for i, m in enumerate(self.messages) if m.role is Role.ASSISTANT] if self.turns else []
        return at[max(len(at) - len(self.turns), 0)] if at else None

    @property
    def prompt_assistant_messages(self) -> int:
        """How many assistant messages came with the prompt (a task chat's demonstrations), not from the policy.

        The assistant messages among the first :attr:`prompt_message_count`; 0 when that is unknown.
        """
        given = self.prompt_message_count
        return sum(1 for m in self.messages[:given] if m.role is Role.ASSISTANT) if given else 0

    @property
    def policy_turns(self) -> int:
        """How many turns the policy took: its assistant messages (a task chat's demonstrations not counted)."""
        return len(self.assistant_messages) - self.prompt_assistant_messages

    @property
    def policy_messages(self) -> list[Message]:
        """The messages from the policy's first turn on (its turns and what the env answered); all when unknown."""
        return self.messages[self.prompt_message_count or 0 :]

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
        prompt = self.prompt_message_count
        if prompt is not None:
            out["prompt_messages"] = prompt
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
            raise ValueError(f"a trajectory must be a JSON object, got {json_kind(data)}")
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
        fields = trajectory_fields(data, default_id)
        if (fields["prompt_messages"] or 0) > len(messages):
            raise FieldError(
                f"'prompt_messages' is {fields['prompt_messages']} but the trajectory has {len(messages)} messages",
                _PROMPT_FIX,
            )
        return cls(messages=messages, **fields)

    def to_json(self, *, tokens: bool = False) -> str:
        """One JSONL line of strict JSON: a NaN or infinite number raises ``ValueError`` naming where it is.

        ``NaN``/``Infinity`` are not JSON (other tools refuse the line, tirl's reader too), so none is written.
        tirl's own trajectories never hold one: the Evaluator stage stores rewards and ``info["eval"]``
        through :func:`tirl.envs.base.checked_result`.
        """
        data = self.to_dict(tokens=tokens)
        try:
            return json.dumps(data, ensure_ascii=False, allow_nan=False)
        except ValueError:
            where = _nonfinite_at(data)
            if where is None:
                raise
            raise ValueError(
                f"trajectory {self.id!r}: {where[0]} is {json_kind(where[1])}, which JSON cannot hold — "
                "store a finite number or None"
            ) from None


def _nonfinite_at(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first non-finite float in ``value`` as ``(path, value)``: ``("info.eval.step_rewards[1]", nan)``."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = _nonfinite_at(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


@dataclass(slots=True)
class Group:
    """Trajectories sampled from the same prompt (the unit of GRPO normalisation)."""

    id: str
    trajectories: list[Trajectory]

    def __len__(self) -> int:
        return len(self.trajectories)
