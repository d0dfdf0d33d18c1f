"""The rolling robust baseline against a plain reference loop (numpy median/MAD)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tirl.diagnostics.robust import MAD_TO_SD, baseline, log_values


def reference(values, index, window, min_points, abs_floor, rel_floor, count_floor):
    around = []
    for j in range(len(values)):
        if j != index and abs(j - index) <= window and values[j] is not None:
            around.append(values[j])
    if len(around) < min_points:
        return None
    arr = np.array(around, dtype=float)
    med = float(np.median(arr))
    scale = max(MAD_TO_SD * float(np.median(np.abs(arr - med))), abs_floor, rel_floor * abs(med))
    if count_floor:
        scale = max(scale, math.sqrt(max(abs(med), 1.0)))
    return med, scale


@pytest.mark.parametrize("seed", range(6))
def test_baseline_matches_reference_loop(seed: int) -> None:
    rng = random.Random(seed)
    values = [None if rng.random() < 0.1 else rng.lognormvariate(0, 0.5) for _ in range(80)]
    window = rng.choice([3, 10, 20])
    floors = {"abs_floor": rng.choice([1e-6, 0.05]), "rel_floor": rng.choice([0.0, 0.02])}
    count = seed % 2 == 0
    for i in range(len(values)):
        got = baseline(values, i, window=window, min_points=5, count_floor=count, **floors)
        want = reference(values, i, window, 5, floors["abs_floor"], floors["rel_floor"], count)
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
