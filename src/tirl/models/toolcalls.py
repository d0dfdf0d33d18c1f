r"""Tool calls in the Hermes convention: sampled text to ``content`` + :class:`~tirl.types.ToolCall`\ s.

A model that uses tirl's chat template (:mod:`tirl.models.template`) calls a
function by writing::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(6*7)"}}
    </tool_call>

:func:`parse_tool_calls` splits an assistant turn's text into the message
``content`` (the text outside the blocks, without the newline the template
puts before a block) and one :class:`~tirl.types.ToolCall` per block, in
order, with ids ``{id_prefix}_{k}``. ``arguments`` stay what the model wrote:
an object (the convention; a ``dict``, which is what Hugging Face chat
templates expect and what tirl's template renders back with ``tojson``, so a
call written in the template's own form round-trips to the same text and the
same token ids — templates that ``tojson`` a string would double-encode it),
or a JSON string. OpenAI's wire format wants a string: ``tirl serve``
converts (:mod:`tirl.inference.tools_api`).

Malformed calls are kept, not repaired, so that the void rule
(:func:`tirl.parsing.judge_message`) can judge them: a block that is not JSON,
an unclosed ``<tool_call>``, or ``arguments`` that are a string which does not
parse as JSON give a :class:`ToolCall` whose arguments are the raw text (and
whose name is ``None`` when none can be read), which is *not* an action.
Arguments nested too deep for the JSON parser become ``None`` (also not an action).
A lone surrogate that an escape in the block makes (``"\ud800"``) becomes U+FFFD, as invalid UTF-8 in
tool output does: a message must stay valid Unicode (the trajectory writer encodes it as UTF-8, and
the sandbox cannot pass it to a program).

Not covered: other tool-call conventions (Llama 3.1 ``<|python_tag|>``,
Mistral ``[TOOL_CALLS]``, JSON without markers); text that the model writes
between or after blocks is kept in ``content`` but then does not round-trip
to the same text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tirl.models.template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from tirl.types import ToolCall

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """An assistant turn's text split into content and tool calls."""

    content: str
    tool_calls: tuple[ToolCall, ...]


def _call(body: str, call_id: str) -> ToolCall:
    """One block's body (between the markers) as a call; malformed bodies keep their raw text."""
    raw = body.strip()
    try:
        obj = json.loads(raw)
    except RecursionError:  # nested deeper than the parser's stack: not JSON we can use, never an action
        found = _NAME.search(raw[:4096])
        return ToolCall(name=found.group(1) if found else None, arguments=None, id=call_id)
    except ValueError:
        found = _NAME.search(raw)
        return ToolCall(name=found.group(1) if found else None, arguments=raw, id=call_id)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(name=None, arguments=raw, id=call_id)
    if "\\u" in raw:  # only an escape makes a lone surrogate; the sampled text itself is valid Unicode
        obj = _without_lone_surrogates(obj)
    args = obj.get("arguments", {})
    if not isinstance(args, dict | str):  # a list or a number is not an arguments object: never an action
        return ToolCall(name=obj["name"], arguments=None, id=call_id)
    return ToolCall(name=obj["name"], arguments=args, id=call_id)


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")  # json.loads joins escaped pairs: what is left is lone


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD; iterative, any depth."""

    def clean(node: Any) -> Any:
        return _LONE_SURROGATE.sub("\ufffd", node) if isinstance(node, str) else node

    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        node = parent[key]
        if isinstance(node, dict):
            node = parent[key] = {clean(k): v for k, v in node.items()}
            stack.extend((node, k) for k in node)
        elif isinstance(node, list):
            stack.extend((node, i) for i in range(len(node)))
        else:
            parent[key] = clean(node)
    return root[0]


def parse_tool_calls(text: str, *, id_prefix: str = "call") -> ParsedTurn:
    r"""Split ``text`` into content and Hermes tool calls.

    >>> t = parse_tool_calls('Run it.\n<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n</tool_call>')
    >>> t.content, t.tool_calls[0].name, t.tool_calls[0].arguments, t.tool_calls[0].id
    ('Run it.', 'python', {'code': '1'}, 'call_0')
    >>> parse_tool_calls("no calls").tool_calls
    ()
    """
    if TOOL_CALL_OPEN not in text:
        return ParsedTurn(content=text, tool_calls=())
    outside: list[str] = []
    calls: list[ToolCall] = []
    pos = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start < 0:
            outside.append(text[pos:])
            break
        outside.append(text[pos:start])
        body_start = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body_start)
        call_id = f"{id_prefix}_{len(calls)}"
        if end < 0:  # unclosed (cut by a token limit): kept raw, never an action
            calls.append(ToolCall(name=None, arguments=text[body_start:], id=call_id))
            break
        calls.append(_call(text[body_start:end], call_id))
        pos = end + len(TOOL_CALL_CLOSE)
    pieces = [outside[0].removesuffix("\n"), *(p.strip("\n") for p in outside[1:])]
    return ParsedTurn(content="\n".join(p for p in pieces if p), tool_calls=tuple(calls))


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    r"""The Hermes block tirl's chat template renders for one call (what :func:`parse_tool_calls` reads back).

    >>> tool_call_text("python", {"code": "print(2)"})
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(2)"}}\n</tool_call>'
    """
    body = (
        f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {json.dumps(arguments, ensure_ascii=False)}}}'
    )
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def function_tool(name: str, description: str, **arguments: str) -> dict[str, Any]:
    """An OpenAI function definition whose ``arguments`` (name -> description) are strings, all required."""
    properties = {arg: {"type": "string", "description": text} for arg, text in arguments.items()}
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if arguments:
        parameters["required"] = list(arguments)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


#: The python tool as an OpenAI function definition: the call tir-math executes (``{"code": "..."}``).
PYTHON_TOOL = function_tool(
    "python", "Run Python code in a sandbox and return what it prints.", code="the program to run"
)

#: swe-lite's tools: run a shell command in the workspace (``{"command": "..."}``), and submit.
BASH_TOOL = function_tool(
    "bash", "Run a bash command in the repository and return its output and exit status.", command="the command line"
)
SUBMIT_TOOL = function_tool("submit", "Submit the repository as it is now for the hidden tests (ends the episode).")


def tools_for_env(env_name: str) -> tuple[dict[str, Any], ...]:
    """The function definitions ``env.tools = true`` offers: bash + submit for swe-lite, python otherwise."""
    return (BASH_TOOL, SUBMIT_TOOL) if env_name == "swe-lite" else (PYTHON_TOOL,)
