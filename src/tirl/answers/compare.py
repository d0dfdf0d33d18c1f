r"""The grading decision: exact where the answer is plain, a symbolic comparison request where it is not.

:func:`decide` never parses anything slow: it cleans both answers
(:mod:`tirl.answers.normalize`), rejects values too big to build
(:func:`~tirl.answers.exact.hostile`), and settles text, choices, plain
numbers and lists of plain numbers exactly. What it cannot settle (radicals,
``\pi``, expressions, intervals with symbolic ends) comes back as a
:class:`Decision` with ``verdict=None`` and the two LaTeX strings to give the
math-verify fallback, with every decimal written as an exact fraction.

The rules a careful grader applies, as coded here:

* ``50\%`` matches ``50`` and ``0.5``; ``x = 5`` matches ``5`` (but not ``y = 5``);
* a unit or degree sign may be left off, but two different units do not match;
* text is compared without case, spaces and surrounding punctuation; a choice
  ``(C)`` matches ``C``, ``c`` and ``(C) 12``;
* ``(1, 2)`` is ordered and its brackets count (``[1, 2)`` is another interval);
  ``\{1, 2\}`` and a bare ``1, 2`` are unordered;
* no tolerance: ``99.9999999`` is not ``100``, ``3.14`` is not ``\pi``;
* variables keep their case: ``X^2`` is not ``x^2``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from tirl.answers.exact import Sequence, hostile, parse_number, parse_sequence
from tirl.answers.normalize import Cleaned, choice_letter, clean, is_text_answer, unit_key

__all__ = ["MAX_CHARS", "Decision", "decide"]

MAX_CHARS = 1000  # longer answers are only compared as identical strings
_PLAIN_CHARS = 64
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_LETTER = re.compile(r"[A-Za-z]")
_DECIMAL_LITERAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")


@dataclass(frozen=True, slots=True)
class Decision:
    """``verdict`` when settled here (``path`` says how), else the fallback's inputs ``gold`` and ``pred``."""

    verdict: bool | None
    path: str  # missing | hostile | string | text | exact | fallback
    gold: str = ""
    pred: str = ""


def _numbers_equal(p: Fraction, p_pct: bool, g: Fraction, g_pct: bool) -> bool:
    if p_pct == g_pct:
        return p == g
    if p_pct:
        return p == g or p / 100 == g
    return p == g or g / 100 == p


def _element(a: str, b: str) -> bool | None:
    ca, cb = clean(a), clean(b)
    na, nb = parse_number(ca.key), parse_number(cb.key)
    if na is not None and nb is not None:
        return na == nb and ca.percent == cb.percent
    if ca.key == cb.key:
        return True
    return None


def _sequences_equal(p: Sequence, g: Sequence) -> bool | None:
    if p.ordered or g.ordered:
        if (p.open, p.close) != (g.open, g.close) or len(p.items) != len(g.items):
            return False
        verdicts = [_element(a, b) for a, b in zip(p.items, g.items, strict=True)]
        if False in verdicts:
            return False
        return True if all(v is True for v in verdicts) else None
    if len(p.items) != len(g.items):
        return False  # "1, 1, 2" repeats a root that "1, 2" lists once
    p_keys = [clean(x) for x in p.items]
    g_keys = [clean(x) for x in g.items]
    p_nums = [parse_number(c.key) for c in p_keys]
    g_nums = [parse_number(c.key) for c in g_keys]
    if all(n is not None for n in p_nums + g_nums):
        return set(p_nums) == set(g_nums)
    if {c.key for c in p_keys} == {c.key for c in g_keys}:
        return True
    return None


def _values(p: Cleaned, g: Cleaned) -> bool | None:
    pn, gn = parse_number(p.key), parse_number(g.key)
    if pn is not None and gn is not None:
        return _numbers_equal(pn, p.percent, gn, g.percent)
    ps, gs = parse_sequence(p.text), parse_sequence(g.text)
    if ps is not None and gs is not None:
        return _sequences_equal(ps, gs)
    return None


def _exact_latex(text: str) -> str:
    r"""``3.14`` → ``\frac{314}{100}`` everywhere, so the fallback never meets a float."""
    return _DECIMAL_LITERAL.sub(lambda m: f"\\frac{{{m.group(1)}{m.group(2)}}}{{1{'0' * len(m.group(2))}}}", text)


def _as_text(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 3000:  # ~900 digits
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return value


def _letters(text: str) -> set[str]:
    """The Latin letters of ``text`` outside LaTeX command names."""
    return set(_LETTER.findall(_COMMAND.sub(" ", text)))


def _text_key(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .,:;!'\"")


def decide(predicted: object, truth: object) -> Decision:
    """Settle ``predicted`` against ``truth`` exactly where possible (see the module docstring).

    A JSON number (``int``, finite ``float``) is read as its decimal text; any other non-string is no answer.
    """
    predicted, truth = _as_text(predicted), _as_text(truth)
    if not isinstance(predicted, str) or not isinstance(truth, str) or not predicted.strip() or not truth.strip():
        return Decision(False, "missing")
    if len(predicted) > MAX_CHARS or len(truth) > MAX_CHARS:
        return Decision(predicted.strip() == truth.strip(), "hostile")
    if len(predicted) <= _PLAIN_CHARS and len(truth) <= _PLAIN_CHARS:  # the fast path: two plain numbers
        pn, gn = parse_number(predicted), parse_number(truth)
        if pn is not None and gn is not None:
            return Decision(pn == gn, "exact")
    p, g = clean(predicted), clean(truth)
    if not p.key or not g.key:
        return Decision(False, "missing")
    if hostile(p.key) or hostile(g.key):
        return Decision(p.key == g.key and p.percent == g.percent, "hostile")
    if p.lhs is not None and g.lhs is not None and p.lhs != g.lhs:
        return Decision(False, "string")
    if p.unit is not None and g.unit is not None and unit_key(p.unit) != unit_key(g.unit):
        return Decision(False, "string")
    if p.key == g.key and p.percent == g.percent:
        return Decision(True, "string")
    gold_choice = choice_letter(g.text)
    if gold_choice is not None:
        return Decision(choice_letter(p.text, leading=True) == gold_choice, "text")
    if is_text_answer(g.text) or is_text_answer(p.text):
        return Decision(_text_key(p.text) == _text_key(g.text), "text")
    verdict = _values(p, g)
    if verdict is not None:
        return Decision(verdict, "exact")
    pl, gl = _letters(p.text), _letters(g.text)
    if pl != gl and {c.lower() for c in pl} == {c.lower() for c in gl}:
        return Decision(False, "string")  # X^2 is not x^2 (math-verify lowercases every variable)
    return Decision(None, "fallback", gold=_exact_latex(g.text), pred=_exact_latex(p.text))
