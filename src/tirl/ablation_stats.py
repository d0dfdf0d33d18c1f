"""The statistics of ``tirl ablate`` and of paired evaluations: collapse, Fisher, McNemar, Wilcoxon, bootstrap, AUC.

The collapse rule, Fisher's exact test, Wilcoxon's signed-rank test, a seeded bootstrap CI of a paired
mean difference, and the area under a training-reward curve.

Each is a small pure function over plain floats (no scipy: it is not a dependency of tirl), tested in
``tests/ablation/test_ablation_stats.py`` against brute-force references (every 2x2 table with the same
margins, every sign assignment, every bootstrap resample) and against published values.

* :func:`collapsed` — the collapse rule: mean training reward (``reward/mean``) over the last
  :data:`COLLAPSE_LAST_STEPS` logged steps below :data:`COLLAPSE_REWARD`, **after** an earlier window of as
  many steps averaged at least :data:`COLLAPSE_FROM` (the reward *fell* to the floor). It does not depend on a
  "before" evaluation, and "did not learn" (a reward that starts at the floor and stays there, or never
  moves) is not a collapse. The "fell" clause was added before any test run, after the first dose runs: at
  ``env.ood_rate`` 0.5 the training reward is 0.05 from step 1, and the rule without it called every such
  run collapsed. It reads the state the issue measured as absorbing (every reward 0: no advantage, no update
  ever again). Training reward is chosen over validation accuracy < 0.20 because it is measured on every
  step at no extra cost, over 3 x 64 trajectories instead of a 40-task evaluation (±9–15 points per run),
  and it is not the figure the ablation ranks modes by (the accuracy difference), so the two are not one
  measurement counted twice. A run of :data:`COLLAPSE_LAST_STEPS` steps or fewer has no earlier window and
  cannot collapse.
* :func:`fisher_exact` — two-sided p-value of a 2x2 table (collapses vs not, mode vs ``off``): the sum of
  the hypergeometric probabilities of the tables with the same margins that are no more likely than the
  observed one (scipy's definition, with its 1e-7 relative tolerance).
* :func:`wilcoxon_signed_rank` — two-sided exact p-value of paired differences: zero differences dropped
  (Wilcoxon's method), mid-ranks for ties, the exact null distribution of the positive rank sum by dynamic
  programming over the 2^n equally likely sign assignments (ranks doubled, so mid-ranks stay integers).
* :func:`bootstrap_ci` — percentile bootstrap 95% CI of the mean of paired differences, seeded
  (``random.Random(seed)``), :data:`BOOTSTRAP_RESAMPLES` resamples; None below :data:`MIN_PAIRS_CI`
  pairs, where a percentile bootstrap is far too narrow (with 2 pairs of one sign it "excludes 0").
* :func:`mcnemar_exact` — two-sided exact McNemar p-value of paired binary outcomes (the same tasks
  solved or not before and after training): the binomial test of the discordant pairs at 1/2.
* :func:`reward_auc` — the trapezoidal area under the per-step training reward, divided by the number of
  intervals (a curve that stays at r has area r; one step: its value).

Not covered: multiple-comparison correction across modes (each mode is tested against ``off`` alone and
the p-values are printed as they are), power analysis, and studentised or BCa bootstrap intervals.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence

COLLAPSE_REWARD = 0.05  # mean training reward over the last steps below this is a collapse ...
COLLAPSE_FROM = 0.10  # ... when an earlier window of as many steps averaged at least this (the reward fell)
COLLAPSE_LAST_STEPS = 3
COLLAPSE_RULE = (
    f"mean training reward (reward/mean) over the last {COLLAPSE_LAST_STEPS} steps < {COLLAPSE_REWARD:g}"
    f" after an earlier {COLLAPSE_LAST_STEPS}-step mean >= {COLLAPSE_FROM:g}"
)
BOOTSTRAP_RESAMPLES = 10_000
MIN_PAIRS_CI = 5  # fewer pairs: no CI (a percentile bootstrap of 2-4 pairs is far too narrow)
_REL_TOL = 1 + 1e-7  # tables this close to the observed probability count as "as extreme" (scipy's choice)


def collapsed(rewards: Sequence[float | None]) -> bool:
    """The collapse rule (module docstring): the reward fell from >= 0.10 to a last-3-step mean < 0.05.

    ``None`` entries (a step that logged no reward) are skipped. The earlier windows are every run of
    :data:`COLLAPSE_LAST_STEPS` known rewards that ends before the last window starts; a run with no
    earlier window (3 known rewards or fewer) or no reward at all is not a collapse.
    """
    known = [float(r) for r in rewards if r is not None and math.isfinite(float(r))]
    n = COLLAPSE_LAST_STEPS
    if len(known) <= n or statistics.fmean(known[-n:]) >= COLLAPSE_REWARD:
        return False
    earlier = known[:-n]
    width = min(n, len(earlier))
    peak = max(statistics.fmean(earlier[i : i + width]) for i in range(len(earlier) - width + 1))
    return peak >= COLLAPSE_FROM


def fisher_exact(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided p-value: ``a`` of ``n1`` runs vs ``b`` of ``n2`` runs (e.g. collapses under a mode vs ``off``).

    >>> round(fisher_exact(0, 3, 3, 3), 4), round(fisher_exact(0, 3, 2, 3), 4)
    (0.1, 0.4)
    """
    if not (0 <= a <= n1 and 0 <= b <= n2):
        raise ValueError(f"counts out of range: {a} of {n1}, {b} of {n2}")
    total, k = n1 + n2, a + b
    denom = math.comb(total, k)

    def prob(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / denom

    observed = prob(a)
    lo, hi = max(0, k - n2), min(k, n1)
    p = sum(prob(x) for x in range(lo, hi + 1) if prob(x) <= observed * _REL_TOL)
    return min(1.0, p)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of paired binary outcomes: ``b`` pairs changed one way, ``c`` the other.

    Under the null a discordant pair goes either way with probability 1/2, so the p-value is the two-sided
    binomial test of ``b`` in ``b + c`` at 1/2 (twice the smaller tail, at most 1); no discordant pair: 1.

    >>> round(mcnemar_exact(0, 6), 4), round(mcnemar_exact(3, 3), 4), mcnemar_exact(0, 0)
    (0.0312, 1.0, 1.0)
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b} and {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values``, tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_signed_rank(diffs: Sequence[float]) -> float:
    """Two-sided exact p-value of the Wilcoxon signed-rank test of paired ``diffs`` (1.0 when all are zero).

    >>> wilcoxon_signed_rank([0.1, 0.2, 0.3, 0.4, 0.5])  # every sign positive: 2 / 2**5
    0.0625
    """
    nonzero = [float(d) for d in diffs if d != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    doubled = [round(2 * r) for r in _midranks([abs(d) for d in nonzero])]
    w_plus = sum(r for r, d in zip(doubled, nonzero, strict=True) if d > 0)
    counts = [0] * (sum(doubled) + 1)  # counts[w]: sign assignments whose positive (doubled) rank sum is w
    counts[0] = 1
    for r in doubled:
        for w in range(len(counts) - 1, r - 1, -1):
            counts[w] += counts[w - r]
    total = 2**n
    lower = sum(counts[: w_plus + 1]) / total
    upper = sum(counts[w_plus:]) / total
    return min(1.0, 2 * min(lower, upper))


def bootstrap_ci(
    diffs: Sequence[float], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of ``mean(diffs)``; None with fewer than :data:`MIN_PAIRS_CI` pairs."""
    values = [float(d) for d in diffs]
    n = len(values)
    if n < MIN_PAIRS_CI:
        return None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    lo = means[math.floor(tail * resamples)]
    hi = means[max(math.ceil((1 - tail) * resamples) - 1, 0)]
    return lo, hi


def reward_auc(rewards: Sequence[float | None]) -> float:
    """Trapezoidal area under the known per-step rewards over the number of intervals (0.0 when none)."""
    known = [float(r) for r in rewards if r is not None and math.isfinite(float(r))]
    if len(known) <= 1:
        return known[0] if known else 0.0
    area = sum((a + b) / 2 for a, b in itertools.pairwise(known))
    return area / (len(known) - 1)


def excludes_zero(ci: tuple[float, float] | None) -> bool:
    """Whether a CI lies wholly above or wholly below 0 (None: no CI, so no)."""
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "COLLAPSE_LAST_STEPS",
    "COLLAPSE_REWARD",
    "COLLAPSE_RULE",
    "MIN_PAIRS_CI",
    "bootstrap_ci",
    "collapsed",
    "excludes_zero",
    "fisher_exact",
    "mcnemar_exact",
    "reward_auc",
    "wilcoxon_signed_rank",
]
