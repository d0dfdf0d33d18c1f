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
* ``void_leak`` / ``late_filter``, in part: an IS-ratio max that rose at least ``is_factor`` times within the
  first steps (fewer than ``min_points`` with a value before it: no rolling baseline of the steps before) and
  stayed up, but not as far as the early-step rule needs (``is_abs`` and ``is_big_factor`` times the steps
  before), was not judged at that step: the note names the step and the two levels
  (:func:`tirl.diagnostics.robust.early_shift`). A rise that was judged (a spike at that step, matched or not)
  is not listed.

* ``void_leak`` / ``late_filter``, in part: the mirror image for the IS-ratio min, which no early rule judges
  (the minimum over all tokens is heavy-tailed): a fall of at least ``is_factor`` times within the first steps
  that stayed down is listed with its step and the two levels (:func:`unjudged_early_fall`), unless a rule
  judged that step (a spike of the IS-ratio max there).
* ``entropy_collapse`` / ``kl_blowup``: :func:`tirl.diagnostics.entropy_kl.policy_not_checked` (no entropy, no
  KL or a KL that is 0 at every step, no reward).

Not covered: the attribution verdicts (``spikes_in_void``/``spikes_in_valid``), which need tirl's
``void/*`` keys and are not part of the seed's symptom table; a log whose values are spread so thinly that
a step has too few neighbours within the window although the log has enough in all.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.robust import Shift, early_shift, log_values
from tirl.diagnostics.thresholds import TrainingThresholds
from tirl.wording import counted


def _known(log: MetricsLog, *names: str) -> int:
    """The most steps with a value in any of the series ``names`` (0 when the log has none of them)."""
    return max((sum(v is not None for v in log.get(name) or []) for name in names), default=0)


def _steps(n: int) -> str:
    return counted(n, "step")


def _unjudged_early(
    values: list[float | None], th: TrainingThresholds, judged: Collection[int], early_rule: bool
) -> Shift | None:
    """The first early rise of the log series ``values`` that stayed up and that no rule judged (see below)."""
    factor = math.log(th.is_factor)
    known_before, judged_level = 0, -math.inf
    for i, value in enumerate(values):
        if known_before >= th.min_points:
            return None
        known_before += value is not None
        shift = early_shift(values, i, window=th.window, min_points=th.min_points)
        if shift is None or not shift.clears(-math.inf, factor):
            continue
        if i in judged:
            judged_level = max(judged_level, shift.level)
        elif shift.level - judged_level >= factor and not (
            early_rule and shift.clears(math.log(th.is_abs), math.log(th.is_big_factor))
        ):
            return shift
    return None


def unjudged_early_rise(log: MetricsLog, th: TrainingThresholds, judged: Collection[int] = ()) -> Shift | None:
    """The first rise of the IS-ratio max in the early steps that stayed up and that no rule could judge.

    A rise of at least ``is_factor`` times over the steps before it, where they are too few for a rolling
    baseline, that does not clear the early-step rule. Indices in ``judged`` (spike steps) are skipped, and so
    are the steps that only carry on a judged rise (their few steps before mix the two levels): a later rise
    must also be ``is_factor`` times above the judged level.
    """
    return _unjudged_early(log_values(log.get("is_max") or []), th, judged, early_rule=True)


def unjudged_early_fall(log: MetricsLog, th: TrainingThresholds, judged: Collection[int] = ()) -> Shift | None:
    """The first fall of the IS-ratio min in the early steps that stayed down (no early rule looks downward).

    :func:`unjudged_early_rise` on ``-log(is_min)``: a fall of at least ``is_factor`` times below the few steps
    before it whose level after stays that low (the weaker of the step and the median after counts), at a step
    that no rule judged. The returned shift is on that negated scale (``exp(-before)`` is the ratio before).
    """
    negated = [None if v is None else -v for v in log_values(log.get("is_min") or [])]
    return _unjudged_early(negated, th, judged, early_rule=False)


def _early_rise_text(log: MetricsLog, shift: Shift, th: TrainingThresholds) -> str:
    before, level = math.exp(shift.before), math.exp(shift.level)
    return (
        f"only in part: the IS-ratio max rose {level / before:.1f}x at step {log.steps[shift.index]} "
        f"({before:.3g} -> {level:.3g}) and stayed up; with {_steps(shift.points)} before it there is no rolling "
        f"baseline, and the early-step rule needs >= {th.is_abs:g} and {th.is_big_factor:g}x the steps before"
    )


def _early_fall_text(log: MetricsLog, shift: Shift) -> str:
    before, level = math.exp(-shift.before), math.exp(-shift.level)
    return (
        f"only in part: the IS-ratio min fell {before / level:.1f}x at step {log.steps[shift.index]} "
        f"({before:.3g} -> {level:.3g}) and stayed down; with {_steps(shift.points)} before it there is no rolling "
        "baseline, and no early-step rule looks downward (the minimum is heavy-tailed)"
    )


def not_checked(log: MetricsLog, th: TrainingThresholds, judged: Collection[int] = ()) -> dict[str, str]:
    """Verdict kind -> why its rule could not run on ``log`` (``"only …"`` where it ran in part); see the module.

    ``judged``: the indices of the IS-spike steps (a rise judged there is not listed).
    """
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
    rise = unjudged_early_rise(log, th, judged)
    if rise is not None:
        out.setdefault("void_leak", _early_rise_text(log, rise, th))
        out.setdefault(
            "late_filter", f"only in part: the IS-ratio rise at step {log.steps[rise.index]} (see void_leak)"
        )
    fall = unjudged_early_fall(log, th, judged)
    if fall is not None:
        text = _early_fall_text(log, fall)
        out["void_leak"] = f"{out['void_leak']}; {text}" if "void_leak" in out else text
        out.setdefault(
            "late_filter", f"only in part: the IS-ratio fall at step {log.steps[fall.index]} (see void_leak)"
        )
    share, need = _known(log, "void_ratio"), 2 * th.drift.min_window + 1
    if share == 0:
        out["void_drift"] = "the log has no void share or void/valid counts"
    elif share < need:
        out["void_drift"] = f"needs {need} steps with a void share, the log has {_steps(share)}"
    return out
