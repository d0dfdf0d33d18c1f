"""Two evaluations of the same tasks with one or more episodes per task, compared task by task.

:class:`PairedSamples` is what ``tirl compare`` prints: each task's solve share in the first and the second
evaluation (solved episodes over episodes: 0 or 1 for a greedy evaluation, k/K for ``tirl eval --sampled
--samples K``), and

* the change of the mean share (pass@1, the solve rate) with a seeded percentile bootstrap 95% CI over tasks
  (:func:`tirl.ablation_stats.bootstrap_ci`; None below its minimum number of pairs);
* a two-sided p-value of that change: McNemar's exact test when both sides have one episode per task (the
  shares are then 0 or 1, and the test is the sign test of the tasks that changed), Wilcoxon's exact
  signed-rank test of the per-task differences otherwise (zero differences dropped, mid-ranks for ties:
  :func:`tirl.ablation_stats.wilcoxon_signed_rank`);
* with K > 1 episodes per task on both sides and the same K, pass@K ("some episode solves the task") as a
  :class:`~tirl.rollout.evaluation.PairedChange` (McNemar's exact test).

Only tasks both evaluations hold are paired; the others are counted (``only_first``, ``only_second``). Every
task of one evaluation must have the same number of episodes (a task with another count is refused: its share
would weigh differently). Not covered: multiple-comparison correction, per-class breakdowns, unpaired
comparisons of different task sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tirl.ablation_stats import bootstrap_ci, mcnemar_exact, wilcoxon_signed_rank
from tirl.rollout.evaluation import PairedChange, TaskOutcome
from tirl.wording import counted


class UnevenSamples(ValueError):
    """One evaluation holds tasks with different numbers of episodes (the message names one)."""


def solved_counts(outcomes: Sequence[TaskOutcome]) -> tuple[dict[str, int], int]:
    """Each task's number of solved episodes, and the number of episodes every task has.

    Raises :class:`UnevenSamples` when two tasks have different numbers of episodes, and ``ValueError`` when
    there are no episodes.
    """
    if not outcomes:
        raise ValueError("no task results")
    episodes = Counter(o.id for o in outcomes)
    counts = set(episodes.values())
    if len(counts) > 1:
        k = Counter(episodes.values()).most_common(1)[0][0]
        odd = next(i for i, c in sorted(episodes.items()) if c != k)
        raise UnevenSamples(f"task {odd!r} has {counted(episodes[odd], 'episode')} where the others have {k}")
    solved = Counter(o.id for o in outcomes if o.correct)
    return {i: solved[i] for i in episodes}, counts.pop()


@dataclass(frozen=True, slots=True)
class PairedSamples:
    """The task-by-task comparison of two evaluations (see the module doc)."""

    n: int
    samples: tuple[int, int]
    solve_rate: tuple[float, float]
    up: int
    down: int
    change: float
    ci: tuple[float, float] | None
    test: str
    p_value: float
    pass_at_k: PairedChange | None
    only_first: int
    only_second: int

    @classmethod
    def of(cls, first: Sequence[TaskOutcome], second: Sequence[TaskOutcome]) -> PairedSamples:
        """Pair ``first`` and ``second`` by task id; ``ValueError`` when they have no task in common."""
        (a, ka), (b, kb) = solved_counts(first), solved_counts(second)
        ids = sorted(set(a) & set(b))
        if not ids:
            raise ValueError("the two evaluations have no task in common")
        shares = [(a[i] / ka, b[i] / kb) for i in ids]
        diffs = [y - x for x, y in shares]
        up, down = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        if ka == kb == 1:
            test, p_value = "McNemar exact", mcnemar_exact(up, down)
        else:
            test, p_value = "Wilcoxon signed-rank exact", wilcoxon_signed_rank(diffs)
        pass_k = None
        if ka == kb > 1:
            pass_k = PairedChange.of([TaskOutcome(i, a[i] > 0, "", 0) for i in ids],
                                     [TaskOutcome(i, b[i] > 0, "", 0) for i in ids])  # fmt: skip
        return cls(
            n=len(ids), samples=(ka, kb),
            solve_rate=(sum(x for x, _ in shares) / len(ids), sum(y for _, y in shares) / len(ids)),
            up=up, down=down, change=sum(diffs) / len(ids), ci=bootstrap_ci(diffs), test=test, p_value=p_value,
            pass_at_k=pass_k, only_first=len(set(a) - set(b)), only_second=len(set(b) - set(a)),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The JSON record ``tirl compare --json`` prints (rates as fractions, the change in points too)."""
        return {
            "n": self.n,
            "samples": list(self.samples),
            "solve_rate": list(self.solve_rate),
            "change": self.change,
            "change_points": 100 * self.change,
            "ci95": list(self.ci) if self.ci else None,
            "tasks_up": self.up,
            "tasks_down": self.down,
            "test": self.test,
            "p_value": self.p_value,
            "pass_at_k": self.pass_at_k.to_dict() if self.pass_at_k else None,
            "only_first": self.only_first,
            "only_second": self.only_second,
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> PairedSamples:
        """The comparison that :meth:`to_dict` wrote (a run's ``eval/sampled_paired``; ``change_points`` is derived)."""
        ci, pk = row.get("ci95"), row.get("pass_at_k")
        ka, kb = row["samples"]
        ra, rb = row["solve_rate"]
        return cls(
            n=int(row["n"]), samples=(int(ka), int(kb)), solve_rate=(float(ra), float(rb)),
            up=int(row["tasks_up"]), down=int(row["tasks_down"]), change=float(row["change"]),
            ci=(float(ci[0]), float(ci[1])) if ci else None, test=str(row["test"]), p_value=float(row["p_value"]),
            pass_at_k=PairedChange.from_dict(pk) if pk else None,
            only_first=int(row["only_first"]), only_second=int(row["only_second"]),
        )  # fmt: skip

    def lines(self) -> list[str]:
        """The comparison in words, one figure per line."""
        (ka, kb), (ra, rb) = self.samples, self.solve_rate
        name = "solved" if ka == kb == 1 else "solve rate (pass@1)"
        ci = f"95% CI {100 * self.ci[0]:+.1f} to {100 * self.ci[1]:+.1f}" if self.ci else "too few tasks for a CI"
        out = [
            f"paired: {counted(self.n, 'task')} ({ka} vs {kb} {'episode' if ka == kb == 1 else 'episodes'} per task)",
            f"{name}: {ra:.4f} -> {rb:.4f}: {100 * self.change:+.1f} points ({ci}); {counted(self.up, 'task')} up, "
            f"{self.down} down, {self.n - self.up - self.down} equal; {self.test} p = {self.p_value:.3g}",
        ]
        if self.pass_at_k is not None:
            pk = self.pass_at_k
            out.append(f"pass@{ka}: {pk.both + pk.lost} -> {pk.both + pk.gained} of {pk.n}: {pk.line()}")
        if self.only_first or self.only_second:
            first = counted(self.only_first, "task")
            out.append(f"not paired: {first} only in the first, {self.only_second} only in the second")
        return out
