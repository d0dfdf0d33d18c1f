r"""Cleaning a final answer into a canonical LaTeX-ish string (linear time, no parsing of numbers).

:func:`clean` turns what a model or a dataset wrote into a :class:`Cleaned`
answer: the LaTeX a careful grader would read past is removed, and what it
would keep aside is recorded.

Covered (each is undone or recorded):

* ``$…$``, ``\(…\)``, ``\[…\]``; whole-answer ``\boxed{…}``/``\fbox{…}``, nested;
* Unicode minus, ``×``, ``·``, ``π``, ``°``, ``∞`` and non-breaking/thin spaces;
* LaTeX spacing (``\,`` ``\;`` ``\:`` ``\!`` ``\ `` ``~`` ``\quad``), ``\left``/``\right``, ``{,}``;
* ``\dfrac``/``\tfrac`` and brace-less ``\frac12``, ``\sqrt2``;
* ``\text{…}``, ``\mathrm{…}``, ``\textbf{…}``, ``\mbox{…}`` and similar wrappers;
* degrees (``^\circ``, ``^{\circ}``, ``\degree``), money signs (``\$``);
* a trailing unit (a trailing ``\text{…}`` word group after a value, or a known unit word);
* a percent sign (``Cleaned.percent``); a leading ``x =`` (``Cleaned.lhs``); a trailing period;
* a leading ``The answer is`` / ``Final answer:``.

Not covered: anything that needs the meaning of the expression (that is
:mod:`tirl.answers.exact` and the math-verify fallback's job), units inside
an expression (``5\,\mathrm{m}/\mathrm{s}^2`` keeps ``/s^2`` unless it is one
trailing group), and natural-language answers beyond case and spacing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Cleaned", "choice_letter", "clean", "is_text_answer", "read_group", "unit_key"]

_UNICODE = str.maketrans(
    {
        "\u2212": "-",  # minus sign
        "\u2013": "-",  # en dash (often a minus in copied text)
        "\u00d7": r"\times ",
        "\u22c5": r"\cdot ",
        "\u00b7": r"\cdot ",
        "\u03c0": r"\pi ",
        "\u221e": r"\infty ",
        "\u00b0": r"^\circ ",
        "\u00a0": " ",
        "\u2009": " ",
        "\u202f": " ",
        "\u2002": " ",
        "\u2003": " ",
    }
)
_SPACING = re.compile(r"(?<!\\)\\(?:[,;:!> ]|q?quad\b|(?:h|m)space\{[^{}]*\})")  # not the \\ of a new row
_EMPTY_SET = re.compile(r"\\varnothing\b|\\\{\s*\\\}")
_SIZING = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)(?![a-zA-Z])")
_WRAPPERS = (
    "text",
    "textrm",
    "textbf",
    "textit",
    "textup",
    "textnormal",
    "mathrm",
    "mathbf",
    "mathit",
    "mathsf",
    "mathtt",
    "mbox",
    "hbox",
    "boldsymbol",
    "displaystyle",
)
_WRAPPER = re.compile(r"\\(" + "|".join(_WRAPPERS) + r")(?![a-zA-Z])\s*")
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree(?![a-zA-Z])|\\textdegree(?![a-zA-Z])")
_LHS = re.compile(r"^\s*([A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?|\\[a-zA-Z]+(?:_\{?[A-Za-z0-9]+\}?)?)\s*=\s*(.+)$", re.S)
_UNIT_WORDS = frozenset(
    """
    cm m km mm nm in inch inches ft foot feet yd yard yards mi mile miles kg g mg lb lbs pound pounds oz ounce
    ounces s sec secs second seconds min mins minute minutes h hr hrs hour hours day days week weeks month months
    year years degree degrees deg rad radian radians dollar dollars cent cents unit units sq square cubic l liter
    liters litre litres ml meter meters metre metres centimeter centimeters centimetre centimetres kilometer
    kilometers millimeter millimeters mph kmh percent people students ways cookies apples marbles points
    """.split()
)
_UNIT_SYNONYMS = {
    "centimeter": "cm", "centimetre": "cm", "meter": "m", "metre": "m", "kilometer": "km", "millimeter": "mm",
    "inch": "in", "inche": "in", "foot": "ft", "feet": "ft", "yard": "yd", "mile": "mi", "second": "s", "sec": "s",
    "minute": "min", "hour": "h", "hr": "h", "degree": "deg", "liter": "l", "litre": "l", "pound": "lb",
    "ounce": "oz", "radian": "rad", "kilogram": "kg", "gram": "g",
}  # fmt: skip
_TEXTLIKE = re.compile(r"[A-Za-z][A-Za-z\s'\-]*")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_LEADING_CHOICE = re.compile(r"^\(([A-E])\)(?:$|[\s:.])")
_PREAMBLE = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*", re.I)
_DIGIT_GAP = re.compile(r"(?<=\d)\s+(?=\d)")
_ANY_CHOICE = re.compile(r"\([A-E]\)|\b[A-E]\b")
_NOT_UNITS = frozenset("or and more less than not least most at to plus minus times over under about approximately "
                       "nearly almost exactly only no none".split())  # fmt: skip
MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Cleaned:
    """An answer with the presentation removed.

    ``text`` keeps LaTeX and case (spaces squeezed to one), ``percent`` says a
    ``%`` was removed, ``lhs`` is the variable of a removed ``x =``, ``unit`` a
    removed trailing unit.
    """

    text: str
    percent: bool = False
    lhs: str | None = None
    unit: str | None = None

    @property
    def key(self) -> str:
        """The comparison key: ``text`` without whitespace, except one ``_`` between two digits (``1 2`` ≠ ``12``)."""
        return "".join(_DIGIT_GAP.sub("_", self.text).split())


def read_group(s: str, i: int) -> tuple[str, int] | None:
    """The content of the ``{...}`` group opening at ``s[i]`` and the index after it; ``None`` if unbalanced."""
    if i >= len(s) or s[i] != "{":
        return None
    depth = 0
    j = i
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2  # an escaped character (\{, \}) never opens or closes a group
            continue
        if c == "{":
            depth += 1
            if depth > MAX_DEPTH:
                return None
        elif c == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1 : j], j + 1
        j += 1
    return None


def _arg(s: str, i: int) -> tuple[str, int] | None:
    r"""One macro argument at ``s[i]``: a braced group, a ``\command`` or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return None
    if s[i] == "{":
        return read_group(s, i)
    if s[i] == "\\":
        m = re.match(r"\\[a-zA-Z]+", s[i:])
        if m:
            return m.group(0), i + m.end()
        return None
    if s[i] in "}^_":
        return None
    return s[i], i + 1


def _brace_macros(s: str) -> str:
    r"""``\frac12`` → ``\frac{1}{2}``, ``\sqrt2`` → ``\sqrt{2}`` (``\dfrac``/``\tfrac`` become ``\frac``)."""
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    if "\\frac" not in s and "\\sqrt" not in s:
        return s
    out: list[str] = []
    i = 0
    for m in re.finditer(r"\\(frac|sqrt)(?![a-zA-Z])", s):
        if m.start() < i:
            continue
        out.append(s[i : m.end()])
        j = m.end()
        nargs = 2 if m.group(1) == "frac" else 1
        if m.group(1) == "sqrt" and j < len(s) and s[j] == "[":
            close = s.find("]", j)
            if close < 0:
                i = j
                continue
            out.append(s[j : close + 1])
            j = close + 1
        args: list[str] = []
        for _ in range(nargs):
            got = _arg(s, j)
            if got is None:
                break
            args.append(got[0])
            j = got[1]
        if len(args) == nargs:
            out.append("".join("{" + a + "}" for a in args))
            i = j
        else:
            i = m.end()
    out.append(s[i:])
    return "".join(out)


def _unwrap_all(s: str, pattern: re.Pattern[str]) -> str:
    r"""Replace ``\name{content}`` by ``content`` for every match of ``pattern`` (brace-aware)."""
    for _ in range(MAX_DEPTH):
        m = pattern.search(s)
        if m is None:
            return s
        group = read_group(s, m.end())
        if group is None:
            return s[: m.start()] + s[m.end() :]
        s = s[: m.start()] + group[0] + s[group[1] :]
    return s


def _strip_delims(s: str) -> str:
    s = s.strip()
    for _ in range(MAX_DEPTH):
        before = s
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(left) and s.endswith(right):
                s = s[len(left) : -len(right)].strip()
        m = re.match(r"\\(?:boxed|fbox)\s*", s)
        if m:
            group = read_group(s, m.end())
            if group is not None and group[1] == len(s):
                s = group[0].strip()
            elif group is None and m.end() < len(s) and s[m.end()] != "{":
                s = s[m.end() :].strip()  # \boxed 5
        if s == before:
            return s
    return s


def _trailing_words(s: str) -> tuple[str, str] | None:
    """Split ``s`` into a head and its trailing letters-and-spaces words (``("5", "cm")``), scanning once."""
    j = len(s)
    while j > 0 and (s[j - 1].isascii() and (s[j - 1].isalpha() or s[j - 1] == " ")):
        j -= 1
    words = s[j:].strip()
    head = s[:j].rstrip()
    if not words or not head or not s[j:].startswith(" "):  # "3 m" is a unit, "3m" a product
        return None
    return head, words


def _trailing_unit(s: str) -> tuple[str, str | None]:
    r"""Remove a trailing ``\text{…}`` word group, or known unit words, after a value."""
    power = re.search(r"\^\{?([23])\}?$", s)
    body = s[: power.start()] if power else s
    suffix = f"^{power.group(1)}" if power else ""
    m = re.search(r"\\(?:text|mbox|mathrm|textrm)\s*\{\s*([A-Za-z][A-Za-z ./]*)\}\s*$", body)
    if m:
        head = body[: m.start()].rstrip()
        words = m.group(1).strip()
        split_words = [w.lower() for w in words.replace("/", " ").split()]
        known = all(w in _UNIT_WORDS for w in split_words)
        connective = any(w in _NOT_UNITS for w in split_words)  # "5 or more" is not 5 in some unit
        if head and not connective and (head[-1].isdigit() or head[-1] in "}).]" or known):
            return head, words + suffix
    split = _trailing_words(body)
    if split is not None:
        head, words = split
        after_value = head[-1].isdigit() or head[-1] in "}).]"
        if after_value and all(w.lower() in _UNIT_WORDS for w in words.split()):
            return head, words + suffix
    return s, None


def clean(raw: str) -> Cleaned:
    """Remove presentation from ``raw`` (see the module docstring); linear in its length."""
    s = raw.translate(_UNICODE)
    s = _PREAMBLE.sub("", s.strip(), count=1)
    s = _strip_delims(s)
    s = s.replace("\\$", "").replace("$", "")
    s = _SPACING.sub(" ", s).replace("~", " ")
    s = _EMPTY_SET.sub(r"\\emptyset", s)
    s = re.sub(r"(?<=\d) (?=\d{3}(?!\d))", "", s)  # "1 000" from "1\,000"
    s = _SIZING.sub("", s).replace("{,}", ",")
    s = _DEGREE.sub("", s)
    s = s.strip()
    percent = False
    for _ in range(3):
        t = s.rstrip(" .")
        if t.endswith("\\%"):
            s, percent = t[:-2].rstrip(), True
        elif t.endswith("%"):
            s, percent = t[:-1].rstrip(), True
        else:
            s = t
    s, unit = _trailing_unit(s)
    if unit and unit.lower() == "percent":
        percent = True
    s = _unwrap_all(s, _WRAPPER)
    s = _brace_macros(s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    lhs = None
    m = _LHS.match(s)
    if m and "=" not in m.group(2) and not m.group(1).startswith(("\\text", "\\frac")):
        lhs, s = m.group(1), m.group(2).strip()
        s, unit2 = _trailing_unit(s)
        unit = unit or unit2
    return Cleaned(text=s, percent=percent, lhs=lhs, unit=unit)


def unit_key(unit: str) -> str:
    """A unit in one spelling: lower case, singular, abbreviated (``Centimeters`` → ``cm``)."""
    words = []
    for w in unit.lower().replace("/", " per ").split():
        if len(w) > 3 and w.endswith("s"):
            w = w[:-1]
        words.append(_UNIT_SYNONYMS.get(w, w))
    return " ".join(words)


def is_text_answer(text: str) -> bool:
    """Whether ``text`` is words (letters, spaces, ``'``, ``-``) of 3+ letters or with a space, not math."""
    t = text.strip()
    return bool(_TEXTLIKE.fullmatch(t)) and (len(t) >= 3 or " " in t) and "\\" not in t


def choice_letter(text: str, *, leading: bool = False) -> str | None:
    """``C`` for ``C``, ``(C)``, ``c``; with ``leading`` also for ``(C) 12``; else ``None``."""
    t = text.strip()
    m = _CHOICE.match(t)
    if m:
        return m.group(1).upper()
    if leading:
        m2 = _LEADING_CHOICE.match(t)
        if m2 and not _ANY_CHOICE.search(t, m2.end()):  # "(C) or (D)" names no single choice
            return m2.group(1)
    return None
