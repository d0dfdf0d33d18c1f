"""Which verdict rules a training log lets run: what a ``healthy`` verdict did not check.

:func:`not_checked` maps a verdict kind to why its rule could not run on the log (or ran only in part).
A rule needs its series and enough steps with a value in them (the numbers are those of
:class:`~tirl.diagnostics.thresholds.TrainingThresholds`):

* ``void_leak`` / ``late_filter``: an IS ratio (``is_max`` or ``is_min``). With at most ``min_points``
  steps holding one, no rolling baseline exists: an IS spike is found only by the early-step rule (an
  ``is_max`` of at least ``is_abs`` and ``is_big_factor`` times the run's median), so ``void_leak`` is
  checked in part.
* ``late_filter``: also the filter-drop test, which needs a baseline of the void count, the void share
  or the valid count (more than ``min_points`` steps with one).
* ``empty_batch``: a valid count or a void share.
* ``detector_inactive``: a valid count with a void count or the trajectory count (or a void share alone), and
  at least ``inactive_steps`` steps.
* ``void_drift``: a void share (logged, or derived from the counts) in at least ``2 * min_window + 1``
  steps (:mod:`tirl.diagnostics.drift`).

Not covered: the attribution verdicts (``spikes_in_void``/``spikes_in_valid``), which need tirl's
``void/*`` keys and are not part of the seed's symptom table; a log whose values are spread so thinly that
a step has too few neighbours within the window although the log has enough in all.
"""

from __future__ import annotations

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.thresholds import TrainingThresholds


def _known(log: MetricsLog, *names: str) -> int:
    """The most steps with a value in any of the series ``names`` (0 when the log has none of them)."""
    return max((sum(v is not None for v in log.get(name) or []) for name in names), default=0)


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def not_checked(log: MetricsLog, th: TrainingThresholds) -> dict[str, str]:
    """Verdict kind -> why its rule could not run on ``log`` (``"only …"`` where it ran in part); see the module."""
    out: dict[str, str] = {}
    baseline = th.min_points + 1
    ratio = _known(log, "is_max", "is_min")
    drop = _known(log, "void", "void_ratio", "valid")
    if ratio == 0:
        out["void_leak"] = out["late_filter"] = "the log has no IS-ratio value"
    else:
        if ratio < baseline:
            out["void_leak"] = (
                f"only by the early-step rule, an IS-ratio max >= {th.is_abs:g} and {th.is_big_factor:g}x the run's "
                f"median: a rolling baseline needs {baseline} steps with an IS ratio, the log has {_steps(ratio)}"
            )
        if drop == 0:
            out["late_filter"] = "the log has no valid/void counts or void share (no filter drop to see)"
        elif drop < baseline:
            out["late_filter"] = (
                f"the filter-drop test needs {baseline} steps with void/valid counts, the log has {_steps(drop)}"
            )
    if _known(log, "valid", "void_ratio") == 0:
        out["empty_batch"] = "the log has no valid count or void share"
    if _known(log, "valid", "void_ratio") == 0 or _known(log, "void", "void_ratio", "trajectories") == 0:
        out["detector_inactive"] = "the log has no valid count with a void count (or a void share)"
    elif len(log) < th.inactive_steps:
        out["detector_inactive"] = f"needs {th.inactive_steps} steps, the log has {_steps(len(log))}"
    share, need = _known(log, "void_ratio"), 2 * th.drift.min_window + 1
    if share == 0:
        out["void_drift"] = "the log has no void share or void/valid counts"
    elif share < need:
        out["void_drift"] = f"needs {need} steps with a void share, the log has {_steps(share)}"
    return out
