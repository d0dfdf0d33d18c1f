r"""The one definition of what an assistant turn *does*: run code, answer, call a tool, or nothing.

The void-turn filter, the environments (which decide what to execute) and the
audit all call :func:`judge_message`; nothing else in tirl re-implements the
rule. The rule, from ``DESIGN.md``:

* **Executable code** is a *closed* fenced block (CommonMark style: a line
  that starts, after at most three spaces, with three or more backticks or
  tildes, closed by a line with at least as many of the same character) whose
  info-string language is in :attr:`ParseRules.exec_langs`
  (case-insensitive) and whose body is not blank. Inline backticks, unclosed
  fences, blank bodies and other languages (``text``, ``output``, ``json``)
  are not executable code.
* A **final answer** is, outside fenced blocks, a ``\boxed{…}`` with balanced
  braces (``\{`` and ``\}`` are literal and do not count) and non-blank
  content, or ``<answer>…</answer>`` with non-blank content. Placeholders such
  as ``\boxed{...}`` or ``<answer>your answer here</answer>`` are not answers.
  An unclosed fence runs to the end of the message (as in CommonMark), so an
  answer written after it is inside code and does not count. When several
  answers appear, the last one is the answer.
* **Tool calls**: a message whose ``tool_calls`` are non-empty and *each*
  name a function and carry arguments that parse as JSON is an action. A
  malformed call is not (the message may still act through its content).
* A turn with none of these is **void**.

When a turn both answers and contains code, the answer wins: the episode
ends and the code is not run (documented in the README).

Not covered: indented (4-space) code blocks, HTML ``<code>`` blocks and
nested fences are not executable code; ``\boxed`` inside inline backticks is
still counted as an answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from tirl.types import Message, Role, ToolCall

DEFAULT_EXEC_LANGS: frozenset[str] = frozenset({"python", "py", "python3", "bash", "sh", "shell"})
PYTHON_LANGS: frozenset[str] = frozenset({"python", "py", "python3"})
SHELL_LANGS: frozenset[str] = frozenset({"bash", "sh", "shell"})
DEFAULT_PLACEHOLDERS: frozenset[str] = frozenset(
    {"...", "…", "answer", "your answer", "your answer here", "final answer", "your final answer", "?", "x"}
)
# "x" is a placeholder only as the *whole* content, e.g. the template "\boxed{x}".


@dataclass(frozen=True, slots=True)
class ParseRules:
    """What counts as executable code and as a final answer.

    >>> ParseRules(exec_langs=frozenset({"python"})).is_exec_lang("Python")
    True
    """

    exec_langs: frozenset[str] = DEFAULT_EXEC_LANGS
    boxed: bool = True
    answer_tags: bool = True
    placeholders: frozenset[str] = DEFAULT_PLACEHOLDERS

    def __post_init__(self) -> None:
        object.__setattr__(self, "exec_langs", frozenset(x.strip().lower() for x in self.exec_langs))
        object.__setattr__(self, "placeholders", frozenset(x.strip().lower() for x in self.placeholders))

    def is_exec_lang(self, lang: str) -> bool:
        """Whether a fence's language is executable under these rules."""
        return lang.lower() in self.exec_langs


DEFAULT_RULES = ParseRules()


class ActionKind(StrEnum):
    """What a turn does, in order of precedence."""

    ANSWER = "answer"
    CODE = "code"
    TOOL_CALL = "tool_call"
    VOID = "void"


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One closed fenced block (any language)."""

    lang: str
    body: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    """The judgement of one assistant message."""

    kind: ActionKind
    code: tuple[CodeBlock, ...] = ()
    answer: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def is_void(self) -> bool:
        """A turn with neither executable code, a final answer nor a well-formed tool call."""
        return self.kind is ActionKind.VOID


@dataclass(frozen=True, slots=True)
class TrajectoryVerdict:
    """The judgement of a whole trajectory: void if any assistant turn is void."""

    void: bool
    void_turns: tuple[int, ...] = ()
    turns: tuple[TurnVerdict, ...] = field(default=(), repr=False)

    @property
    def final_answer(self) -> str | None:
        """The last final answer the model wrote, if any (never a pre-filled field)."""
        for verdict in reversed(self.turns):
            if verdict.answer is not None:
                return verdict.answer
        return None


def _fence_open(text: str, i: int) -> tuple[int, str, int] | None:
    """If a fence opens at line start ``i``, return (run length, char, index after the info line)."""
    n = len(text)
    j = i
    while j < n and j - i < 3 and text[j] == " ":
        j += 1
    if j >= n or text[j] not in "`~":
        return None
    ch = text[j]
    k = j
    while k < n and text[k] == ch:
        k += 1
    run = k - j
    if run < 3:
        return None
    eol = text.find("\n", k)
    if eol < 0:
        eol = n
    if ch == "`" and "`" in text[k:eol]:
        return None  # CommonMark: a backtick fence's info string may not contain backticks
    return run, ch, eol


def _scan_fences(text: str) -> tuple[list[CodeBlock], list[tuple[int, int]]]:
    """All closed fenced blocks and all fenced regions (closed or running to the end)."""
    blocks: list[CodeBlock] = []
    regions: list[tuple[int, int]] = []
    n = len(text)
    pos = 0
    while True:
        a = text.find("```", pos)
        b = text.find("~~~", pos)
        if a < 0 and b < 0:
            break
        hit = a if b < 0 or (0 <= a < b) else b
        line_start = text.rfind("\n", 0, hit) + 1
        if hit - line_start > 3 or text[line_start:hit].strip(" "):
            pos = hit + 3
            continue
        opened = _fence_open(text, line_start)
        if opened is None:
            pos = hit + 3
            continue
        run, ch, info_end = opened
        info = text[hit + run : info_end].strip()
        lang = info.split(None, 1)[0] if info else ""
        body_start = min(info_end + 1, n)
        # find the closing line: at most 3 spaces, >= run fence chars, then only spaces
        close_at = -1
        close_end = n
        search = body_start
        marker = ch * 3
        while True:
            m = text.find(marker, search)
            if m < 0:
                break
            ls = text.rfind("\n", 0, m) + 1
            if m - ls <= 3 and not text[ls:m].strip(" "):
                k = m
                while k < n and text[k] == ch:
                    k += 1
                eol = text.find("\n", k)
                if eol < 0:
                    eol = n
                if k - m >= run and not text[k:eol].strip():
                    close_at = ls
                    close_end = eol
                    break
            search = m + 3
        if close_at < 0:
            regions.append((line_start, n))
            break
        body = text[body_start:close_at] if close_at > body_start else ""
        blocks.append(CodeBlock(lang=lang, body=body, start=line_start, end=close_end))
        regions.append((line_start, close_end))
        pos = close_end
    return blocks, regions


def extract_code_blocks(text: str, rules: ParseRules = DEFAULT_RULES) -> list[CodeBlock]:
    """The executable code blocks of ``text``: closed, executable language, non-blank body."""
    if "```" not in text and "~~~" not in text:
        return []
    blocks, _ = _scan_fences(text)
    return [b for b in blocks if rules.is_exec_lang(b.lang) and b.body.strip()]


def _outside(text: str, regions: list[tuple[int, int]]) -> str:
    if not regions:
        return text
    parts = []
    pos = 0
    for start, end in regions:
        parts.append(text[pos:start])
        pos = end
    parts.append(text[pos:])
    return "\n".join(parts)


def _boxed_contents(text: str) -> Iterable[str]:
    pos = 0
    n = len(text)
    while True:
        i = text.find("\\boxed", pos)
        if i < 0:
            return
        j = i + 6
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "{":
            pos = i + 6
            continue
        depth = 0
        k = j
        end = -1
        while k < n:
            c = text[k]
            if c == "\\":
                k += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = k
                    break
            k += 1
        if end < 0:
            return  # unbalanced: no answer here, and no later one can close either
        yield text[j + 1 : end]
        pos = end + 1


def _tag_contents(text: str) -> Iterable[str]:
    lower = text.lower() if "<ANSWER" in text.upper() else text
    pos = 0
    while True:
        i = lower.find("<answer>", pos)
        if i < 0:
            return
        j = lower.find("</answer>", i + 8)
        if j < 0:
            return
        yield text[i + 8 : j]
        pos = j + 9


def _is_real_answer(content: str, rules: ParseRules) -> bool:
    stripped = content.strip()
    return bool(stripped) and stripped.lower() not in rules.placeholders


def extract_final_answer(text: str, rules: ParseRules = DEFAULT_RULES) -> str | None:
    r"""The last final answer outside fenced blocks, stripped; ``None`` if there is none.

    >>> extract_final_answer(r"so the result is \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    >>> extract_final_answer(r"let me double-check \boxed{}") is None
    True
    """
    has_box = rules.boxed and "\\boxed" in text
    has_tag = rules.answer_tags and ("<answer>" in text or "<ANSWER>" in text.upper())
    if not (has_box or has_tag):
        return None
    if "```" in text or "~~~" in text:
        _, regions = _scan_fences(text)
        text = _outside(text, regions)
    best: tuple[int, str] | None = None
    if has_box:
        for content in _boxed_contents(text):
            if _is_real_answer(content, rules):
                pos = text.rfind(content)
                if best is None or pos >= best[0]:
                    best = (pos, content.strip())
    if has_tag:
        for content in _tag_contents(text):
            if _is_real_answer(content, rules):
                pos = text.rfind(content)
                if best is None or pos >= best[0]:
                    best = (pos, content.strip())
    return None if best is None else best[1]


def tool_calls_well_formed(calls: Sequence[ToolCall]) -> bool:
    """True when there is at least one call and every call names a function with JSON arguments."""
    if not calls:
        return False
    for call in calls:
        if not call.name or not call.name.strip():
            return False
        args = call.arguments
        if isinstance(args, dict):
            continue
        if not isinstance(args, str):
            return False
        try:
            json.loads(args)
        except ValueError:
            return False
    return True


def judge_text(text: str | None, rules: ParseRules = DEFAULT_RULES) -> TurnVerdict:
    """Judge assistant text alone (no tool calls)."""
    return judge_message(Message(role=Role.ASSISTANT, content=text), rules)


def judge_message(message: Message, rules: ParseRules = DEFAULT_RULES) -> TurnVerdict:
    """Judge one assistant message. Non-assistant messages are never scanned (raises ``ValueError``)."""
    if message.role is not Role.ASSISTANT:
        raise ValueError(f"only assistant messages are judged, got role {message.role.value!r}")
    text = message.content or ""
    answer = extract_final_answer(text, rules) if text else None
    code = tuple(extract_code_blocks(text, rules)) if text else ()
    calls_ok = tool_calls_well_formed(message.tool_calls)
    if answer is not None:
        kind = ActionKind.ANSWER
    elif code:
        kind = ActionKind.CODE
    elif calls_ok:
        kind = ActionKind.TOOL_CALL
    else:
        kind = ActionKind.VOID
    return TurnVerdict(kind=kind, code=code, answer=answer, tool_calls=message.tool_calls if calls_ok else ())


def judge_messages(messages: Sequence[Message], rules: ParseRules = DEFAULT_RULES) -> TrajectoryVerdict:
    """Judge every assistant message; indexes in ``void_turns`` count assistant messages from 0."""
    verdicts: list[TurnVerdict] = []
    void_turns: list[int] = []
    for m in messages:
        if m.role is not Role.ASSISTANT:
            continue
        v = judge_message(m, rules)
        if v.kind is ActionKind.VOID:
            void_turns.append(len(verdicts))
        verdicts.append(v)
    return TrajectoryVerdict(void=bool(void_turns), void_turns=tuple(void_turns), turns=tuple(verdicts))
