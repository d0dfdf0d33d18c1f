"""pass@k: the chance that at least one of k sampled episodes of a task solves it, from n ≥ k samples.

RL with group-relative advantages only reinforces what its samples already do: a task that no sample solves
pays nothing, so pass@k at the training sampling is the ceiling that sharpening the policy can lift its
greedy solve rate towards (with k about the samples a run draws of a task). ``tirl eval --sampled
--samples K`` measures it.

:func:`pass_at_k` is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on
Code"): for a task with ``c`` correct of ``n`` samples, ``1 - C(n - c, k) / C(n, k)``, computed as a product
so that large ``n`` neither overflows nor loses precision. :class:`PassAtK` averages it over tasks.

Covered: the estimator, per-task success counts, the mean over tasks for each k ≤ n. Not covered: confidence
intervals (the tasks are the unit of variation; report n tasks with the figure), and samples that differ in
number between tasks (refused: every task needs the same n).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``c`` correct of ``n`` samples (``1 <= k <= n``, ``0 <= c <= n``).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(4, 0, 2)
    (0.25, 1.0, 0.0)
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n={n}, got {k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be between 0 and n={n}, got {c}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    miss = 1.0  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def report_ks(samples: int) -> list[int]:
    """The k reported for ``samples`` per task: the powers of two below it, and ``samples`` itself.

    >>> report_ks(8), report_ks(6), report_ks(1)
    ([1, 2, 4, 8], [1, 2, 4, 6], [1])
    """
    ks = [1]
    while ks[-1] * 2 < samples:
        ks.append(ks[-1] * 2)
    return ks if ks[-1] == samples else [*ks, samples]


@dataclass(frozen=True, slots=True)
class PassAtK:
    """Sampled solve counts per task (``solved``: task id → correct episodes of ``samples``)."""

    samples: int
    solved: dict[str, int]

    @classmethod
    def of(cls, outcomes: Sequence[tuple[str, bool]], samples: int) -> PassAtK:
        """Count the correct episodes per task; each task must have ``samples``.

        ``outcomes``: ``(task id, correct)`` per episode, from an evaluation's ``EvalReport.outcomes()``.
        """
        per_task = Counter(tid for tid, _ in outcomes)
        uneven = sorted(tid for tid, m in per_task.items() if m != samples)
        if uneven:
            raise ValueError(f"tasks without exactly {samples} episodes: {', '.join(uneven[:5])}")
        correct = Counter(tid for tid, ok in outcomes if ok)
        return cls(samples=samples, solved={tid: correct[tid] for tid in sorted(per_task)})

    def at(self, k: int) -> float:
        """Mean pass@k over the tasks (0 when there are none)."""
        if not self.solved:
            return 0.0
        return sum(pass_at_k(self.samples, c, k) for c in self.solved.values()) / len(self.solved)

    @property
    def ever_solved(self) -> int:
        """Tasks that at least one sample solved."""
        return sum(1 for c in self.solved.values() if c > 0)

    def line(self) -> str:
        """``pass@1 0.031, pass@2 0.058, ... (T of N tasks solved by a sample)``."""
        figures = ", ".join(f"pass@{k} {self.at(k):.3f}" for k in report_ks(self.samples))
        return f"{figures} ({self.ever_solved} of {len(self.solved)} tasks solved by at least one sample)"

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: ``samples``, ``pass_at`` (k → mean pass@k, keys as strings), ``solved``."""
        return {
            "samples": self.samples,
            "pass_at": {str(k): self.at(k) for k in report_ks(self.samples)},
            "ever_solved": self.ever_solved,
            "solved": dict(self.solved),
        }


__all__ = ["PassAtK", "pass_at_k", "report_ks"]
