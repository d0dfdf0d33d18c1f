"""pass@k against a plain reference (every k-subset of the samples enumerated) and its per-task report."""

from __future__ import annotations

import itertools
import random

import pytest

from tirl.rollout.evaluation import EvalReport
from tirl.rollout.pass_at_k import PassAtK, pass_at_k, report_ks
from tirl.types import Trajectory


def _reference(n: int, c: int, k: int) -> float:
    """The share of k-subsets of n samples (c of them correct) that hold a correct one, by enumeration."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(1 for s in subsets if any(samples[i] for i in s)) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_estimator_matches_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_reference(n, c, k), abs=1e-12), (n, c, k)


def test_estimator_large_n_stays_in_range() -> None:
    """A product, not factorials: n = 10,000 neither overflows nor leaves [0, 1]; pass@1 is c/n."""
    for c in (0, 1, 37, 9_999, 10_000):
        for k in (1, 2, 100, 10_000):
            p = pass_at_k(10_000, c, k)
            assert 0.0 <= p <= 1.0
        assert pass_at_k(10_000, c, 1) == pytest.approx(c / 10_000)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 0), (4, 1, 5), (4, 5, 1), (4, -1, 1)])
def test_estimator_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_report_ks() -> None:
    assert report_ks(1) == [1]
    assert report_ks(2) == [1, 2]
    assert report_ks(8) == [1, 2, 4, 8]
    assert report_ks(12) == [1, 2, 4, 8, 12]


def _traj(task: str, j: int, correct: bool | None) -> Trajectory:
    return Trajectory(id=f"s0-{task}-g{j}", messages=[], group=task, correct=correct)


def _outcomes(trajs: list[Trajectory]) -> list[tuple[str, bool]]:
    """What an evaluation hands PassAtK: each episode's task (the trajectory's group) and verdict."""
    return [(o.id, o.correct) for o in EvalReport.of(trajs, 0.0).outcomes()]


def test_pass_at_k_of_trajectories_against_reference() -> None:
    """Random outcomes for 20 tasks x 6 samples: counts per task and the mean of the reference per k."""
    r = random.Random(3)
    outcomes = {f"t{i}": [r.random() < 0.3 for _ in range(6)] for i in range(20)}
    trajs = [
        _traj(t, j, ok if j % 2 else (True if ok else None)) for t, oks in outcomes.items() for j, ok in enumerate(oks)
    ]  # fmt: skip  (None: a failed episode, counted as wrong)
    r.shuffle(trajs)
    rep = PassAtK.of(_outcomes(trajs), 6)
    assert rep.solved == {t: sum(oks) for t, oks in sorted(outcomes.items())}
    for k in range(1, 7):
        want = sum(_reference(6, sum(oks), k) for oks in outcomes.values()) / 20
        assert rep.at(k) == pytest.approx(want)
    assert rep.ever_solved == sum(1 for oks in outcomes.values() if any(oks))
    row = rep.to_dict()
    assert set(row["pass_at"]) == {"1", "2", "4", "6"} and row["pass_at"]["6"] == pytest.approx(rep.at(6))
    assert f"pass@6 {rep.at(6):.3f}" in rep.line() and f"{rep.ever_solved} of 20 tasks" in rep.line()


def test_uneven_samples_are_refused() -> None:
    trajs = [_traj("a", 0, True), _traj("a", 1, False), _traj("b", 0, False)]
    with pytest.raises(ValueError, match="b"):
        PassAtK.of(_outcomes(trajs), 2)


def test_no_tasks() -> None:
    assert PassAtK.of([], 4).at(2) == 0.0
