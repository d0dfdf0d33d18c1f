r"""Grading a model's final answer against the ground truth, as a careful person would.

>>> answers_match(r"\dfrac12", "0.5"), answers_match(r"-\frac34", "-0.75"), answers_match(r"1{,}000", "1000")
(True, True, True)
>>> answers_match(r"x = 5", "5"), answers_match(r"50\%", "50"), answers_match(r"30^\circ", "30")
(True, True, True)
>>> answers_match("99.9999999", "100"), answers_match("3.14", r"\pi"), answers_match("1e5000", "1")
(False, False, False)

Two paths (:mod:`tirl.answers.compare` decides which):

* **exact** — cleaning (:mod:`~tirl.answers.normalize`: ``$``, nested
  ``\boxed``, ``\text``, spacing, units, degrees, ``%``, ``x =``, Unicode
  minus…) and then exact rational arithmetic for plain numbers and lists of
  them (:mod:`~tirl.answers.exact`), text and choices compared without case;
* **fallback** — everything else (radicals, ``\pi``, expressions, complex
  numbers, symbolic intervals and sets) goes to HuggingFace ``math-verify``
  in a worker process (:mod:`~tirl.answers.fallback`), with its numeric
  tolerance replaced by exact comparison and a hard deadline.

No numeric tolerance on either path. Hostile input (``1e5000``,
``\boxed{1e10000000}``, ``10^{10^{10}}``, a 10,000-digit string, an answer over
1,000 characters) is never parsed: it matches only an identical string, fast.
Neither function raises on any model output; a broken install (no
``math-verify``) raises :class:`~tirl.errors.SetupError` on the first fallback.

:func:`answers_match_async` runs the fallback in a thread, so the event loop
never waits on it; environments call that one. Not covered: natural-language
answers beyond case, spacing and choices; mixed numbers (``2\frac12``);
equivalences sympy cannot prove (they are graded wrong, not right).
"""

from __future__ import annotations

from tirl.answers.compare import Decision, decide
from tirl.answers.exact import parse_number
from tirl.answers.fallback import FallbackPool, default_pool, shutdown_default_pool
from tirl.answers.normalize import clean

__all__ = [
    "Decision",
    "FallbackPool",
    "answers_match",
    "answers_match_async",
    "decide",
    "normalize_answer",
    "parse_number",
    "shutdown_default_pool",
]


def normalize_answer(text: str) -> str:
    """A canonical string of ``text``: the cleaned answer without spaces (a reduced fraction for plain numbers)."""
    cleaned = clean(text)
    number = parse_number(cleaned.key)
    if number is not None:
        return str(number.numerator) if number.denominator == 1 else f"{number.numerator}/{number.denominator}"
    return cleaned.key


def answers_match(predicted: str | None, truth: str | None) -> bool:
    """True when ``predicted`` is a correct answer for ``truth``; ``False`` for ``None`` and for hostile input.

    A JSON number where a string was expected (``"answer": 391``) is read as its text.

    May block up to the fallback's deadline (5 s): inside an event loop use
    :func:`answers_match_async`.
    """
    decision = decide(predicted, truth)
    if decision.verdict is not None:
        return decision.verdict
    return default_pool().check(decision.gold, decision.pred)


async def answers_match_async(predicted: str | None, truth: str | None) -> bool:
    """:func:`answers_match` that runs the math-verify fallback off the event loop's thread."""
    import asyncio  # here: `tirl filter` and the other synchronous callers never pay its import (~70 ms)

    decision = decide(predicted, truth)
    if decision.verdict is not None:
        return decision.verdict
    return await asyncio.to_thread(default_pool().check, decision.gold, decision.pred)
