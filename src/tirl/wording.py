"""How a count reads in tirl's messages: ``counted(1, "trajectory")`` is ``"1 trajectory"``, not ``"1 trajectories"``.

>>> counted(1, "trajectory"), counted(3, "trajectory"), counted(0, "task"), counted(2, "step")
('1 trajectory', '3 trajectories', '0 tasks', '2 steps')
>>> counted(1, "rewarded trajectory"), counted(2, "void turn")
('1 rewarded trajectory', '2 void turns')

Covered: English nouns that add ``s`` and those ending in a consonant and ``y`` (``trajectory`` ->
``trajectories``; ``day`` -> ``days``); any other plural is given as ``plural``. Not covered: other
languages, and counts written as words.
"""

from __future__ import annotations


def plural_of(noun: str) -> str:
    """``noun``'s plural by the two rules above (the last word of a phrase is the one that changes)."""
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"{n} {noun}"`` with the noun singular for exactly 1 (``plural`` for any other count when given)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or plural_of(noun)}"


__all__ = ["counted", "plural_of"]
