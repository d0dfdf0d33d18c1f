r"""Comparing a model's final answer with the ground truth (numeric and fraction normalisation).

>>> answers_match("\\frac{1}{2}", "0.5"), answers_match("1,000", "1000"), answers_match("x+1", "x + 1")
(True, True, True)

Numbers are compared exactly as fractions (``0.1`` is ``1/10``; no float
tolerance). Non-numeric answers are compared after removing whitespace,
``$`` signs, ``\text{}``/``\mathrm{}`` wrappers and a trailing period,
case-insensitively. Not covered: symbolic equivalence (``2x`` vs ``x*2``),
units, sets and intervals.
"""

from __future__ import annotations

import re
from fractions import Fraction

_FRAC = re.compile(r"^\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_WRAP = re.compile(r"\\(?:text|mathrm|mathbf|textbf)\{([^{}]*)\}")


def normalize_answer(text: str) -> str:
    """A canonical string form: numbers as reduced fractions or integers, other text squeezed."""
    s = text.strip()
    s = _WRAP.sub(r"\1", s)
    s = s.replace("$", "").replace("\\!", "").replace("\\,", "").replace("\\ ", "")
    s = s.strip().rstrip(".").strip()
    number = parse_number(s)
    if number is not None:
        return str(number.numerator) if number.denominator == 1 else f"{number.numerator}/{number.denominator}"
    return re.sub(r"\s+", "", s).lower()


def parse_number(text: str) -> Fraction | None:
    r"""Parse ``-12``, ``1,234``, ``0.25``, ``3/4``, ``\frac{3}{4}``, ``1e3`` exactly; ``None`` otherwise."""
    s = text.strip().replace(" ", "")
    m = _FRAC.match(s)
    if m:
        num, den = parse_number(m.group(1)), parse_number(m.group(2))
        if num is None or den is None or den == 0:
            return None
        return num / den
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    if "/" in s:
        a, _, b = s.partition("/")
        num, den = parse_number(a), parse_number(b)
        if num is None or den is None or den == 0:
            return None
        return num / den
    if not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, truth: str | None) -> bool:
    """True when both are present and equal after normalisation."""
    if predicted is None or truth is None:
        return False
    return normalize_answer(predicted) == normalize_answer(truth)
