"""The ablation's statistics against brute-force references and published values (no mocks, all < 1 s)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from tirl.ablation_stats import (
    MIN_PAIRS_CI,
    bootstrap_ci,
    collapsed,
    excludes_zero,
    fisher_exact,
    mcnemar_exact,
    reward_auc,
    wilcoxon_signed_rank,
)


def _fisher_by_enumeration(a: int, n1: int, b: int, n2: int) -> float:
    """Every way to place the a+b events among n1+n2 labelled runs; p = share of tables no likelier than seen."""
    k = a + b
    counts: dict[int, int] = {}
    for chosen in itertools.combinations(range(n1 + n2), k):
        x = sum(1 for i in chosen if i < n1)
        counts[x] = counts.get(x, 0) + 1
    total = sum(counts.values())
    seen = counts[a]
    return sum(c for c in counts.values() if c <= seen * (1 + 1e-7)) / total


def _wilcoxon_by_enumeration(diffs: list[float]) -> float:
    """Every sign assignment of the |d| ranks (mid-ranks for ties); two-sided p from the two tails."""
    nz = [d for d in diffs if d != 0]
    if not nz:
        return 1.0
    mags = [abs(d) for d in nz]
    ranks = [sum(1 for m in mags if m < v) + (sum(1 for m in mags if m == v) + 1) / 2 for v in mags]
    w = sum(r for r, d in zip(ranks, nz, strict=True) if d > 0)
    sums = [
        sum(r for r, s in zip(ranks, signs, strict=True) if s) for signs in itertools.product((0, 1), repeat=len(nz))
    ]
    lower = sum(1 for s in sums if s <= w + 1e-9) / len(sums)
    upper = sum(1 for s in sums if s >= w - 1e-9) / len(sums)
    return min(1.0, 2 * min(lower, upper))


def _mcnemar_by_enumeration(b: int, c: int) -> float:
    """Every way the b+c discordant pairs could have gone (each 1/2): share as far from even as the one seen."""
    n = b + c
    seen = abs(b - n / 2)
    outcomes = list(itertools.product((0, 1), repeat=n))
    return sum(1 for o in outcomes if abs(sum(o) - n / 2) >= seen - 1e-9) / len(outcomes)


def test_mcnemar_matches_enumeration_and_published_values() -> None:
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)  # 2 / 2^6
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)  # 2 (1 + 10) / 2^10
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(4, 4) == 1.0
    for b in range(9):
        for c in range(9):
            assert mcnemar_exact(b, c) == pytest.approx(_mcnemar_by_enumeration(b, c), abs=1e-12), (b, c)
            assert mcnemar_exact(b, c) == mcnemar_exact(c, b)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_fisher_matches_enumeration_and_the_issue_figures() -> None:
    assert fisher_exact(0, 3, 3, 3) == pytest.approx(0.1)  # the issue: 0/3 vs 3/3
    assert fisher_exact(0, 3, 2, 3) == pytest.approx(0.4)  # 0/3 vs 2/3
    assert fisher_exact(2, 10, 8, 10) == pytest.approx(0.023014, abs=1e-6)  # 0.2 vs 0.8 at 10 seeds
    for n1, n2 in ((3, 3), (4, 6), (5, 5)):
        for a in range(n1 + 1):
            for b in range(n2 + 1):
                assert fisher_exact(a, n1, b, n2) == pytest.approx(_fisher_by_enumeration(a, n1, b, n2), abs=1e-12)
    with pytest.raises(ValueError):
        fisher_exact(4, 3, 0, 3)


def test_wilcoxon_matches_enumeration_and_a_published_value() -> None:
    # scipy.stats.wilcoxon's documented example (Cushny & Peebles style differences): p = 0.041259765625
    d = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]
    assert wilcoxon_signed_rank(d) == pytest.approx(0.041259765625, abs=1e-12)
    assert wilcoxon_signed_rank([0.1, 0.2, 0.3, 0.4, 0.5]) == pytest.approx(2 / 32)
    assert wilcoxon_signed_rank([0.0, 0.0]) == 1.0
    rng = random.Random(3)
    for n in range(1, 10):
        for _ in range(5):
            diffs = [rng.choice([-2, -1, -0.5, 0, 0.5, 1, 1, 2, 3]) for _ in range(n)]  # ties and zeros
            assert wilcoxon_signed_rank(diffs) == pytest.approx(_wilcoxon_by_enumeration(diffs), abs=1e-12), diffs


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution() -> None:
    """n = 5: all 5**5 resamples enumerated give the exact percentiles; the seeded Monte Carlo lands on them."""
    diffs = [-0.1, 0.05, 0.2, 0.3, 0.6]
    means = sorted(statistics.fmean(s) for s in itertools.product(diffs, repeat=5))
    exact_lo = means[math.floor(0.025 * len(means))]
    exact_hi = means[math.ceil(0.975 * len(means)) - 1]
    ci = bootstrap_ci(diffs, seed=0)
    assert ci is not None
    # resample means lie on a 0.01 grid; the Monte Carlo percentiles may sit one or two atoms off
    assert ci[0] == pytest.approx(exact_lo, abs=0.02) and ci[1] == pytest.approx(exact_hi, abs=0.02), ci
    assert bootstrap_ci(diffs, seed=0) == ci  # seeded: reproducible
    assert bootstrap_ci([0.25] * 6) == (0.25, 0.25)
    assert bootstrap_ci([0.1] * (MIN_PAIRS_CI - 1)) is None  # too few pairs: no CI, so no ranking
    assert excludes_zero(ci) and not excludes_zero((-0.1, 0.2)) and not excludes_zero(None)
    assert excludes_zero((-0.3, -0.01))


def collapsed_reference(rewards: list[float | None]) -> bool:
    """The rule spelled out: drop None; the last 3 average < 0.05; some earlier 3-step run averaged >= 0.10."""
    known = [r for r in rewards if r is not None]
    if len(known) <= 3:
        return False
    last = known[-3:]
    if sum(last) / 3 >= 0.05:
        return False
    earlier = known[:-3]
    w = min(3, len(earlier))
    best = 0.0
    for i in range(len(earlier) - w + 1):
        best = max(best, sum(earlier[i : i + w]) / w)
    return best >= 0.10


def test_collapse_rule_needs_a_fall_to_the_floor() -> None:
    assert collapsed([0.4, 0.5, 0.04, 0.05, 0.05])  # fell from 0.45 to 0.0467
    assert not collapsed([0.0, 0.0, 0.0, 0.1, 0.05, 0.01])  # mean 0.0533: not at the floor
    assert not collapsed([0.3, 0.3, 0.3])  # reward that never moved is not a collapse
    assert not collapsed([0.0])  # one step: no earlier window, no fall
    assert collapsed([0.5, None, 0.0, 0.0, None, 0.1]) is True  # None skipped: 0.5, then mean of 0, 0, 0.1 = 0.033
    assert not collapsed([])
    # the first dose runs (ood_rate 0.25 / 0.5, 8 steps): the first fell, the second started at the floor
    assert collapsed([0.125, 0.203, 0.109, 0.156, 0.156, 0.016, 0.016, 0.000])
    assert not collapsed([0.047, 0.062, 0.000, 0.031, 0.016, 0.000, 0.016, 0.000])  # did not learn: no collapse
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randrange(0, 10)
        xs: list[float | None] = [
            None if rng.random() < 0.1 else rng.choice([0.0, 0.03, 0.06, 0.1, 0.12, 0.5]) for _ in range(n)
        ]
        assert collapsed(xs) == collapsed_reference(xs), xs


def test_reward_auc_is_the_normalised_trapezoid() -> None:
    assert reward_auc([0.2, 0.2, 0.2]) == pytest.approx(0.2)
    assert reward_auc([0.0, 1.0]) == pytest.approx(0.5)
    assert reward_auc([0.0, 0.5, 1.0, None, 1.0]) == pytest.approx((0.25 + 0.75 + 1.0) / 3)
    assert reward_auc([0.7]) == 0.7 and reward_auc([]) == 0.0
