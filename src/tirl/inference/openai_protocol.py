"""The OpenAI request fields that ``tirl serve`` accepts, validated, and its error shape.

Requests are plain JSON dicts; :func:`parse_completion` and :func:`parse_chat`
turn them into :class:`CompletionJob` / :class:`ChatJob` or raise
:class:`APIError`, which the server renders in OpenAI's error shape::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}

The official ``openai`` client turns that body and the HTTP status into
``BadRequestError`` (400), ``AuthenticationError`` (401), ``NotFoundError``
(404) and so on.

Fields beyond OpenAI's follow vLLM's names, so one client works against
``tirl serve`` and ``vllm serve``: ``return_token_ids``,
``return_tokens_as_token_ids``, ``include_stop_str_in_output``,
``skip_special_tokens``. Fields that are accepted but ignored: ``user``,
``presence_penalty``/``frequency_penalty`` when 0, ``stream_options`` other
than ``include_usage``. Fields that are refused with 400: ``echo``,
``best_of`` > n, ``suffix``, ``logit_bias``, non-zero penalties, a ``response_format``
other than ``{"type": "text"}`` (JSON mode would be ignored, not enforced). ``tools`` and
``tool_choice`` (chat only) are parsed by :mod:`tirl.inference.tools_api`.

Hostile values are 400s, never 500s: non-finite or overflowing numbers,
seeds outside what torch takes (:data:`SEED_RANGE`), non-string roles, stop
strings over :data:`MAX_STOP_CHARS`, more than :data:`MAX_PROMPTS` prompts. A temperature below
:data:`GREEDY_BELOW` is greedy (``1e-40`` gives the ``temperature=0``
output); dividing logits by it would overflow. Body-level checks (size,
nesting, over-long integers, lone surrogates, ``NaN``) happen before these,
in :func:`tirl.jsonl.parse_json` called by the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeVar

from tirl.inference.base import SamplingParams
from tirl.inference.tools_api import ToolRequest, ToolRequestError, message_tool_fields, parse_tools
from tirl.types import Message, Role

T = TypeVar("T")
D = TypeVar("D")

MAX_N = 16
GREEDY_BELOW = 1e-5  # temperatures below this sample greedily (as vLLM does): logits / 1e-40 overflow float32
SEED_RANGE = (-(2**63), 2**63 - MAX_N)  # what torch.Generator.manual_seed takes, for seed + k of n choices
MAX_STOP_CHARS = 1000
MAX_PROMPTS = 256  # prompts in one completions request (each is n generations); one request cannot queue 100k
MAX_TOKENS = 2**31 - 1  # any larger max_tokens is refused as a number; the context length refuses the rest


class APIError(Exception):
    """An error returned to the HTTP client in OpenAI's error shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, type_: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_ or _TYPES.get(status, "server_error")

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {message, type, param, code}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": None}}


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    503: "server_error",
}


def bad(message: str, param: str | None = None) -> APIError:
    """A 400 invalid-request error about ``param``."""
    return APIError(400, message, param=param)


def show_value(value: Any) -> str:
    """``repr(value)`` cut to 40 characters: an error message never echoes a megabyte of the request."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


# kind -> (the JSON types it accepts, how an error names it); a bool is never read as a number
_KINDS: dict[type, tuple[Any, str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
}


def _field(
    body: dict[str, Any], key: str, kind: type[T], default: D, *, lo: int | None = None, hi: int | None = None
) -> T | D:
    """``body[key]`` read as ``kind`` (``bool``, ``int`` or ``float``); absent or ``null`` is ``default``.

    A float must be finite (an integer too large for a float counts as infinite); ``lo``/``hi`` bound the value.
    Anything else is a 400 naming the field.
    """
    value: Any = body.get(key)
    if value is None:
        return default
    accepts, noun = _KINDS[kind]
    if not isinstance(value, accepts) or (isinstance(value, bool) and kind is not bool):
        raise bad(f"'{key}' must be {noun}, got {show_value(value)}", key)
    if kind is float:
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise bad(f"'{key}' must be a finite number, got {show_value(value)}", key)
        value = number
    if lo is not None and value < lo:
        raise bad(f"'{key}' must be >= {lo}, got {show_value(value)}", key)
    if hi is not None and value > hi:
        raise bad(f"'{key}' must be <= {hi}, got {show_value(value)}", key)
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        if len(stop) > MAX_STOP_CHARS:
            raise bad(f"the 'stop' string is longer than {MAX_STOP_CHARS} characters", "stop")
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if len(stop) > 16:
            raise bad("'stop' has more than 16 strings", "stop")
        if any(len(s) > MAX_STOP_CHARS for s in stop):
            raise bad(f"a 'stop' string is longer than {MAX_STOP_CHARS} characters", "stop")
        return tuple(s for s in stop if s)
    raise bad("'stop' must be a string or a list of strings", "stop")


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """Refuse the OpenAI fields tirl serve does not implement (400 naming the field).

    This is the one place to extend when a field becomes supported: remove it here and parse it in
    :func:`parse_chat` (as ``tools``/``tool_choice`` are, by :mod:`tirl.inference.tools_api`).
    """
    if body.get("echo"):
        raise bad("'echo' is not supported by tirl serve", "echo")
    if body.get("suffix"):
        raise bad("'suffix' is not supported by tirl serve", "suffix")
    if body.get("logit_bias"):
        raise bad("'logit_bias' is not supported by tirl serve", "logit_bias")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:  # JSON mode / a JSON schema would be silently ignored
        raise bad('\'response_format\' is not supported by tirl serve (only {"type": "text"})', "response_format")
    for key in ("presence_penalty", "frequency_penalty"):
        if _field(body, key, float, 0.0) != 0.0:
            raise bad(f"'{key}' is not supported by tirl serve (only 0)", key)


@dataclass(frozen=True, slots=True)
class Common:
    """Fields shared by completions and chat completions."""

    model: str
    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    logprobs: int | None  # None = no log-probs; k >= 0 = the sampled token's (top-k alternatives are not computed)
    token_ids_as_text: bool  # return_tokens_as_token_ids: logprob tokens are "token_id:N"
    return_token_ids: bool  # return_token_ids: prompt_token_ids / token_ids fields
    include_stop: bool  # include_stop_str_in_output
    skip_special: bool  # skip_special_tokens (text only; token ids are always complete)


def _common(body: dict[str, Any], *, default_max_tokens: int, logprobs: int | None) -> Common:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required: the served model name (see GET /v1/models)", "model")
    _refuse_unsupported(body)
    max_tokens = _field(body, "max_tokens", int, default_max_tokens, lo=1, hi=MAX_TOKENS)
    mct = _field(body, "max_completion_tokens", int, None, lo=1, hi=MAX_TOKENS)
    if mct is not None:
        max_tokens = mct
    temperature = _field(body, "temperature", float, 1.0)
    if not 0.0 <= temperature <= 2.0:
        raise bad(f"'temperature' must be in [0, 2], got {temperature}", "temperature")
    if temperature < GREEDY_BELOW:
        temperature = 0.0
    top_p = _field(body, "top_p", float, 1.0)
    if not 0.0 < top_p <= 1.0:
        raise bad(f"'top_p' must be in (0, 1], got {top_p}", "top_p")
    n = _field(body, "n", int, 1, lo=1, hi=MAX_N)
    best_of = _field(body, "best_of", int, None, lo=1, hi=MAX_N)
    if best_of is not None and best_of != n:
        raise bad("'best_of' other than n is not supported", "best_of")
    seed = _field(body, "seed", int, None, lo=SEED_RANGE[0], hi=SEED_RANGE[1])
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    params = SamplingParams(
        max_new_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=_stop(body),
        seed=seed,
    )
    return Common(
        model=model,
        params=params,
        n=n,
        stream=_field(body, "stream", bool, False),
        include_usage=_field(stream_options, "include_usage", bool, False),  # "no" was read as true
        logprobs=logprobs,
        token_ids_as_text=_field(body, "return_tokens_as_token_ids", bool, False),
        return_token_ids=_field(body, "return_token_ids", bool, False),
        include_stop=_field(body, "include_stop_str_in_output", bool, False),
        skip_special=_field(body, "skip_special_tokens", bool, True),
    )


@dataclass(frozen=True, slots=True)
class CompletionJob:
    """A validated ``/v1/completions`` request: prompts are token ids or text."""

    common: Common
    prompts: list[list[int] | str]


def _prompts(prompt: Any) -> list[list[int] | str]:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [list(prompt)]
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(
            isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompt
        ):
            return [list(p) for p in prompt]
    raise bad(
        "'prompt' must be a string, a list of strings, a list of token ids, or a list of lists of token ids "
        "(non-empty)",
        "prompt",
    )


def parse_completion(body: Any, *, default_max_tokens: int = 16) -> CompletionJob:
    """Validate a completions request body."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    if "prompt" not in body:
        raise bad("'prompt' is required", "prompt")
    prompts = _prompts(body["prompt"])
    if len(prompts) > MAX_PROMPTS:
        raise bad(f"'prompt' holds {len(prompts)} prompts; at most {MAX_PROMPTS} per request", "prompt")
    logprobs = _field(body, "logprobs", int, None, lo=0, hi=20)
    return CompletionJob(
        common=_common(body, default_max_tokens=default_max_tokens, logprobs=logprobs), prompts=prompts
    )


@dataclass(frozen=True, slots=True)
class ChatJob:
    """A validated ``/v1/chat/completions`` request."""

    common: Common
    messages: list[Message]
    top_logprobs: int
    tools: ToolRequest | None = None  # tools / tool_choice (tirl.inference.tools_api)


_ROLES = {r.value: r for r in Role}


def _content(m: dict[str, Any], i: int) -> str:
    content = m.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def parse_chat(body: Any, *, default_max_tokens: int = 256, max_messages: int | None = None) -> ChatJob:
    """Validate a chat completions request body.

    ``max_messages`` (the served context length): more messages than that cannot fit, since a chat template
    renders at least one token per message, and they are refused before any is read (250,000 empty
    messages, 8 MB, took ~5 s of the event loop to validate, render and refuse; every other client waited).
    """
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    if max_messages is not None and len(raw) > max_messages:
        raise bad(
            f"'messages' holds {len(raw)} messages; this model's maximum context length is {max_messages} tokens, "
            "and every message takes at least one. Please send fewer messages.",
            "messages",
        )
    messages: list[Message] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object", f"messages[{i}]")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if not isinstance(role, str) or role not in _ROLES:
            raise bad(f"messages[{i}].role {show_value(role)} is not one of {sorted(_ROLES)}", f"messages[{i}].role")
        messages.append(_message(m, i, _ROLES[role]))
    want = _field(body, "logprobs", bool, False)
    top = _field(body, "top_logprobs", int, 0, lo=0, hi=20)
    common = _common(body, default_max_tokens=default_max_tokens, logprobs=top if want else None)
    try:
        tools = parse_tools(body)
    except ToolRequestError as exc:
        raise bad(str(exc), exc.param) from None
    return ChatJob(common=common, messages=messages, top_logprobs=top, tools=tools)


def _message(m: dict[str, Any], i: int, role: Role) -> Message:
    """One request message, with its ``tool_calls`` / ``tool_call_id`` (validated by tools_api)."""
    try:
        calls, call_id = message_tool_fields(m, i)
    except ToolRequestError as exc:
        raise bad(str(exc), exc.param) from None
    return Message(role=role, content=_content(m, i), tool_calls=calls, tool_call_id=call_id)
