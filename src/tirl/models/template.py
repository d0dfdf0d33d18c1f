r"""tirl's ChatML-style chat template with Hermes tool calls, and a check that a template supports tools.

:data:`CHAT_TEMPLATE` is the template ``tirl model init`` saves with every
model it makes. It renders, in order:

* a system turn: the first message when it is a ``system`` message, then,
  when ``tools`` are given, a ``# Tools`` section that lists each tool's
  JSON schema (one ``tojson`` line per tool inside ``<tools>…</tools>``) and
  says how to call one;
* each ``user`` turn as ``<|im_start|>user\n{content}<|im_end|>\n``;
* each ``assistant`` turn as its content followed by one block per tool call
  in the Hermes convention::

      <tool_call>
      {"name": "python", "arguments": {"code": "print(1)"}}
      </tool_call>

  (blocks after non-empty content, or after another block, are preceded by a
  newline). ``arguments`` may be a JSON *string* (as OpenAI clients send it:
  inserted verbatim) or an object (rendered with ``tojson``); the two give
  the same text when the string is ``json.dumps`` of the object. ``content``
  may be empty or null. A call may be in OpenAI's shape
  (``{"type": "function", "function": {"name", "arguments"}}``) or flat
  (``{"name", "arguments"}``);
* each ``tool`` turn on its own:
  ``<|im_start|>tool\n<tool_response id="{tool_call_id}">\n{content}\n</tool_response><|im_end|>\n``
  (``<tool_response>`` without ``id`` when the message has no ``tool_call_id``);
* ``<|im_start|>assistant\n`` as the generation prompt.

Every message's rendering depends on that message (and ``tools``) alone, so
the rendering of a conversation is a prefix of the rendering of that
conversation plus more messages, which is what
:class:`~tirl.models.chat_format.TemplateChatFormat` needs to append turns
without re-rendering the history.

:func:`template_supports_tools` renders a probe conversation with the
template and says what it drops (the tool definitions, an assistant tool
call, a tool result), so a checkpoint whose template has no tool support is
refused with a message naming what is missing.

Templates are rendered by :func:`tirl.models.safe_template.render_chat` (Jinja's sandbox with size and
time limits), never by ``tokenizer.apply_chat_template``.

Not covered: parallel-call ids in the assistant turn (the Hermes convention
has none; ids live on the ``tool`` messages), multimodal content parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the annotation only: importing this module (tirl train's checks) needs no transformers
    from transformers import PreTrainedTokenizerBase

from tirl.models.safe_template import TemplateLimitError, pick_template, render_chat

BOS = "<|im_start|>"
EOT = "<|im_end|>"
EOS = "<|endoftext|>"  # padding and end of document; the assistant turn ends with EOT
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
SPECIAL_TOKENS: tuple[str, ...] = (EOS, BOS, EOT)
# Ordinary added tokens (not special: they survive skip_special_tokens), so a call's markers are one id each.
ADDED_TOKENS: tuple[str, ...] = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, "<tool_response", "</tool_response>")

TOOLS_PREAMBLE = (
    "# Tools\\n\\nYou may call one or more functions. Write each call on its own lines as\\n"
    '<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <arguments-json-object>}\\n</tool_call>\\n'
    "and wait for its result.\\n\\nThe functions:\\n<tools>"
)

CHAT_TEMPLATE = (
    "{%- set ns = namespace(start=0) -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.start = 1 -%}"
    "{{- '<|im_start|>system\\n' + (messages[0]['content'] or '') -}}"
    "{%- if tools -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{%- elif tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "{{- '" + TOOLS_PREAMBLE + "' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>' -}}"
    "{%- endif -%}"
    "{%- if ns.start == 1 or tools -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- set content = message['content'] or '' -%}"
    "{{- content -}}"
    "{%- for call in (message['tool_calls'] or []) -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}"
    "{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>tool\\n<tool_response' -}}"
    "{%- if message['tool_call_id'] is defined and message['tool_call_id'] -%}"
    "{{- ' id=\"' + message['tool_call_id'] + '\"' -}}"
    "{%- endif -%}"
    "{{- '>\\n' + (message['content'] or '') + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

_PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "tirl_probe_fn",
        "description": "probe",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}
_PROBE_ARG = "tirl-probe-arg-5d1e"
_PROBE_RESULT = "tirl-probe-result-c4b0"


@dataclass(frozen=True, slots=True)
class ToolSupport:
    """What a chat template renders of a tool conversation; ``missing`` is empty when it renders all of it."""

    tools: bool  # the tool definitions (``tools=``) appear in the prompt
    calls: bool  # an assistant message's tool call (name and arguments) appears
    results: bool  # a ``tool`` message's content appears
    hermes: bool = False  # calls are rendered in ``<tool_call>`` blocks (what :mod:`tirl.models.toolcalls` parses)
    error: str | None = None  # the template raised while rendering

    @property
    def missing(self) -> list[str]:
        """Human names of what is not rendered."""
        if self.error is not None:
            return [f"a tool conversation (the template raised: {self.error})"]
        out = []
        if not self.tools:
            out.append("the tool definitions passed as tools=")
        if not self.calls:
            out.append("assistant tool_calls")
        if not self.results:
            out.append("tool messages")
        return out

    @property
    def ok(self) -> bool:
        """True when the template renders tools, tool calls and tool results."""
        return not self.missing


def probe_messages(*, string_arguments: bool = True) -> list[dict[str, Any]]:
    """A short tool conversation in the OpenAI shape (``arguments`` a JSON string or an object, ``content`` null)."""
    args: Any = json.dumps({"q": _PROBE_ARG}) if string_arguments else {"q": _PROBE_ARG}
    call = {"id": "call_probe", "type": "function", "function": {"name": "tirl_probe_fn", "arguments": args}}
    return [
        {"role": "user", "content": "probe"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_probe", "content": _PROBE_RESULT},
    ]


def template_supports_tools(tokenizer: PreTrainedTokenizerBase, template: str | None = None) -> ToolSupport:
    """Render :func:`probe_messages` (with and without ``tools``) and report which parts the template keeps.

    The call is tried with ``arguments`` as a JSON string (OpenAI clients) and, when that fails or drops
    them, as an object (Hugging Face's convention; what tirl's parser produces).
    """

    def render(messages: list[dict[str, Any]], tools: list[Any] | None) -> str:
        source = pick_template(template or getattr(tokenizer, "chat_template", None), tools)
        return render_chat(
            source, messages, tools=tools, add_generation_prompt=True, special_tokens=tokenizer.special_tokens_map
        )

    try:
        with_tools = render(probe_messages()[:1], [_PROBE_TOOL])
        try:
            conversation = render(probe_messages(), None)
        except Exception:  # e.g. a template that iterates over arguments as a mapping
            conversation = ""
        if _PROBE_ARG not in conversation:
            conversation = render(probe_messages(string_arguments=False), None)
    except TemplateLimitError as exc:
        if "raised" not in exc.problem:  # over a size or time limit: the template is refused, not probed
            raise
        return ToolSupport(False, False, False, error=exc.problem.removeprefix("the chat template raised "))
    except Exception as exc:  # a template that raises on the tool role or on tool_calls
        return ToolSupport(False, False, False, error=f"{type(exc).__name__}: {exc}")
    return ToolSupport(
        tools="tirl_probe_fn" in with_tools,
        calls=_PROBE_ARG in conversation and "tirl_probe_fn" in conversation,
        results=_PROBE_RESULT in conversation,
        hermes=TOOL_CALL_OPEN in conversation and TOOL_CALL_OPEN not in render(probe_messages()[:1], None),
    )
