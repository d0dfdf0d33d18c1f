"""The rolling robust baselines (around a step, and of the steps before it) and the level after a step, against
plain reference loops (numpy median/MAD)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tirl.diagnostics.robust import MAD_TO_SD, baseline, early_shift, log_values, median_after


def reference(values, index, window, min_points, abs_floor, rel_floor, count_floor, side="around"):
    around = []
    for j in range(len(values)):
        inside = 0 < index - j <= window if side == "before" else (j != index and abs(j - index) <= window)
        if inside and values[j] is not None:
            around.append(values[j])
    if len(around) < min_points:
        return None
    arr = np.array(around, dtype=float)
    med = float(np.median(arr))
    scale = max(MAD_TO_SD * float(np.median(np.abs(arr - med))), abs_floor, rel_floor * abs(med))
    if count_floor:
        scale = max(scale, math.sqrt(max(abs(med), 1.0)))
    return med, scale


@pytest.mark.parametrize("side", ["around", "before"])
@pytest.mark.parametrize("seed", range(6))
def test_baseline_matches_reference_loop(seed: int, side: str) -> None:
    rng = random.Random(seed)
    values = [None if rng.random() < 0.1 else rng.lognormvariate(0, 0.5) for _ in range(80)]
    window = rng.choice([3, 10, 20])
    floors = {"abs_floor": rng.choice([1e-6, 0.05]), "rel_floor": rng.choice([0.0, 0.02])}
    count = seed % 2 == 0
    for i in range(len(values)):
        got = baseline(values, i, window=window, min_points=5, count_floor=count, side=side, **floors)  # type: ignore[arg-type]
        want = reference(values, i, window, 5, floors["abs_floor"], floors["rel_floor"], count, side)
        if want is None:
            assert got is None
            continue
        assert got is not None
        assert got.median == pytest.approx(want[0], rel=1e-12)
        assert got.scale == pytest.approx(want[1], rel=1e-12)
        if values[i] is not None:
            assert got.z(values[i]) == pytest.approx((values[i] - want[0]) / want[1], rel=1e-9)


def test_step_itself_is_excluded_and_flat_series_has_a_floor() -> None:
    flat = [2.0] * 21
    flat[10] = 2.0000001
    b = baseline(flat, 10, window=10, min_points=5, abs_floor=0.05)
    assert b is not None and b.median == 2.0 and b.scale == 0.05
    assert abs(b.z(flat[10])) < 1e-3  # a rounding difference is not a spike
    spiky = [1.0] * 21
    spiky[10] = 50.0
    b2 = baseline(spiky, 10, window=10, min_points=5, abs_floor=0.05)
    assert b2 is not None and b2.median == 1.0  # the spike does not contaminate its own baseline


def test_log_values_drops_non_positive() -> None:
    assert log_values([1.0, 0.0, None, -2.0, math.e]) == [0.0, None, None, None, 1.0]


def test_the_baseline_before_a_step_sees_a_level_that_jumped_and_stayed() -> None:
    """Blown up from index 9 of 20 on: the centred median is the blown-up level, the steps before are not."""
    values = [1.0 + 0.01 * (j % 3) for j in range(9)] + [1e6] * 11
    around = baseline(values, 9, window=20, min_points=8)
    before = baseline(values, 9, window=20, min_points=8, side="before")
    assert around is not None and around.median == 1e6 and around.z(values[9]) == 0  # the onset looks ordinary
    assert before is not None and before.median == pytest.approx(1.01) and before.z(values[9]) > 1e6
    assert baseline(values, 5, window=20, min_points=8, side="before") is None  # 5 steps before: too few


def reference_after(values, index, window):
    after = [values[j] for j in range(len(values)) if 0 < j - index <= window and values[j] is not None]
    return float(np.median(np.array(after, dtype=float))) if after else None


@pytest.mark.parametrize("seed", range(4))
def test_median_after_matches_reference_loop(seed: int) -> None:
    rng = random.Random(seed)
    values = [None if rng.random() < 0.2 else rng.lognormvariate(0, 1.0) for _ in range(50)]
    window = rng.choice([1, 3, 20])
    for i in range(len(values)):
        want = reference_after(values, i, window)
        got = median_after(values, i, window=window)
        assert got == (None if want is None else pytest.approx(want, rel=1e-12))


def reference_shift(values, index, window, min_points):
    prior = [values[j] for j in range(len(values)) if 0 < index - j <= window and values[j] is not None]
    after = reference_after(values, index, window)
    if values[index] is None or after is None or not prior or len(prior) >= min_points:
        return None
    return float(np.median(np.array(prior, dtype=float))), min(values[index], after), len(prior)


@pytest.mark.parametrize("seed", range(4))
def test_early_shift_matches_reference_loop(seed: int) -> None:
    """The few steps before a step (fewer than min_points: no baseline) against the level from the step on."""
    rng = random.Random(seed)
    values = [None if rng.random() < 0.2 else rng.lognormvariate(0, 1.0) for _ in range(30)]
    for i in range(len(values)):
        want = reference_shift(values, i, 20, 8)
        got = early_shift(values, i, window=20, min_points=8)
        assert (None if got is None else (got.before, got.level, got.points)) == (
            None if want is None else (pytest.approx(want[0], rel=1e-12), want[1], want[2])
        ), i
