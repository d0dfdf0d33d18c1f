"""Robust rolling baselines: how unusual one step is, compared with the steps around it.

A step is compared with the median of the known values within ``window``
steps on each side (the step itself excluded, so a spike cannot hide in its
own baseline), scaled by the median absolute deviation (``1.4826 * MAD``,
which equals the standard deviation for Gaussian noise). The scale has a
floor (absolute and relative to the median) so that a perfectly flat series
does not turn a rounding difference into an infinite z-score.

>>> b = baseline([1.0, 1.1, 0.9, 1.0, 5.0, 1.05, 0.95], 4, window=3, min_points=3)
>>> round(b.median, 3), b.z(5.0) > 10
(1.0, True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

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
) -> Baseline | None:
    """The baseline of ``values[index]`` from its neighbours; ``None`` with fewer than ``min_points``.

    ``count_floor`` adds a Poisson floor ``sqrt(max(median, 1))`` to the scale, for event counts
    whose MAD is coarse (a median of 2 void trajectories has a MAD of 1 or 0).
    """
    lo, hi = max(0, index - window), min(len(values), index + window + 1)
    around = [v for j in range(lo, hi) if j != index and (v := values[j]) is not None]
    if len(around) < min_points:
        return None
    med = statistics.median(around)
    mad = statistics.median(abs(v - med) for v in around)
    scale = max(MAD_TO_SD * mad, abs_floor, rel_floor * abs(med))
    if count_floor:
        scale = max(scale, math.sqrt(max(abs(med), 1.0)))
    return Baseline(median=med, scale=scale, points=len(around))


def log_values(values: Sequence[float | None]) -> list[float | None]:
    """Natural log of the positive values (ratios are compared on a log scale); others become ``None``."""
    return [math.log(v) if v is not None and v > 0 else None for v in values]
