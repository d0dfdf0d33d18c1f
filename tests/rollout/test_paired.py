"""PairedSamples against plain loops: per-task shares, the change, the test chosen, pass@K, unpaired counts.

The statistics themselves (McNemar, Wilcoxon, bootstrap) are tested against brute force in
tests/ablation/test_ablation_stats.py; here a reference written out by hand checks what is fed to them.
"""

from __future__ import annotations

import random

import pytest

from tirl.ablation_stats import bootstrap_ci, mcnemar_exact, wilcoxon_signed_rank
from tirl.rollout.evaluation import TaskOutcome
from tirl.rollout.paired import PairedSamples, UnevenSamples, solved_counts


def _rows(solved: dict[str, int], k: int) -> list[TaskOutcome]:
    """``k`` episodes per task, the first ``solved[task]`` of them correct, shuffled."""
    rows = [TaskOutcome(t, j < s, "submitted", 3) for t, s in solved.items() for j in range(k)]
    random.Random(len(rows)).shuffle(rows)
    return rows


def _reference(a: dict[str, int], ka: int, b: dict[str, int], kb: int) -> dict[str, object]:
    ids = [t for t in sorted(a) if t in b]
    diffs = []
    for t in ids:
        diffs.append(b[t] / kb - a[t] / ka)
    up = len([d for d in diffs if d > 0])
    down = len([d for d in diffs if d < 0])
    rate_a = sum(a[t] for t in ids) / (ka * len(ids))
    rate_b = sum(b[t] for t in ids) / (kb * len(ids))
    return {"ids": ids, "diffs": diffs, "up": up, "down": down, "rates": (rate_a, rate_b)}


@pytest.mark.parametrize("seed", range(6))
def test_sampled_comparison_matches_a_plain_loop(seed: int) -> None:
    rng = random.Random(seed)
    k = rng.choice([2, 4, 8])
    tasks = [f"t{i}" for i in range(rng.randint(12, 40))]
    a = {t: rng.randint(0, k) * rng.randint(0, 1) for t in tasks}
    b = {t: rng.randint(0, k) * rng.randint(0, 1) for t in tasks[2:]} | {"extra": 1}  # two unpaired, one extra
    got = PairedSamples.of(_rows(a, k), _rows(b, k))
    ref = _reference(a, k, b, k)
    assert got.n == len(ref["ids"]) and (got.only_first, got.only_second) == (2, 1)
    assert got.solve_rate == pytest.approx(ref["rates"])
    assert got.change == pytest.approx(ref["rates"][1] - ref["rates"][0])
    assert (got.up, got.down) == (ref["up"], ref["down"])
    assert got.test.startswith("Wilcoxon") and got.p_value == pytest.approx(wilcoxon_signed_rank(ref["diffs"]))
    assert got.ci == bootstrap_ci(ref["diffs"])
    assert got.pass_at_k is not None
    gained = sum(1 for t in ref["ids"] if b[t] and not a[t])
    lost = sum(1 for t in ref["ids"] if a[t] and not b[t])
    assert (got.pass_at_k.gained, got.pass_at_k.lost) == (gained, lost)
    assert got.pass_at_k.p_value == mcnemar_exact(gained, lost)


def test_one_episode_per_task_is_mcnemar_on_the_tasks_that_changed() -> None:
    a = {"a": 1, "b": 0, "c": 0, "d": 1, "e": 0, "f": 0}
    b = {"a": 0, "b": 1, "c": 1, "d": 1, "e": 1, "f": 0}
    got = PairedSamples.of(_rows(a, 1), _rows(b, 1))
    assert (got.up, got.down) == (3, 1) and got.test == "McNemar exact"
    assert got.p_value == mcnemar_exact(3, 1) and got.pass_at_k is None
    assert got.solve_rate == (2 / 6, 4 / 6) and got.change == pytest.approx(2 / 6)


def test_different_episode_counts_compare_shares_without_pass_at_k() -> None:
    got = PairedSamples.of(_rows({"a": 1, "b": 0}, 1), _rows({"a": 2, "b": 6}, 8))
    assert got.samples == (1, 8) and got.pass_at_k is None and got.test.startswith("Wilcoxon")
    assert got.solve_rate == pytest.approx((0.5, 0.5)) and (got.up, got.down) == (1, 1)
    assert any("1 vs 8 episodes" in line for line in got.lines())


def test_a_task_with_another_episode_count_is_refused_by_name() -> None:
    rows = [*_rows({"a": 1, "b": 2, "c": 0}, 4), TaskOutcome("c", False, "x", 1)]
    with pytest.raises(UnevenSamples, match="task 'c' has 5 episodes where the others have 4"):
        solved_counts(rows)


def test_no_task_in_common_is_refused() -> None:
    with pytest.raises(ValueError, match="no task in common"):
        PairedSamples.of(_rows({"a": 1}, 1), _rows({"b": 1}, 1))


def test_lines_state_the_figures() -> None:
    got = PairedSamples.of(_rows({f"t{i}": i % 3 for i in range(20)}, 4), _rows({f"t{i}": 4 for i in range(20)}, 4))
    text = "\n".join(got.lines())
    assert "paired: 20 tasks (4 vs 4 episodes per task)" in text
    assert f"{got.solve_rate[0]:.4f} -> 1.0000" in text and "20 tasks up, 0 down, 0 equal" in text
    assert "pass@4: 13 -> 20 of 20" in text
