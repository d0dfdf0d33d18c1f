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
* **Tagged actions** (tag-based environments, :attr:`ParseRules.action_tags`):
  outside fenced blocks, ``<NAME>…</NAME>`` with non-blank content for a
  ``NAME`` in the set (``<sql>``, ``<search>``) is an action. Off by default.
* **Answer markers** (:attr:`ParseRules.answer_markers`, e.g. GSM8K's
  ``####``): outside fenced blocks, a marker followed on the same line by
  non-blank text is a final answer (the rest of the line). Off by default;
  :attr:`ParseRules.answer_tag_names` renames ``<answer>`` (``<solution>``).
* A turn with none of these is **void**.

What counts as an action differs per environment; :data:`ACTION_RULES` holds
the named rules (``tir`` — the default above — ``gsm8k``, ``search``,
``sql``), and the ``[filter]`` section picks one (``filter.action_rule``;
``auto`` = the environment's own, see :func:`tirl.filters.rules_from_config`),
so the environment, the filter and the audit share it.

When a turn both answers and contains code, the answer wins: the episode
ends and the code is not run (documented in the README).

Not covered: indented (4-space) code blocks, HTML ``<code>`` blocks and
nested fences are not executable code; ``\boxed`` inside inline backticks is
still counted as an answer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from tirl.fences import CodeBlock, scan_fences
from tirl.types import Message, Role, ToolCall

DEFAULT_EXEC_LANGS: frozenset[str] = frozenset({"python", "py", "python3", "bash", "sh", "shell"})
PYTHON_LANGS: frozenset[str] = frozenset({"python", "py", "python3"})
SHELL_LANGS: frozenset[str] = frozenset({"bash", "sh", "shell"})
DEFAULT_PLACEHOLDERS: frozenset[str] = frozenset(
    {"...", "…", "answer", "your answer", "your answer here", "final answer", "your final answer", "?", "x"}
)
# "x" is a placeholder only as the *whole* content, e.g. the template "\boxed{x}".
_TAG_NAME = re.compile(r"[a-z][a-z0-9_-]*")  # what ParseRules accepts as a tag name


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
    answer_tag_names: frozenset[str] = frozenset({"answer"})  # <NAME>...</NAME> answers (when answer_tags)
    action_tags: frozenset[str] = frozenset()  # <NAME>...</NAME> acts (tag-based envs: sql, search)
    answer_markers: tuple[str, ...] = ()  # "#### 42": a marker, then the answer on the same line

    def __post_init__(self) -> None:
        object.__setattr__(self, "exec_langs", frozenset(x.strip().lower() for x in self.exec_langs))
        object.__setattr__(self, "placeholders", frozenset(x.strip().lower() for x in self.placeholders))
        for name in ("answer_tag_names", "action_tags"):
            tags = frozenset(x.strip().lower() for x in getattr(self, name))
            if any(not _TAG_NAME.fullmatch(t) for t in tags):
                raise ValueError(f"{name} must be tag names like 'sql' (letters, digits, _ or -), got {sorted(tags)}")
            object.__setattr__(self, name, tags)
        markers = tuple(m.strip() for m in self.answer_markers)
        if any(not m for m in markers):
            raise ValueError("answer_markers must be non-blank strings such as '####'")
        object.__setattr__(self, "answer_markers", markers)

    def is_exec_lang(self, lang: str) -> bool:
        """Whether a fence's language is executable under these rules."""
        return lang.lower() in self.exec_langs


DEFAULT_RULES = ParseRules()

#: The named action rules (``filter.action_rule``): what acts and what answers in each kind of environment.
#: ``gsm8k``/``search``/``sql`` follow skyrl-gym's environments of those names (no code is run there).
ACTION_RULES: dict[str, ParseRules] = {
    "tir": DEFAULT_RULES,
    "gsm8k": ParseRules(exec_langs=frozenset(), boxed=False, answer_tags=False, answer_markers=("####",)),
    "search": ParseRules(exec_langs=frozenset(), boxed=False, action_tags=frozenset({"search"})),
    "sql": ParseRules(
        exec_langs=frozenset(), boxed=False, action_tags=frozenset({"sql"}), answer_tag_names=frozenset({"solution"})
    ),
}


@dataclass(frozen=True, slots=True)
class AnswerFormat:
    """An answer format a prompt can ask for, and the action rule (``ACTION_RULES``) that counts it."""

    name: str
    pattern: re.Pattern[str]
    rule: str

    def counted_by(self, rules: ParseRules) -> bool:
        """Whether ``rules`` count an answer written in this format as a final answer."""
        if self.rule == "gsm8k":
            return "####" in rules.answer_markers
        if self.name.startswith("\\boxed"):
            return rules.boxed
        return rules.answer_tags


#: The answer formats a task's prompt can name (verl's gsm8k ``####``, ``\boxed{}``, ``<answer>``).
ANSWER_FORMATS = (
    AnswerFormat("'#### <answer>'", re.compile(r"####"), "gsm8k"),
    AnswerFormat("\\boxed{}", re.compile(r"\\boxed"), "tir"),
    AnswerFormat("<answer>...</answer>", re.compile(r"<answer>"), "tir"),
)


def requested_answer_format(text: str) -> AnswerFormat | None:
    """The first of :data:`ANSWER_FORMATS` that ``text`` (a prompt) names; ``None`` when it names none.

    Not covered: formats stated in words only ("give the number at the end").
    """
    return next((f for f in ANSWER_FORMATS if f.pattern.search(text)), None)


class ActionKind(StrEnum):
    """What a turn does, in order of precedence."""

    ANSWER = "answer"
    CODE = "code"
    TAG = "tag"  # a tagged action (ParseRules.action_tags)
    TOOL_CALL = "tool_call"
    VOID = "void"


# Module constants: an enum member looked up on its class costs ~80 ns, a global ~7 ns (judging is a hot path).
_ANSWER, _CODE, _TAG_ACTION, _TOOL_CALL, _VOID = (
    ActionKind.ANSWER, ActionKind.CODE, ActionKind.TAG, ActionKind.TOOL_CALL, ActionKind.VOID
)  # fmt: skip
_ASSISTANT = Role.ASSISTANT


@dataclass(frozen=True, slots=True)
class TagAction:
    """One tagged action: ``<name>body</name>`` outside code (``body`` as written, not stripped)."""

    name: str
    body: str


@dataclass(slots=True)
class TurnVerdict:
    """The judgement of one assistant message. Treat as read-only (not frozen: judging is a hot path)."""

    kind: ActionKind
    code: tuple[CodeBlock, ...] = ()
    answer: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tags: tuple[TagAction, ...] = ()

    @property
    def is_void(self) -> bool:
        """A turn with neither executable code, a final answer nor a well-formed tool call."""
        return self.kind is _VOID


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


def extract_code_blocks(text: str, rules: ParseRules = DEFAULT_RULES) -> list[CodeBlock]:
    """The executable code blocks of ``text``: closed, executable language, non-blank body."""
    if "```" not in text and "~~~" not in text:
        return []
    blocks, _ = scan_fences(text)
    return list(_executable(blocks, rules))


def _executable(blocks: list[CodeBlock], rules: ParseRules) -> tuple[CodeBlock, ...]:
    """The blocks whose language is executable and whose body is not blank (the one predicate)."""
    langs = rules.exec_langs
    if len(blocks) == 1:  # the common case, without building a comprehension
        b = blocks[0]
        return (b,) if b.lang.lower() in langs and b.body and not b.body.isspace() else ()
    return tuple([b for b in blocks if b.lang.lower() in langs and b.body and not b.body.isspace()])


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


_BOXED = re.compile(r"\\boxed[ \t]*\{")
_TAG = re.compile(r"<answer>(.*?)</answer>", re.I | re.S)


_TAG_RES: dict[frozenset[str], re.Pattern[str]] = {frozenset({"answer"}): _TAG}


def _tags_re(names: frozenset[str]) -> re.Pattern[str]:
    """``<NAME>(body)</NAME>`` for any of ``names`` (the default ``answer`` is the precompiled :data:`_TAG`).

    Kept in a plain dict (a frozenset key costs an ``lru_cache`` a tuple per call; judging is a hot path).
    """
    pattern = _TAG_RES.get(names)
    if pattern is None:
        alt = "|".join(sorted(re.escape(n) for n in names))
        pattern = re.compile(rf"<({alt})>(.*?)</\1>", re.I | re.S)
        if len(_TAG_RES) < 64:  # rule sets are few; a program that makes more compiles the rest each time
            _TAG_RES[names] = pattern
    return pattern


def _tag_bodies(pattern: re.Pattern[str], text: str) -> list[tuple[int, str, str]]:
    """(position, name, body) of each tag match (:data:`_TAG` has only the body group)."""
    if pattern.groups == 1:
        return [(m.start(), "answer", m.group(1)) for m in pattern.finditer(text)]
    return [(m.start(), m.group(1).lower(), m.group(2)) for m in pattern.finditer(text)]


@functools.lru_cache(maxsize=16)
def _marker_re(marker: str) -> re.Pattern[str]:
    return re.compile(re.escape(marker) + r"[ \t]*([^\n]*)")


def _closing_brace(text: str, j: int) -> int:
    r"""Index of the ``}`` that closes a ``{`` opened just before ``j``; -1 if unbalanced.

    ``\{`` and ``\}`` are literal braces and do not count (a brace after an
    escaped backslash, ``\\}``, is not recognised as structural: a documented limit).
    """
    depth = 1
    find = text.find
    while True:
        k = find("}", j)
        if k < 0:
            return -1
        seg = text[j:k]
        if "{" in seg:
            depth += seg.count("{") - seg.count("\\{")
        if text[k - 1] != "\\":
            depth -= 1
            if depth == 0:
                return k
        j = k + 1


def _boxed_contents(text: str, first: int | None = None) -> list[tuple[int, str]]:
    r"""(position, content) of each ``\boxed{...}`` with balanced braces, up to the first unbalanced one.

    ``first``: where the first ``\boxed`` of ``text`` is, when the caller has already found it (-1: none).
    """
    out: list[tuple[int, str]] = []
    find, match = text.find, _BOXED.match
    k = find("\\boxed") if first is None else first  # a str search is faster than the regex's scan for its prefix
    while k >= 0:
        m = match(text, k)
        if m is None:  # "\boxed" not followed by "{"
            k = find("\\boxed", k + 6)
            continue
        end = _closing_brace(text, m.end())
        if end < 0:
            return out  # unbalanced: no answer here, and none after it can be delimited either
        out.append((k, text[m.end() : end]))
        k = find("\\boxed", end + 1)
    return out


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
    if "```" in text or "~~~" in text:
        return _final_answer(text, scan_fences(text)[1], rules)
    return _final_answer(text, [], rules)


def _final_answer(text: str, regions: list[tuple[int, int]], rules: ParseRules) -> str | None:
    box_at = text.find("\\boxed") if rules.boxed and "\\" in text else -1
    has_box = box_at >= 0
    # A tag needs its closing "</": one-character screens (a memchr each) before the regex scans the text.
    tag_re = _tags_re(rules.answer_tag_names) if rules.answer_tags and "<" in text and "/" in text else None
    has_tag = tag_re is not None and tag_re.search(text) is not None
    markers = [mk for mk in rules.answer_markers if mk in text] if rules.answer_markers else []
    if not (has_box or has_tag or markers):
        return None
    if regions:
        text = _outside(text, regions)
        box_at = text.find("\\boxed")  # a \boxed inside a fenced region is gone
    best_pos, best = -1, None
    if has_box:
        for pos, content in _boxed_contents(text, box_at):
            if pos > best_pos and _is_real_answer(content, rules):
                best_pos, best = pos, content
    if has_tag and tag_re is not None:
        for pos, _, body in _tag_bodies(tag_re, text):
            if pos > best_pos and _is_real_answer(body, rules):
                best_pos, best = pos, body
    for marker in markers:
        for m in _marker_re(marker).finditer(text):
            if m.start() > best_pos and _is_real_answer(m.group(1), rules):
                best_pos, best = m.start(), m.group(1)
    return None if best is None else best.strip()


def _tag_actions(text: str, regions: list[tuple[int, int]], rules: ParseRules) -> tuple[TagAction, ...]:
    """The tagged actions outside fenced blocks: ``<NAME>body</NAME>`` with non-blank body, in order."""
    found = _tag_bodies(_tags_re(rules.action_tags), _outside(text, regions))
    return tuple(TagAction(name, body) for _, name, body in found if body.strip())


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
        except (ValueError, RecursionError):  # RecursionError: arguments nested deeper than the parser's stack
            return False
    return True


def judge_text(text: str | None, rules: ParseRules = DEFAULT_RULES) -> TurnVerdict:
    """Judge assistant text alone (no tool calls)."""
    return judge_content(text, (), rules)


def judge_message(message: Message, rules: ParseRules = DEFAULT_RULES) -> TurnVerdict:
    """Judge one assistant message. Non-assistant messages are never scanned (raises ``ValueError``)."""
    if message.role is not _ASSISTANT:
        raise ValueError(f"only assistant messages are judged, got role {message.role.value!r}")
    return judge_content(message.content, message.tool_calls, rules)


def judge_content(
    content: str | None, tool_calls: tuple[ToolCall, ...] = (), rules: ParseRules = DEFAULT_RULES
) -> TurnVerdict:
    """Judge an assistant turn from its parts: :func:`judge_message` without building a :class:`Message`.

    The hot path of the void filter: one-character ``in`` tests (a ``memchr`` each) decide which scans run at all.
    """
    text = content or ""
    code, regions = _code(text, rules)
    answer = _final_answer(text, regions, rules) if _may_answer(text, rules) else None
    tags = _tag_actions(text, regions, rules) if answer is None and rules.action_tags and "<" in text else ()
    calls_ok = bool(tool_calls) and tool_calls_well_formed(tool_calls)
    if answer is not None:
        kind = _ANSWER
    elif code:
        kind = _CODE
    elif tags:
        kind = _TAG_ACTION
    elif calls_ok:
        kind = _TOOL_CALL
    else:
        kind = _VOID
    return TurnVerdict(kind, code, answer, tool_calls if calls_ok else (), tags)


def _code(text: str, rules: ParseRules) -> tuple[tuple[CodeBlock, ...], list[tuple[int, int]]]:
    """The executable blocks of ``text`` and its fenced regions (one-character screens first)."""
    if "`" not in text and "~~~" not in text:
        return (), []
    blocks, regions = scan_fences(text)
    return _executable(blocks, rules), regions


def _may_answer(text: str, rules: ParseRules) -> bool:
    """False when no answer form of ``rules`` can match: no backslash, no ``<`` and no answer markers."""
    return "\\" in text or "<" in text or bool(rules.answer_markers)


#: What :func:`turn_acts` returns for a turn whose answer it did not search: (text, fenced regions).
Unsearched = tuple[str, list[tuple[int, int]]]


def turn_acts(
    content: str | None, tool_calls: tuple[ToolCall, ...], rules: ParseRules
) -> tuple[bool, str | Unsearched | None]:
    """Whether a turn acts (``not judge_content(...).is_void``), with the answer search skipped where code decides.

    Returns ``(acts, answer)``. ``answer`` is the turn's answer as :func:`judge_content` gives it (a ``str``
    or ``None``), except for a turn with executable code: its answer is not needed to know that it acts, so
    it is left unsearched and ``answer`` is the ``(text, regions)`` tuple to hand to :func:`answer_of` if a
    caller does need it (``tirl filter`` needs only the last answer of a void trajectory). Same helpers as
    :func:`judge_content`; builds no :class:`TurnVerdict`. A property test checks that the two agree.
    """
    text = content or ""
    code, regions = _code(text, rules)
    if code:
        return True, (text, regions)
    answer = _final_answer(text, regions, rules) if _may_answer(text, rules) else None
    if answer is not None:
        return True, answer
    if rules.action_tags and "<" in text and _tag_actions(text, regions, rules):
        return True, None
    return bool(tool_calls) and tool_calls_well_formed(tool_calls), None


def answer_of(unsearched: Unsearched, rules: ParseRules) -> str | None:
    """The answer of a turn that :func:`turn_acts` left unsearched (what :func:`judge_content` gives)."""
    text, regions = unsearched
    return _final_answer(text, regions, rules) if _may_answer(text, rules) else None


def judge_messages(messages: Sequence[Message], rules: ParseRules = DEFAULT_RULES) -> TrajectoryVerdict:
    """Judge every assistant message; indexes in ``void_turns`` count assistant messages from 0."""
    verdicts: list[TurnVerdict] = []
    void_turns: list[int] = []
    for m in messages:
        if m.role is not _ASSISTANT:
            continue
        v = judge_content(m.content, m.tool_calls, rules)
        if v.kind is _VOID:
            void_turns.append(len(verdicts))
        verdicts.append(v)
    return TrajectoryVerdict(void=bool(void_turns), void_turns=tuple(void_turns), turns=tuple(verdicts))
