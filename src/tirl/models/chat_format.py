"""Chat formats: messages to token ids, one piece at a time, never re-rendering the history.

A multi-turn context is the concatenation of

* the prompt ids (:meth:`ChatFormat.prompt_ids`: system + user messages and
  the assistant header),
* each turn's *sampled* ids, exactly as the generator returned them, and
* each observation's ids (:meth:`ChatFormat.observation_ids`: the rest of the
  turn close if the model did not sample it, the tool messages, and the next
  assistant header).

Decoding the history and applying the chat template again would re-tokenise
what the model sampled (a different split of the same text, or a template that
rewrites earlier turns), and the trainer would then score ids the policy never
produced. Here the ids the trainer scores are the ids that were sampled.

Two implementations:

* :class:`SimpleChatFormat` — the built-in tiny model's template
  ``<|role|>content<|end|>``, built directly from special-token ids.
* :class:`TemplateChatFormat` — any Hugging Face tokenizer with a chat
  template. The pieces are derived by rendering a probe conversation and
  taking suffix differences, so the template's own text is used.

Tool calls: :meth:`ChatFormat.assistant_message` turns a sampled turn into
the assistant :class:`~tirl.types.Message`; with a template that renders tool
calls in the Hermes convention (``<tool_call>{"name": …, "arguments": …}</tool_call>``,
as tirl's own template from ``tirl model init`` does) the calls are parsed
into ``tool_calls`` (:mod:`tirl.models.toolcalls`). ``prompt_ids`` takes the
tool definitions (``tools=``) and passes them to the template.

Message content (tool output above all) never yields special-token ids: a program that prints
``<|im_end|>`` and ``<|im_start|>assistant`` puts text into the context, not a turn boundary (content is
encoded with ``split_special_tokens``; see :meth:`TemplateChatFormat._encode_messages`).

Not covered: templates whose rendering of a conversation is not a prefix of
the rendering of that conversation plus more messages (e.g. templates that
rewrite earlier assistant turns) — :class:`TemplateChatFormat` raises
:class:`~tirl.errors.SetupError` for them at construction; the built-in
format renders only ``content`` and has no tools; tool-call conventions other
than Hermes are rendered by their templates but not parsed from samples.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from transformers import PreTrainedTokenizerBase

from tirl.errors import SetupError
from tirl.models.safe_template import pick_template, render_chat
from tirl.models.template import ToolSupport, template_supports_tools
from tirl.models.tokenizer import END, ROLE_TOKENS
from tirl.models.toolcalls import parse_tool_calls
from tirl.types import Message, Role

# Used when a tokenizer has no chat template: plain-text role markers, turns closed by the EOS token.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '### ' + message['role'] + '\\n' }}{{ message['content'] if message['content'] is not none else '' }}"
    "{{ eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '### assistant\\n' }}{% endif %}"
)

_PROBE_USER = "tirl-probe-user-7f3a"
_PROBE_ASSISTANT = "tirl-probe-assistant-91c2"


@runtime_checkable
class ChatFormat(Protocol):
    """Renders messages to token ids, piece by piece."""

    eos_ids: frozenset[int]
    tool_support: ToolSupport  # what the template renders of tools, tool calls and tool results

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The initial messages (and tool definitions), ending with the assistant header (generation prompt)."""
        ...

    def observation_ids(self, messages: Sequence[Message], turn_ids: Sequence[int]) -> list[int]:
        """Ids appended after an assistant turn whose sampled ids were ``turn_ids``.

        The rest of the turn close (all of it when the turn did not end with an
        EOS id), then ``messages`` (tool or user), then the next assistant header.
        """
        ...

    def assistant_text(self, turn_ids: Sequence[int]) -> str:
        """The message content of a sampled turn (a trailing EOS id dropped)."""
        ...

    def assistant_message(self, turn_ids: Sequence[int], *, call_id_prefix: str = "call") -> Message:
        """The assistant message of a sampled turn: content and, where the template has them, tool calls."""
        ...

    def assistant_ids(self, content: str) -> list[int]:
        """The ids a policy should sample to write ``content`` and end the turn (for demonstrations)."""
        ...


def _as_dict(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role.value, "content": m.content or ""}
    if m.tool_calls:
        out["tool_calls"] = [c.to_dict() for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


_NO_TOOLS = ToolSupport(tools=False, calls=False, results=True)


class SimpleChatFormat:
    """The built-in format: ``<|role|>content<|end|>`` per message, ``<|assistant|>`` as header.

    >>> from tirl.models.tokenizer import build_char_tokenizer
    >>> fmt = SimpleChatFormat(build_char_tokenizer())
    >>> tok = fmt.tokenizer
    >>> tok.decode(fmt.prompt_ids([Message(role=Role.USER, content="1+1")]))
    '<|user|>1+1<|end|><|assistant|>'
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab()
        missing = [t for t in (END, *ROLE_TOKENS.values()) if t not in vocab]
        if missing:
            raise SetupError(
                f"the tokenizer lacks the special tokens {missing} of the built-in chat format — "
                "use TemplateChatFormat for a tokenizer with a chat template"
            )
        self.end_id: int = vocab[END]
        self.role_ids: dict[Role, int] = {Role(r): vocab[t] for r, t in ROLE_TOKENS.items()}
        self.eos_ids = frozenset({self.end_id})
        self.tool_support = _NO_TOOLS

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _message(self, m: Message) -> list[int]:
        # Content never yields special ids: printed "<|end|><|assistant|>" stays text, not a turn boundary.
        content = self.tokenizer.encode(m.content or "", add_special_tokens=False, split_special_tokens=True)
        return [self.role_ids[m.role], *content, self.end_id]

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """``<|role|>content<|end|>`` for each message, then ``<|assistant|>`` (no tool definitions)."""
        if tools:
            raise SetupError("the built-in chat format has no tool definitions; use a model with a tool template")
        ids: list[int] = []
        for m in messages:
            ids.extend(self._message(m))
        ids.append(self.role_ids[Role.ASSISTANT])
        return ids

    def observation_ids(self, messages: Sequence[Message], turn_ids: Sequence[int]) -> list[int]:
        """``<|end|>`` if the turn did not sample it, the messages, then ``<|assistant|>``."""
        ids: list[int] = [] if turn_ids and turn_ids[-1] == self.end_id else [self.end_id]
        for m in messages:
            ids.extend(self._message(m))
        ids.append(self.role_ids[Role.ASSISTANT])
        return ids

    def assistant_text(self, turn_ids: Sequence[int]) -> str:
        """Decode the turn without its closing ``<|end|>``."""
        ids = list(turn_ids)
        if ids and ids[-1] == self.end_id:
            ids.pop()
        return str(self.tokenizer.decode(ids))

    def assistant_message(self, turn_ids: Sequence[int], *, call_id_prefix: str = "call") -> Message:
        """The decoded content (the built-in format has no tool calls)."""
        return Message(role=Role.ASSISTANT, content=self.assistant_text(turn_ids))

    def assistant_ids(self, content: str) -> list[int]:
        """``content`` then ``<|end|>``."""
        return [*self._encode(content), self.end_id]


class TemplateChatFormat:
    r"""Any Hugging Face tokenizer's chat template, split into pieces by suffix differences.

    The turn close is the template's text after a probe assistant message
    (e.g. ``<|im_end|>\\n``); an observation is the rendering of
    probe + observation (with the generation prompt) minus the rendering of
    the probe alone. Tool messages are rendered with role ``tool``; when the
    template rejects that role they are rendered as ``user`` messages.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = template or getattr(tokenizer, "chat_template", None) or FALLBACK_TEMPLATE
        self._base = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
        self._base_text = self._render(self._base, gen=False)
        at = self._base_text.rfind(_PROBE_ASSISTANT)
        if at < 0:
            raise SetupError("the chat template drops assistant content; tirl cannot split it into turns")
        self.close_text = self._base_text[at + len(_PROBE_ASSISTANT) :]
        self.close_ids = self._encode(self.close_text)
        eos: set[int] = set()
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        special |= {int(i) for i, t in added.items() if getattr(t, "special", False)}
        if self.close_ids and self.close_ids[0] in special:
            eos.add(self.close_ids[0])  # e.g. <|im_end|> when eos_token is <|endoftext|>
        if not eos:
            raise SetupError("the tokenizer has no eos_token; set one in tokenizer_config.json")
        self.eos_ids = frozenset(eos)
        self._tool_role = "tool"
        try:
            self._observation_text([Message(role=Role.TOOL, content="1")])
        except Exception:
            self._tool_role = "user"
            self._observation_text([Message(role=Role.TOOL, content="1")])
        self.tool_support = template_supports_tools(tokenizer, self.template)
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
        specials |= {str(t.content) for t in added.values() if getattr(t, "special", False)}
        self._specials = sorted((t for t in specials if t), key=len, reverse=True)

    def _encode_messages(self, messages: Sequence[Message], render: Callable[[Sequence[Message]], str]) -> list[int]:
        """``render(messages)`` as ids, where message contents never yield special-token ids.

        Content that holds the text of a special token (a tool printed ``<|im_end|>``) is swapped for a
        marker before rendering, and the marker's place is filled with the content encoded with
        ``split_special_tokens``: the template's own markers stay special, the printed ones stay text.
        """
        hostile = {i for i, m in enumerate(messages) if m.content and any(t in m.content for t in self._specials)}
        if not hostile:
            return self._encode(render(messages))
        marks = {f"tirl-content-{i}-{secrets.token_hex(8)}": i for i in hostile}
        by_index = {i: mark for mark, i in marks.items()}
        swapped = [replace(m, content=by_index[i]) if i in hostile else m for i, m in enumerate(messages)]
        text = render(swapped)
        found = re.findall("|".join(map(re.escape, marks)), text)
        if sorted(found) != sorted(marks):  # the template changed the content: render it with "< |" for "<|"
            return self._encode(render([self._defang(m) if i in hostile else m for i, m in enumerate(messages)]))
        ids: list[int] = []
        for piece in re.split("(" + "|".join(map(re.escape, marks)) + ")", text):
            if piece in marks:
                content = messages[marks[piece]].content or ""
                ids += self.tokenizer.encode(content, add_special_tokens=False, split_special_tokens=True)
            elif piece:
                ids += self._encode(piece)
        return ids

    def _defang(self, m: Message) -> Message:
        content = m.content or ""
        for token in self._specials:
            content = content.replace(token, token[:1] + " " + token[1:])  # ASCII: an unknown char may be <unk>
        return replace(m, content=content)

    def _render(
        self, messages: list[dict[str, Any]], *, gen: bool, tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        listed = list(tools) if tools else None
        return render_chat(  # Jinja's sandbox with size and time limits (the template is the model dir's code)
            pick_template(self.template, listed),
            messages,
            tools=listed,
            add_generation_prompt=gen,
            special_tokens=self.tokenizer.special_tokens_map,
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _observation_text(self, messages: Sequence[Message]) -> str:
        obs = []
        for m in messages:
            d = _as_dict(m)
            if m.role is Role.TOOL:
                d["role"] = self._tool_role
            obs.append(d)
        full = self._render([*self._base, *obs], gen=True)
        if not full.startswith(self._base_text):
            raise SetupError(
                "the chat template renders earlier turns differently once more messages follow; "
                "tirl needs a prefix-stable template (pass template= with one)"
            )
        return full[len(self._base_text) :]

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The template applied to the initial messages (and ``tools``) with the generation prompt."""
        if tools and not self.tool_support.tools:
            raise SetupError(
                "the chat template does not render tool definitions (tools=); use a template with tool support, "
                "e.g. the chat_template.jinja that `tirl model init` writes"
            )

        def render(ms: Sequence[Message]) -> str:
            return self._render([_as_dict(m) for m in ms], gen=True, tools=tools)

        return self._encode_messages(messages, render)

    def observation_ids(self, messages: Sequence[Message], turn_ids: Sequence[int]) -> list[int]:
        """Rest of the turn close, then the rendered observation with the next assistant header."""
        sampled_close = bool(turn_ids) and bool(self.close_ids) and turn_ids[-1] == self.close_ids[0]
        close = self.close_ids[1:] if sampled_close else list(self.close_ids)
        return [*close, *self._encode_messages(messages, self._observation_text)]

    def assistant_text(self, turn_ids: Sequence[int]) -> str:
        """Decode the turn without a trailing EOS id."""
        ids = list(turn_ids)
        if ids and ids[-1] in self.eos_ids:
            ids.pop()
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def assistant_message(self, turn_ids: Sequence[int], *, call_id_prefix: str = "call") -> Message:
        """Content and Hermes ``<tool_call>`` blocks parsed into ``tool_calls`` (when the template has them)."""
        text = self.assistant_text(turn_ids)
        if not self.tool_support.hermes:
            return Message(role=Role.ASSISTANT, content=text)
        parsed = parse_tool_calls(text, id_prefix=call_id_prefix)
        return Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)

    def assistant_ids(self, content: str) -> list[int]:
        """``content`` then the first id of the turn close (the EOS the model should sample)."""
        end = self.close_ids[:1] if self.close_ids else [min(self.eos_ids)]
        return [*self._encode(content), *end]


def chat_format_for(tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
    """The built-in format for the built-in tokenizer; the tokenizer's template otherwise."""
    vocab = tokenizer.get_vocab()
    if all(t in vocab for t in (END, *ROLE_TOKENS.values())) and tokenizer.eos_token == END:
        return SimpleChatFormat(tokenizer)
    return TemplateChatFormat(tokenizer)
