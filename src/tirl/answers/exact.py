r"""Exact values of plain answers: rational numbers and bracketed lists of them, with hostile-input caps.

:func:`parse_number` reads ``-12``, ``1,234``, ``0.25``, ``0.\overline{3}``, ``3/4``,
``\frac{3}{4}``, ``-\frac{3}{4}``, ``1e3``, ``3 \times 10^{3}``, ``10^{-2}``
as a :class:`~fractions.Fraction`, exactly (``0.1`` is ``1/10``; no float
tolerance anywhere). :func:`parse_sequence` reads ``(1, 2)``, ``[0, 1)``,
``\{1, 2\}`` and a bare ``1, 2`` into a :class:`Sequence` of element strings.

Caps (checked on the text, before any number is built): at most
``MAX_DIGITS`` digits in one literal and exponents up to ``MAX_EXPONENT`` in
absolute value. A value beyond them (``1e5000``, ``10^{10^{10}}``, a
10,000-digit string) is :func:`hostile`: it is never parsed, and it matches
only an identical string. Not covered here: radicals, ``\pi``, symbols
(the math-verify fallback's job).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from tirl.answers.normalize import read_group

__all__ = ["MAX_DIGITS", "MAX_EXPONENT", "Sequence", "hostile", "parse_number", "parse_sequence", "split_top"]

MAX_DIGITS = 200
MAX_EXPONENT = 300
_DECIMAL = re.compile(r"([-+]?)(\d+(?:\.\d*)?|\.\d+)(?:[eE]([-+]?\d+))?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_TIMES_POW = re.compile(r"(.*?)(?:\\times|\\cdot|\*)10\^(\{[^{}]*\}|-?\d)")
_POW10 = re.compile(r"([-+]?)10\^(\{[^{}]*\}|\d)")
_DIGIT_RUN = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")
_EXP_LITERAL = re.compile(r"[eE][-+]?(\d+)|\^\{?\s*[-+]?(\d+)")
_REPEATING = re.compile(r"([-+]?)(\d*)\.(\d*)\\overline\{(\d+)\}")
_SPACED_DIGITS = re.compile(r"\d\s+\d")
_PLAIN_FRAC = re.compile(rf"([-+]?)\\frac\{{([0-9]{{1,{MAX_DIGITS + 1}}})\}}\{{([0-9]{{1,{MAX_DIGITS + 1}}})\}}")
_BRACED_POWER = re.compile(r"\^\s*\{")
_BARE_TOWER = re.compile(r"\^\s*[-+]?\d+\s*\^|\^\s*\([^)]*\^")
_BIG_FACTORIAL = re.compile(r"\d{4,}\s*!|\}\s*!")


def hostile(text: str) -> bool:
    r"""Whether ``text`` holds a value too big to build: a long digit run, a huge exponent, a power tower."""
    if _DIGIT_RUN.search(text) or _BIG_FACTORIAL.search(text) or _BARE_TOWER.search(text):
        return True
    for m in _EXP_LITERAL.finditer(text):
        digits = m.group(1) or m.group(2)
        if len(digits) > 4 or int(digits) > MAX_EXPONENT:
            return True
    for m in _BRACED_POWER.finditer(text):
        group = read_group(text, m.end() - 1)
        if group is not None and "^" in group[0]:
            return True  # 10^{10^{10}}
    return False


def _int_exponent(token: str) -> int | None:
    t = token[1:-1].strip() if token.startswith("{") else token
    if not re.fullmatch(r"[-+]?\d{1,4}", t):
        return None
    value = int(t)
    return value if abs(value) <= MAX_EXPONENT else None


def _decimal(s: str) -> Fraction | None:
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    m = _DECIMAL.fullmatch(s)
    if m is None:
        return None
    sign, mantissa, exp = m.groups()
    if len(mantissa) > MAX_DIGITS + 1:
        return None
    if exp is not None and (len(exp.lstrip("+-")) > 4 or abs(int(exp)) > MAX_EXPONENT):
        return None
    if exp:
        value = Fraction(mantissa) * Fraction(10) ** int(exp)
    else:  # the common case; an int is ~5x cheaper for Fraction than its text
        value = Fraction(mantissa) if "." in mantissa else Fraction(int(mantissa))
    return -value if sign == "-" else value


def parse_number(text: str) -> Fraction | None:
    r"""The exact value of a plain number written in ``text`` (see the module docstring), else ``None``."""
    if text.isdigit() and text.isascii() and len(text) <= MAX_DIGITS + 1:  # a plain whole number: no regex needed
        return Fraction(int(text))
    m = _PLAIN_FRAC.fullmatch(text)
    if m is not None:  # \frac{12}{34}: the value the general reader below builds, without its recursion
        sign, num, den = m.groups()
        d = int(den)
        if d == 0:
            return None
        ratio = Fraction(int(num), d)
        return -ratio if sign == "-" else ratio
    if _SPACED_DIGITS.search(text):
        return None  # "1 2" is not 12
    s = "".join(text.split())
    if not s or len(s) > 4 * MAX_DIGITS:
        return None
    value = _decimal(s)
    if value is not None:
        return value
    m = _REPEATING.fullmatch(s)
    if m:  # 0.1\overline{6} = 1/10 + 6/90
        sign, whole, fixed, period = m.groups()
        if len(whole) + len(fixed) + len(period) > MAX_DIGITS:
            return None
        value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed))
        value += Fraction(int(period), 10 ** len(fixed) * (10 ** len(period) - 1))
        return -value if sign == "-" else value
    negative = s.startswith("-")
    body = s[1:] if s[:1] in "-+" else s
    if body.startswith("\\frac{"):
        num = read_group(body, len("\\frac"))
        den = read_group(body, num[1]) if num else None
        if num is None or den is None or den[1] != len(body):
            return None
        a, b = parse_number(num[0]), parse_number(den[0])
        if a is None or b is None or b == 0:
            return None
        return -(a / b) if negative else a / b
    if "/" in body and body.count("/") == 1:
        left, _, right = body.partition("/")
        a, b = _decimal(left), _decimal(right)
        if a is None or b is None or b == 0:
            return None
        return -(a / b) if negative else a / b
    m = _TIMES_POW.fullmatch(s)
    if m:
        mantissa, exp = parse_number(m.group(1)), _int_exponent(m.group(2))
        if mantissa is None or exp is None:
            return None
        return mantissa * Fraction(10) ** exp
    m = _POW10.fullmatch(s)
    if m:
        exp = _int_exponent(m.group(2))
        if exp is None:
            return None
        value = Fraction(10) ** exp
        return -value if m.group(1) == "-" else value
    return None


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split ``s`` at ``sep`` characters outside any brackets or braces."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


@dataclass(frozen=True, slots=True)
class Sequence:
    r"""A list answer: ``open``/``close`` are its brackets (``""`` when bare), ``items`` its element strings.

    Ordered when bracketed by ``()``/``[]`` (tuples, points, intervals: the
    brackets must match too); unordered for ``\{…\}`` sets and bare lists
    (``x = 1, 2`` lists solutions).
    """

    open: str
    close: str
    items: tuple[str, ...]

    @property
    def ordered(self) -> bool:
        """Whether element order matters."""
        return self.open in ("(", "[")


def parse_sequence(text: str) -> Sequence | None:
    r"""A list of two or more elements (``(1, 2)``, ``[0, 1)``, ``\{1, 2\}``, ``1, 2``), else ``None``."""
    s = text.strip()
    if _THOUSANDS.fullmatch(s.replace(" ", "")):
        return None  # 1,000 is a number
    for left, right in (("\\{", "\\}"), ("(", ")"), ("(", "]"), ("[", "]"), ("[", ")")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            inner = s[len(left) : len(s) - len(right)]
            items = split_top(inner)
            if len(items) >= 2 and all(items) and _balanced(inner):
                return Sequence(left, right, tuple(items))
    items = split_top(s)
    if len(items) >= 2 and all(items):
        return Sequence("", "", tuple(items))
    return None


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0
