"""Robust rolling baselines: how unusual one step is, compared with the steps around it or before it.

A step is compared with the median of the known values within ``window``
steps on each side (``side="around"``; the step itself excluded, so a spike
cannot hide in its own baseline), or within the ``window`` steps before it
only (``side="before"``), scaled by the median absolute deviation
(``1.4826 * MAD``, which equals the standard deviation for Gaussian noise).
The scale has a floor (absolute and relative to the median) so that a
perfectly flat series does not turn a rounding difference into an infinite
z-score.

Why two sides: a level that jumps and stays up (an IS ratio that blows up to
``Infinity`` at step 10 of 20 and stays there) fills more than half of the
centred window from its onset on, so the centred median *is* the blown-up
level and the onset looks ordinary; against the steps before it, the onset
is as unusual as it is. The steps before are fewer, so their baseline is
noisier: the rules use it only for a level shift, when :func:`median_after`
(the level of the steps after) is as unusual as the step itself
(:mod:`tirl.diagnostics.training`). A jump in the first ``min_points``
steps has too few steps before it for a baseline (no MAD, no z-score):
:func:`early_shift` gives the level of the few steps before and the level
from the step on, for a rule on the size of the jump alone.

>>> b = baseline([1.0, 1.1, 0.9, 1.0, 5.0, 1.05, 0.95], 4, window=3, min_points=3)
>>> round(b.median, 3), b.z(5.0) > 10
(1.0, True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Side = Literal["around", "before"]
MAD_TO_SD = 1.4826


@dataclass(frozen=True, slots=True)
class Baseline:
    """Median and robust scale of the neighbourhood of one step."""

    median: float
    scale: float
    points: int

    def z(self, value: float) -> float:
        """Robust z-score of ``value`` against this baseline."""
        return (value - self.median) / self.scale


def baseline(
    values: Sequence[float | None],
    index: int,
    *,
    window: int = 20,
    min_points: int = 8,
    abs_floor: float = 1e-6,
    rel_floor: float = 0.0,
    count_floor: bool = False,
    side: Side = "around",
) -> Baseline | None:
    """The baseline of ``values[index]`` from its neighbours; ``None`` with fewer than ``min_points``.

    ``side``: ``"around"`` takes the known values within ``window`` steps on each side, ``"before"`` those
    within the ``window`` steps before ``index`` only. ``count_floor`` adds a Poisson floor
    ``sqrt(max(median, 1))`` to the scale, for event counts whose MAD is coarse (a median of 2 void
    trajectories has a MAD of 1 or 0).
    """
    lo = max(0, index - window)
    hi = index if side == "before" else min(len(values), index + window + 1)
    around = [v for j in range(lo, hi) if j != index and (v := values[j]) is not None]
    if len(around) < min_points:
        return None
    med = statistics.median(around)
    mad = statistics.median(abs(v - med) for v in around)
    scale = max(MAD_TO_SD * mad, abs_floor, rel_floor * abs(med))
    if count_floor:
        scale = max(scale, math.sqrt(max(abs(med), 1.0)))
    return Baseline(median=med, scale=scale, points=len(around))


@dataclass(frozen=True, slots=True)
class Shift:
    """A level shift at ``index`` seen against the few known values before it (too few for a baseline)."""

    index: int
    before: float  # the median of the known values before ``index`` (within the window)
    level: float  # the lower of the value at ``index`` and the median of the known values after it
    points: int  # how many known values before ``index``

    def clears(self, floor: float, rise: float) -> bool:
        """Whether the shifted level is at least ``floor`` and at least ``rise`` above the level before."""
        return self.level >= floor and self.level - self.before >= rise


def early_shift(values: Sequence[float | None], index: int, *, window: int = 20, min_points: int = 8) -> Shift | None:
    """The shift at ``index`` against the steps before it, where they are too few for :func:`baseline`.

    ``None`` where ``index`` has no value, no known value before or after it, or ``min_points`` or more
    before it (then :func:`baseline` with ``side="before"`` applies).

    >>> s = early_shift([1.0, 1.2, 40.0, 41.0, 39.0], 2, min_points=8)
    >>> s.before, s.level, s.points
    (1.1, 40.0, 2)
    """
    value = values[index]
    prior = [v for v in values[max(0, index - window) : index] if v is not None]
    after = median_after(values, index, window=window)
    if value is None or after is None or not prior or len(prior) >= min_points:
        return None
    return Shift(index=index, before=statistics.median(prior), level=min(value, after), points=len(prior))


def median_after(values: Sequence[float | None], index: int, *, window: int = 20) -> float | None:
    """The median of the known values within ``window`` steps after ``index`` (``None`` when there are none)."""
    after = [v for v in values[index + 1 : index + window + 1] if v is not None]
    return statistics.median(after) if after else None


def log_values(values: Sequence[float | None]) -> list[float | None]:
    """Natural log of the positive values (ratios are compared on a log scale); others become ``None``."""
    return [math.log(v) if v is not None and v > 0 else None for v in values]
