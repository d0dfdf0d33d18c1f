"""Void drift: a sustained rise of the void share over many steps, and the step where it began.

Measured on tirl's own job (``DESIGN.md``): under ``filter.mode=drop`` a void
trajectory carries no gradient, so nothing pushes void-producing tokens down
and the share of void trajectories can random-walk up and stay there until the
run collapses. That is neither a filter placed too late (``late_filter``) nor
a void turn that slipped into the loss (``void_leak``); it is its own verdict,
``void_drift``.

The test, on the per-step void share ``s`` (void / all judged trajectories;
steps without a value are skipped):

1. ``w = clamp(n // 4, min_window, max_window)`` known steps form a window.
2. The **late level** ``L`` is the mean of the last ``w`` values; the
   **baseline** ``E`` is the lowest mean of any ``w`` consecutive values
   before the late window (so a share that first falls while the model learns
   and then climbs back counts from its low point).
3. It is a drift when the rise ``L - E`` is at least ``min_rise`` (share
   points) and at least ``rise_z`` noise units (the per-step noise is
   estimated from the step-to-step changes, the largest tenth left out, so a
   trend or a jump does not inflate it, with a binomial floor when trajectory
   counts are known). A steady climb from the first step is also tested as a
   least-squares trend (its slope ``trend_z`` standard errors above 0, its
   fitted start as ``E``), which uses every step instead of two windows.
   Either way the rise must be *sustained*: at least ``sustained_frac`` of
   the late values lie above the midpoint ``E + (L - E) / 2``. A one-step
   jump, a burst that goes away, or a share that moves around and ends lower
   (17 % falling to 8 %) is not a drift.
4. The **onset** is the step after the last one, between the baseline and the
   late window, whose 3-step running median was still near the baseline:
   within a quarter of the rise, or within ``onset_noise`` per-step noise
   units when that is closer (a slow creep before a sudden collapse starts
   the drift, not the collapse).

The named numbers are fields of :class:`~tirl.diagnostics.thresholds.DriftThresholds`.

Not covered: a rise shorter than ``2 * min_window`` known steps (too short to
tell from noise) and a drift that only starts inside the final window.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tirl.diagnostics.thresholds import DriftThresholds

# Mean of |x| over the smallest 90 % of a normal variable's absolute values, in units of its sd:
# sqrt(2 / pi) * (1 - exp(-z**2 / 2)) / 0.9 with z = 1.645 (the 90th percentile of |x|).
TRIMMED_ABS_DIFF = 0.6574


@dataclass(frozen=True, slots=True)
class Drift:
    """A sustained rise of the void share: where it began and the numbers behind it."""

    onset_index: int
    baseline: float
    late: float
    rise_z: float
    window: int
    baseline_indices: tuple[int, int]
    late_indices: tuple[int, int]
    noise_per_step: float
    test: str
    share: list[float | None] = field(repr=False)


def _noise(values: Sequence[float], counts: Sequence[float] | None, level: float, floor: float) -> float:
    """Per-step noise of the share: robust step-to-step spread, floored by the binomial noise at ``level``."""
    diffs = sorted(abs(b - a) for a, b in itertools.pairwise(values))
    kept = diffs[: max(1, math.ceil(0.9 * len(diffs)))]  # the largest 10 % of the changes (a jump) are left out
    sd = statistics.fmean(kept) / TRIMMED_ABS_DIFF / math.sqrt(2.0) if diffs else 0.0
    if counts:
        n = statistics.median(counts)
        if n > 0:
            p = min(max(level, 1.0 / n), 1.0 - 1.0 / n)
            sd = max(sd, math.sqrt(p * (1.0 - p) / n))
    return max(sd, floor)


def _running_median3(values: Sequence[float]) -> list[float]:
    out = []
    for i in range(len(values)):
        out.append(statistics.median(values[max(0, i - 1) : i + 2]))
    return out


def _trend(vals: Sequence[float], noise: float) -> tuple[float, float, float]:
    """Least-squares line through ``vals``: (fitted first value, fitted rise over the run, t of the slope)."""
    n = len(vals)
    mx, my = (n - 1) / 2.0, statistics.fmean(vals)
    sxx = sum((x - mx) ** 2 for x in range(n))
    slope = sum((x - mx) * (y - my) for x, y in enumerate(vals)) / sxx
    return my - slope * mx, slope * (n - 1), slope * math.sqrt(sxx) / noise


def find_drift(
    share: Sequence[float | None],
    counts: Sequence[float | None] | None = None,
    th: DriftThresholds | None = None,
) -> Drift | None:
    """The drift in a per-step void share series, or ``None`` (see the module docstring for the test).

    ``counts`` are the trajectories judged per step (for the binomial noise floor), when known.

    >>> flat = [0.1, 0.12, 0.09, 0.11, 0.1] * 4
    >>> find_drift(flat) is None
    True
    >>> rising = flat + [0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.62, 0.58, 0.61]
    >>> d = find_drift(rising)
    >>> d is not None and 20 <= d.onset_index <= 23
    True
    """
    th = th or DriftThresholds()
    known = [i for i, v in enumerate(share) if v is not None]
    n = len(known)
    w = max(th.min_window, min(th.max_window, n // 4))
    if n < 2 * w + 1:
        return None
    vals = [float(share[i]) for i in known]  # type: ignore[arg-type]
    late_start = n - w
    late = statistics.fmean(vals[late_start:])
    means = [statistics.fmean(vals[j : j + w]) for j in range(0, late_start - w + 1)]
    base_at = min(range(len(means)), key=lambda j: (means[j], j))
    known_counts = [c for i in known if counts is not None and (c := counts[i]) is not None]
    noise = _noise(vals, known_counts or None, means[base_at], th.noise_floor)
    # the window test: the late level against the lowest earlier level
    base, test = means[base_at], "window"
    z = (late - base) / (noise * math.sqrt(2.0 / w))
    if late - base < th.min_rise or z < th.rise_z:
        # the trend test: a steady climb from the first step, which the window test sees only in part
        start, rise, t = _trend(vals, noise)
        if rise < th.min_rise or t < th.trend_z:
            return None
        base, base_at, z, test = start, 0, t, "trend"
    rise = late - base
    above = sum(1 for v in vals[late_start:] if v > base + rise / 2.0)
    if rise < th.min_rise or above < th.sustained_frac * w:
        return None
    smooth = _running_median3(vals)
    near = base + min(th.onset_frac * rise, th.onset_noise * noise)
    onset = base_at + w  # the first value after the baseline window, unless it rose later
    for j in range(base_at, late_start):
        if smooth[j] <= near:
            onset = j + 1
    return Drift(
        onset_index=known[min(onset, late_start)],
        baseline=base,
        late=late,
        rise_z=z,
        window=w,
        baseline_indices=(known[base_at], known[base_at + w - 1]),
        late_indices=(known[late_start], known[-1]),
        noise_per_step=noise,
        test=test,
        share=list(share),
    )
