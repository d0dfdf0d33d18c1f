r"""Function calling in ``tirl serve``: ``tools`` and ``tool_choice`` as OpenAI clients send them.

Request side (validated here; :mod:`tirl.inference.openai_protocol` turns a
:class:`ToolRequestError` into a 400 naming the field):

* ``tools``: a list of ``{"type": "function", "function": {"name", "description"?, "parameters"?}}``;
  the definitions are rendered into the prompt by the model's chat template.
* ``tool_choice``: ``"auto"`` (the default with tools: the reply's
  ``<tool_call>`` blocks are parsed), ``"none"`` (tools stay in the prompt,
  nothing is parsed: the reply is text), ``"required"`` (the reply is
  *started* with ``<tool_call>\n``, so the model must write a call), or
  ``{"type": "function", "function": {"name": NAME}}`` (started with
  ``<tool_call>\n{"name": "NAME", "arguments":``). The forced start is
  template text appended to the prompt (in ``prompt_token_ids``, never in the
  sampled ``token_ids``) and is part of the parsed reply. Without guided
  decoding this is how a call is forced; the arguments are still the model's.
* Messages: an assistant message may carry ``tool_calls`` (``arguments`` a
  JSON string or an object, ``content`` empty or null); a ``tool`` message
  carries ``tool_call_id``. A JSON-string ``arguments`` that holds an object is
  handed to the template as that object (Hugging Face templates expect a
  mapping; one that ``tojson``\ s a string would double-encode it), as vLLM does.

Response side (:func:`tool_reply`): when the reply holds ``<tool_call>``
blocks and *every* one is well formed (a name and JSON arguments: the void
rule's definition, :func:`tirl.parsing.tool_calls_well_formed`), the message
has ``tool_calls`` (ids ``call_<hex>``, ``arguments`` a JSON string) and the
remaining text as ``content`` (``null`` when empty), and ``finish_reason`` is
``tool_calls``. A malformed call is returned as plain text content, except a
forced call (``required`` or a named function) cut by ``max_tokens``: that
reply is ``content: null``, no ``tool_calls``, ``finish_reason: "length"`` —
the cut call is neither returned as a call nor as text (raise ``max_tokens``).

Streaming with ``tools`` (:func:`tool_chunks`): the sample is parsed whole,
then sent as a role chunk, a content chunk (when there is content), one chunk
whose ``delta.tool_calls`` carries every call complete (``index``, ``id``,
name, arguments), and a chunk with the finish reason — what OpenAI clients
accumulate into the same message as the non-streamed reply.

Not covered: per-token deltas, log-probs and token ids when streaming with
``tools``; ``parallel_tool_calls: false`` (refused); tool-call conventions
other than Hermes ``<tool_call>`` blocks.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tirl.models.template import TOOL_CALL_OPEN
from tirl.models.toolcalls import parse_tool_calls
from tirl.parsing import tool_calls_well_formed
from tirl.types import ToolCall

MAX_TOOLS = 128


class ToolRequestError(ValueError):
    """A malformed ``tools`` / ``tool_choice`` / tool message field; ``param`` names it."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """The validated tool fields of a chat request."""

    tools: tuple[dict[str, Any], ...]
    choice: str  # "auto" | "none" | "required" | "function"
    function: str | None = None  # the forced function's name when choice == "function"

    @property
    def parse(self) -> bool:
        """Whether ``<tool_call>`` blocks in the reply become ``tool_calls``."""
        return self.choice != "none"

    @property
    def forced_start(self) -> str:
        """Template text the reply is started with (``""`` unless a call is required)."""
        if self.choice == "required":
            return TOOL_CALL_OPEN + "\n"
        if self.choice == "function":
            # no trailing space: a byte-level BPE merges it into the next token ('Ġ{"'), as the model wrote it
            return TOOL_CALL_OPEN + '\n{"name": ' + json.dumps(self.function, ensure_ascii=False) + ', "arguments":'
        return ""


def _tool(t: Any, i: int) -> tuple[dict[str, Any], str]:
    param = f"tools[{i}]"
    if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
        raise ToolRequestError(f"'{param}' must be {{'type': 'function', 'function': {{'name': ...}}}}", param)
    fn = t["function"]
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise ToolRequestError(f"'{param}.function.name' must be a non-empty string of at most 64 characters", param)
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise ToolRequestError(f"'{param}.function.parameters' must be a JSON Schema object", param)
    return t, name


def parse_tools(body: dict[str, Any]) -> ToolRequest | None:
    """The ``tools`` / ``tool_choice`` of a request body; ``None`` when the request has no tools."""
    raw = body.get("tools")
    choice = body.get("tool_choice")
    if raw is None or raw == []:
        if choice not in (None, "none"):
            raise ToolRequestError("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise ToolRequestError(f"'tools' must be a list of at most {MAX_TOOLS} function definitions", "tools")
    if body.get("parallel_tool_calls") is False:
        raise ToolRequestError("'parallel_tool_calls': false is not supported (calls are not limited)", "tools")
    parsed = [_tool(t, i) for i, t in enumerate(raw)]
    names = [n for _, n in parsed]
    tools = tuple(t for t, _ in parsed)
    if choice is None or choice in ("auto", "none", "required"):
        return ToolRequest(tools=tools, choice=choice or "auto")
    fn = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise ToolRequestError(
            "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
            "tool_choice",
        )
    if name not in names:
        raise ToolRequestError(f"'tool_choice' names {name!r}, which is not in 'tools' ({names})", "tool_choice")
    return ToolRequest(tools=tools, choice="function", function=name)


def message_tool_fields(m: dict[str, Any], i: int) -> tuple[tuple[ToolCall, ...], str | None]:
    """The ``tool_calls`` of an assistant message and the ``tool_call_id`` of a tool message, validated."""
    raw = m.get("tool_calls")
    calls: list[ToolCall] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise ToolRequestError(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
        for k, c in enumerate(raw):
            call = ToolCall.from_dict(c)
            if call.name is None or not isinstance(call.arguments, str | dict):
                raise ToolRequestError(
                    f"messages[{i}].tool_calls[{k}] must be {{'type': 'function', 'function': "
                    "{'name': str, 'arguments': JSON string or object}}",
                    f"messages[{i}].tool_calls",
                )
            calls.append(_as_mapping(call))
    call_id = m.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise ToolRequestError(f"messages[{i}].tool_call_id must be a string", f"messages[{i}].tool_call_id")
    return tuple(calls), call_id


def _wire(arguments: Any) -> str:
    """Arguments as OpenAI's wire format carries them: a JSON string."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _as_mapping(call: ToolCall) -> ToolCall:
    """A call whose ``arguments`` string holds a JSON object gets the object (what chat templates expect)."""
    if not isinstance(call.arguments, str):
        return call
    try:
        value = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return call  # rendered verbatim: the template shows what the client sent
    return ToolCall(name=call.name, arguments=value, id=call.id) if isinstance(value, dict) else call


def tool_reply(text: str, request: ToolRequest | None, finish_reason: str = "stop") -> tuple[dict[str, Any], bool]:
    """The assistant ``message`` of a reply, and whether it carries tool calls (finish reason ``tool_calls``).

    A forced call (``required`` or a named function) that ``max_tokens`` cut before it parsed
    (``finish_reason`` ``length``) is ``content: null`` without ``tool_calls``: never the cut template text.
    """
    plain: dict[str, Any] = {"role": "assistant", "content": text}
    if request is None or not request.parse:
        return plain, False
    parsed = parse_tool_calls(text, id_prefix=f"call_{uuid.uuid4().hex[:16]}")
    if not parsed.tool_calls or not tool_calls_well_formed(parsed.tool_calls):
        if request.forced_start and finish_reason == "length":
            return {"role": "assistant", "content": None}, False
        return plain, False
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _wire(c.arguments)}}
        for c in parsed.tool_calls
    ]
    return {"role": "assistant", "content": parsed.content or None, "tool_calls": calls}, True


async def tool_chunks(
    samples: Callable[[], Awaitable[list[Any]]],
    request: ToolRequest,
    base: dict[str, Any],
    usage: Callable[[list[Any]], dict[str, int]] | None,
) -> AsyncIterator[dict[str, Any]]:
    """Stream chunks of whole samples with parsed tool calls (``samples()`` samples when the stream starts)."""
    done = await samples()
    for i, s in enumerate(done):
        message, called = tool_reply(request.forced_start + s.text, request, s.finish_reason)
        deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
        if message.get("content"):
            deltas.append(({"content": message["content"]}, None))
        if called:
            deltas.append(({"tool_calls": [{"index": k, **c} for k, c in enumerate(message["tool_calls"])]}, None))
        deltas.append(({}, "tool_calls" if called and s.finish_reason == "stop" else s.finish_reason))
        for delta, finish in deltas:
            choice = {"index": i, "delta": delta, "finish_reason": finish, "logprobs": None}
            yield {**base, "choices": [choice], "policy_version": s.result.policy_version}
    if usage is not None:
        yield {**base, "choices": [], "usage": usage(done)}
