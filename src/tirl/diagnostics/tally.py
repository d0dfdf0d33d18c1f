"""Counts per key with the first few example trajectory ids of each: the rows of ``tirl audit``'s tables.

Used by :mod:`tirl.diagnostics.audit` (void reasons, tool errors) and :mod:`tirl.diagnostics.verdicts`
(reward checks, signs of tampering). An id is kept once per key, at most :data:`EXAMPLES` per key.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

EXAMPLES = 5


@dataclass(slots=True)
class Tally:
    """Counts per key, with the first few example ids of each."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, key: str, traj_id: str) -> None:
        """Count ``traj_id`` under ``key`` (kept as an example while fewer than :data:`EXAMPLES` are)."""
        self.counts[key] += 1
        ids = self.examples[key]
        if len(ids) < EXAMPLES and traj_id not in ids:
            ids.append(traj_id)

    def entry(self, key: str, count_name: str = "count") -> dict[str, Any]:
        """``{count_name: n, "examples": [...]}`` for ``key`` (zero and empty when never added)."""
        return {count_name: self.counts[key], "examples": list(self.examples.get(key, ()))}

    def table(self, order: tuple[str, ...], count_name: str) -> dict[str, Any]:
        """:meth:`entry` of each key of ``order`` that was added, in that order."""
        return {k: self.entry(k, count_name) for k in order if self.counts[k]}


__all__ = ["EXAMPLES", "Tally"]
