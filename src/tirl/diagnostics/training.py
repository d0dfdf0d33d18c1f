"""Verdicts from a per-step training log: the void-turn symptoms of ``DESIGN.md`` and void drift.

Every rule compares a step with a rolling baseline of the steps around it
(:mod:`tirl.diagnostics.robust`: median and MAD, the step itself excluded),
so a spike means "unusual for this run", not "above a fixed number". Where
the level shifted — the step *and* the level of the steps after it are that
unusual against the steps before it — the baseline of the steps before
counts too: an IS ratio that blows up at step 10 of 20 and stays up makes
the blown-up level the median of the centred window, and the onset would
look ordinary (the evidence then says ``baseline the steps before this one``):

* **IS-ratio spike**: ``log(is_max)`` at least ``is_z`` robust z-scores above
  its baseline *and* at least ``is_factor`` times the baseline median (the
  mirror image for ``is_min``), or ``is_max`` at least ``is_big_z`` z-scores
  and ``is_big_factor`` times the median (a huge jump in a noisy run). Ratios
  are compared on a log scale. Early steps count: where too few steps exist
  for a baseline, an ``is_max`` of at least ``is_abs`` that is also
  ``is_big_factor`` times the run's median is a spike, and so is a jump in the first ``min_points`` steps
  that stays up when the step and the level after it both pass that bar against the steps before it
  (:func:`~tirl.diagnostics.robust.early_shift`; a smaller one is listed in ``not_checked``). The relaxed rules
  are for ``is_max`` only: the minimum over all tokens is heavy-tailed in
  real runs (0.03 against a median of 0.75 in a healthy tirl run).
* **longest trajectory**: ``max_len`` at least ``len_z`` z-scores above
  baseline, or the run's longest (within 1 %: the length cap was hit).
* **filter drop**: the void count (scale floor: Poisson, ``sqrt(median)``) or
  the void ratio ``drop_z`` z-scores above baseline; when the log has neither,
  the valid count ``drop_z`` below.

The named numbers are fields of :class:`~tirl.diagnostics.thresholds.TrainingThresholds`.

Verdicts (``SEVERITY`` lists them from most to least severe):

* ``void_leak``: an IS-ratio spike with a length spike in the same step and
  no filter drop (a void trajectory went into the loss). Without a length
  series the spike alone is reported, marked in the evidence.
* ``late_filter``: an IS-ratio spike in the same step as a filter drop: the
  filter found the void trajectories, but they were already in the update.
* ``detector_inactive``: at least ``inactive_steps`` steps in which the void
  count is always 0 and the valid count never changes.
* ``empty_batch``: a step with 0 valid trajectories (consecutive steps are
  one finding); ``rollout_faults`` (beyond the seed): a sizeable share of the episodes failed or their
  evaluation broke for several steps. Both name the cause the rollout logged
  (:mod:`tirl.diagnostics.rollout_faults`).
* ``void_drift``: the void share rises and stays up over many steps
  (:mod:`tirl.diagnostics.drift`); the finding's step is where the rise
  began. An IS-ratio spike at or after that step is part of the drift
  (listed in its evidence), not a ``late_filter`` or ``void_leak`` of its
  own; spikes before the onset keep their verdicts.

* ``kl_blowup`` / ``entropy_collapse`` (beyond the seed): the KL to the reference ran away, or the policy's
  entropy collapsed while the reward did not rise (:mod:`tirl.diagnostics.entropy_kl` has the rules).
* ``spikes_in_void`` / ``spikes_in_valid`` (tirl's attribution, beyond the seed): on the steps with an
  IS-ratio spike or a grad-norm spike (the ``is_max`` rule on the log grad norm), whether the void rows
  hold clearly more of the spikes than of the tokens (the filter helps) or no more, with most spikes in
  valid rows (it cannot); :mod:`tirl.diagnostics.attribution` has the rule.

For the seed's verdicts a grad-norm bump is evidence, never a trigger: without an IS-ratio spike it
is ordinary noise. An IS-ratio spike that lasts (consecutive steps of one kind) is one finding with its step range
(:func:`~tirl.diagnostics.finding.merge_runs`). IS-ratio spikes with neither a length spike nor a filter
drop match no row of the table: they are no finding, but the diagnosis lists
their steps (``unmatched_spikes``), so a healthy verdict does not claim there
was no spike. The rules a log does not let run (no IS ratio, too few steps)
are listed too (``not_checked``, :mod:`tirl.diagnostics.coverage`). Missing
values are skipped (a skipped step logs nulls).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.attribution import attribute_spikes, step_shares
from tirl.diagnostics.coverage import not_checked
from tirl.diagnostics.drift import find_drift
from tirl.diagnostics.entropy_kl import CHECK_FIRST as POLICY_CHECK_FIRST
from tirl.diagnostics.entropy_kl import SUMMARY as POLICY_SUMMARY
from tirl.diagnostics.entropy_kl import entropy_findings, kl_findings, policy_not_checked
from tirl.diagnostics.finding import Finding, merge_runs
from tirl.diagnostics.robust import Baseline, Shift, Side, baseline, early_shift, log_values, median_after
from tirl.diagnostics.rollout_faults import CHECK_FIRST as FAULTS_CHECK_FIRST
from tirl.diagnostics.rollout_faults import SUMMARY as FAULTS_SUMMARY
from tirl.diagnostics.rollout_faults import empty_batch_findings, fault_findings, faults_not_checked
from tirl.diagnostics.thresholds import TrainingThresholds
from tirl.wording import counted

SEVERITY: tuple[str, ...] = (
    "void_leak", "void_drift", "late_filter", "detector_inactive", "empty_batch", "rollout_faults", "kl_blowup",
    "entropy_collapse", "spikes_in_void", "spikes_in_valid",
)  # fmt: skip

# The seed's "check this first" column.
CHECK_FIRST: dict[str, str] = {
    "void_leak": "the void-turn check and where void trajectories are dropped: a long garbage turn was not "
    "judged void and went into the loss (tirl.parsing.judge_message, the filter call in the trainer)",
    "late_filter": "the order of the training step: the filter must run before advantages, ratios and KL "
    "are computed, not after the update",
    "void_drift": "what pushes void turns down: under filter.mode=drop a void trajectory gets no gradient, so "
    "its share can random-walk up; compare filter modes (mask, or a remedy) and lower the learning rate, and "
    "watch the void share from the onset step on",
    "detector_inactive": "the code-block pattern and where the final answer is read from (a pre-filled field "
    "instead of the model's text); run `tirl audit` on the trajectories to see what the rule finds",
    "spikes_in_void": "the seed's disease: void turns carry the ratio/gradient spikes, so the void filter helps "
    "(filter.mode=drop or mask, or penalize against void drift); compare the modes with `tirl ablate`",
    "spikes_in_valid": "not the void filter (the spikes sit in valid turns, it cannot remove them): the learning "
    "rate and warm-up (algo.lr, algo.warmup_steps), the generator/trainer mismatch (train/gen_logprob_gap_max, "
    "generation.dtype, algo.tis_cap) and the length cap (generation.max_total_tokens)",
    **POLICY_CHECK_FIRST,
    **FAULTS_CHECK_FIRST,
}
SUMMARY: dict[str, str] = {
    "void_leak": "IS-ratio spike with the longest trajectory, valid count not reduced",
    "late_filter": "valid count dropped, but the IS ratio still spiked",
    "void_drift": "the void share rose over many steps and stayed up",
    "detector_inactive": "valid count never changes, void count always 0",
    "spikes_in_void": "on the spike steps, void rows hold clearly more of the spikes than of the tokens",
    "spikes_in_valid": "on the spike steps, most spikes sit in valid rows (void rows hold no more than their share)",
    **POLICY_SUMMARY,
    **FAULTS_SUMMARY,
}


@dataclass(frozen=True, slots=True)
class TrainingDiagnosis:
    """All findings of one log; the verdict is the most severe kind, or ``healthy``."""

    path: str
    format: str
    steps: int
    findings: tuple[Finding, ...]
    run: str | None = None
    unmatched_spikes: tuple[int, ...] = ()  # steps with an IS-ratio spike that matched no row of the table
    not_checked: dict[str, str] = field(default_factory=dict)  # kind -> why its rule could not run (coverage)

    @property
    def verdict(self) -> str:
        """``healthy`` exactly when there are no findings."""
        kinds = {f.kind for f in self.findings}
        return next((k for k in SEVERITY if k in kinds), "healthy")

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape (with ``"run"`` when the log came from a wandb export that names its runs).

        ``steps``: the log's step count; ``unmatched_is_spikes``: the steps of IS-ratio spikes that matched no
        row of the table (a healthy verdict with spikes); ``not_checked``: verdict kind -> why its rule could
        not run on this log (:mod:`tirl.diagnostics.coverage`).
        """
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "steps": self.steps,
            "findings": [f.to_dict() for f in self.findings],
            "unmatched_is_spikes": list(self.unmatched_spikes),
            "not_checked": dict(self.not_checked),
        }
        if self.run is not None:
            out = {"run": self.run, **out}
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if value >= sys.float_info.max else f"{value:.4g}"  # a logged Infinity reads as the float max
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def steps_text(n: int) -> str:
    """``"1 step"``, ``"20 steps"``."""
    return counted(n, "step")


def spikes_text(steps: tuple[int, ...]) -> str:
    """``"an IS-ratio spike at step 12"``, ``"IS-ratio spikes at steps 3, 12"``, or the first and last of many."""
    if len(steps) == 1:
        return f"an IS-ratio spike at step {steps[0]}"
    shown = ", ".join(map(str, steps)) if len(steps) <= 4 else f"{steps[0]}, {steps[1]}, … {steps[-1]}"
    return f"IS-ratio spikes at {len(steps)} steps ({shown})"


def evidence_lines(evidence: dict[str, Any]) -> list[str]:
    """One line per measured quantity, ``value (baseline b, z z)``; missing values are left out."""
    lines = []
    for key, value in evidence.items():
        if value is None or key.endswith(("_baseline", "_z")):
            continue
        extra = [
            f"{label} {_fmt(evidence[key + suffix])}"
            for suffix, label in (("_baseline", "baseline"), ("_z", "z"))
            if evidence.get(key + suffix) is not None
        ]
        lines.append(f"{key} {_fmt(value)}" + (f" ({', '.join(extra)})" if extra else ""))
    return lines


def _r(x: float | None, nd: int = 4) -> float | None:
    """``x`` rounded; the float max (a logged ``Infinity``) is ``inf``, which ``--json`` writes as ``null``."""
    if x is None:
        return None
    return math.inf if x >= sys.float_info.max else round(x, nd)


_LOG_MAX = math.log(sys.float_info.max)


def _exp(x: float) -> float:
    """``exp`` of a log value; the log of the float max (an ``Infinity`` baseline) gives ``inf``."""
    return math.inf if x >= _LOG_MAX - 1e-9 else math.exp(x)


class _Series:
    """A canonical series with cached baselines: around each step, and of the steps before it."""

    def __init__(self, values: Sequence[float | None] | None, th: TrainingThresholds, **floors: Any) -> None:
        self.values = list(values) if values is not None else None
        self._th = th
        self._floors = floors
        self._cache: dict[tuple[int, Side], Baseline | None] = {}

    def at(self, i: int) -> float | None:
        return None if self.values is None else self.values[i]

    def baseline(self, i: int, side: Side = "around") -> Baseline | None:
        """The baseline of step ``i`` (None where the step has no value or too few neighbours)."""
        if self.values is None or self.values[i] is None:
            return None
        if (i, side) not in self._cache:
            self._cache[i, side] = baseline(
                self.values, i, window=self._th.window, min_points=self._th.min_points, side=side, **self._floors
            )
        return self._cache[i, side]

    def z(self, i: int, side: Side = "around") -> float | None:
        b, value = self.baseline(i, side), self.at(i)
        return None if b is None or value is None else b.z(value)

    def median(self, i: int, side: Side = "around") -> float | None:
        b = self.baseline(i, side)
        return None if b is None else b.median

    def shift(self, i: int) -> Shift | None:
        """The level shift at ``i`` against the steps before it, where they are too few for a baseline."""
        if self.values is None:
            return None
        return early_shift(self.values, i, window=self._th.window, min_points=self._th.min_points)

    def after(self, i: int) -> float | None:
        """The level of the steps after ``i`` (the median of their known values within the window)."""
        return None if self.values is None else median_after(self.values, i, window=self._th.window)

    def extreme_z(self, i: int, sign: float) -> tuple[float | None, Side]:
        """The z-score of step ``i`` against its baseline, in the direction ``sign`` (+1 up, -1 down).

        Against the steps around it, or against the steps before it where the level shifted: the step *and*
        the level after it are that far out (the weaker of the two z-scores counts). A level that jumps and
        stays up is unusual only against the steps before its onset (:mod:`tirl.diagnostics.robust`); a lone
        bump is judged by the steps around it alone, whose baseline has more points.
        """
        around, value, after, before = self.z(i), self.at(i), self.after(i), self.baseline(i, "before")
        if before is None or value is None or after is None:
            return around, "around"
        shift = min(sign * before.z(value), sign * before.z(after)) * sign
        if around is None or sign * shift > sign * around:
            return shift, "before"
        return around, "around"


_BEFORE_NOTE = "the steps before this one: the level jumped here and stayed up, so the steps around it share it"
_EARLY_SHIFT_NOTE = (
    "the {steps} before this one, too few for a rolling baseline: the level jumped here to at least {floor:g} and "
    "{factor:g}x theirs, and stayed up"
)


class _Signals:
    """The per-step tests of the rules, on one log."""

    def __init__(self, log: MetricsLog, th: TrainingThresholds) -> None:
        self.log, self.th = log, th
        self.is_max_log = _Series(
            log_values(log.get("is_max") or []) if log.get("is_max") else None, th, abs_floor=0.05
        )
        self.is_min_log = _Series(
            log_values(log.get("is_min") or []) if log.get("is_min") else None, th, abs_floor=0.05
        )
        self.max_len = _Series(log.get("max_len"), th, abs_floor=1.0, rel_floor=0.02)
        self.valid = _Series(log.get("valid"), th, abs_floor=1.0)
        self.void = _Series(log.get("void"), th, abs_floor=1.0, count_floor=True)
        self.void_ratio = _Series(log.get("void_ratio"), th, abs_floor=0.03)
        self.grad = _Series(
            log_values(log.get("grad_norm") or []) if log.get("grad_norm") else None, th, abs_floor=0.05
        )

    def _extreme_side(self, series: _Series, i: int, sign: float) -> str | None:
        """Which baseline makes step ``i`` a spike of a log series (``sign`` +1 up, -1 down), or None.

        ``"around"`` (the IS rule against the steps around), ``"before"`` (a level shift: the step and the level
        of the steps after it both pass the rule against the steps before), ``"early"`` (no baseline yet: the
        early-step rule, upward only), ``"early_shift"`` (a level shift within the first ``min_points`` steps,
        too few before it for a baseline: the step and the level after it both clear the early-step rule against
        the steps before it, upward only).
        """
        th = self.th
        value = series.at(i)
        if value is None:
            return None
        if series.baseline(i) is None:  # no baseline yet: early steps still count (upward only)
            if sign < 0:
                return None
            others = [v for j, v in enumerate(series.values or []) if j != i and v is not None]
            ref = statistics.median(others) if others else 0.0
            if sign * value >= math.log(th.is_abs) and sign * (value - ref) >= math.log(th.is_big_factor):
                return "early"
            return "early_shift" if self._early_shift(series, i) is not None else None

        def spike(b: Baseline, x: float) -> bool:
            jump, z = sign * (x - b.median), sign * b.z(x)
            return (z >= th.is_z and jump >= math.log(th.is_factor)) or (
                sign > 0 and z >= th.is_big_z and jump >= math.log(th.is_big_factor)
            )

        around, before, after = series.baseline(i), series.baseline(i, "before"), series.after(i)
        if around is not None and spike(around, value):
            return "around"
        if before is not None and after is not None and spike(before, value) and spike(before, after):
            return "before"  # a level shift: the step and the steps after it are out against the steps before
        return "early_shift" if sign > 0 and self._early_shift(series, i) is not None else None

    def _early_shift(self, series: _Series, i: int) -> Shift | None:
        """The shift at ``i`` when it clears the early-step rule against the few steps before it (else None)."""
        shift = series.shift(i)
        th = self.th
        return shift if shift is not None and shift.clears(math.log(th.is_abs), math.log(th.is_big_factor)) else None

    def _extreme(self, series: _Series, i: int, sign: float) -> bool:
        """``sign`` +1: an upward spike of a log series at ``i``; -1: a downward one."""
        return self._extreme_side(series, i, sign) is not None

    def is_spike(self, i: int) -> tuple[bool, dict[str, Any]]:
        hi_side = self._extreme_side(self.is_max_log, i, 1.0)
        lo_side = self._extreme_side(self.is_min_log, i, -1.0)
        hi: Side = "before" if hi_side == "before" else "around"
        lo: Side = "before" if lo_side == "before" else "around"
        hi_med, lo_med = self.is_max_log.median(i, hi), self.is_min_log.median(i, lo)
        is_max, is_min = self.log.get("is_max"), self.log.get("is_min")
        ev: dict[str, Any] = {
            "is_ratio_max": _r(is_max[i]) if is_max else None,
            "is_ratio_max_baseline": _r(_exp(hi_med)) if hi_med is not None else None,
            "is_ratio_max_z": _r(self.is_max_log.z(i, hi), 2),
            "is_ratio_min": _r(is_min[i]) if is_min else None,
            "is_ratio_min_baseline": _r(_exp(lo_med)) if lo_med is not None else None,
            "is_ratio_min_z": _r(self.is_min_log.z(i, lo), 2),
        }
        if "before" in (hi, lo):
            ev["baseline"] = _BEFORE_NOTE
        if hi_side == "early_shift" and (shift := self.is_max_log.shift(i)) is not None:
            ev["is_ratio_max_baseline"], ev["is_ratio_max_z"] = _r(_exp(shift.before)), None
            ev["baseline"] = _EARLY_SHIFT_NOTE.format(
                steps=steps_text(shift.points), floor=self.th.is_abs, factor=self.th.is_big_factor
            )
        return hi_side is not None or lo_side is not None, ev

    def len_spike(self, i: int) -> tuple[bool | None, dict[str, Any]]:
        if self.max_len.values is None:
            return None, {}
        (z, side), value = self.max_len.extreme_z(i, 1.0), self.max_len.at(i)
        ev = {"max_len": value, "max_len_baseline": _r(self.max_len.median(i, side), 1), "max_len_z": _r(z, 2)}
        longest = max((v for v in self.max_len.values if v is not None), default=None)
        at_cap = value is not None and longest is not None and value >= 0.99 * longest
        if at_cap:
            ev["max_len_is_runs_longest"] = True
        if z is None and value is None:
            return None, ev
        return (z is not None and z >= self.th.len_z) or at_cap, ev

    def dropped(self, i: int) -> tuple[bool | None, dict[str, Any]]:
        th = self.th
        (vz, v_side), (dz, d_side) = self.valid.extreme_z(i, -1.0), self.void.extreme_z(i, 1.0)
        rz = self.void_ratio.extreme_z(i, 1.0)[0]
        ev = {
            "valid": self.valid.at(i),
            "valid_baseline": _r(self.valid.median(i, v_side), 2),
            "valid_z": _r(vz, 2),
            "void": self.void.at(i),
            "void_baseline": _r(self.void.median(i, d_side), 2),
        }
        if dz is not None or rz is not None:  # the void count is the direct measure
            return (dz is not None and dz >= th.drop_z) or (rz is not None and rz >= th.drop_z), ev
        if vz is not None:
            return vz <= -th.drop_z, ev
        return None, ev

    def grad_evidence(self, i: int) -> dict[str, Any]:
        g = self.log.get("grad_norm")
        return {"grad_norm": _r(g[i]) if g else None, "grad_norm_z": _r(self.grad.extreme_z(i, 1.0)[0], 2)}


def _attribution_finding(log: MetricsLog, th: TrainingThresholds) -> Finding | None:
    """The ``spikes_in_void`` / ``spikes_in_valid`` finding over the run's spike steps (or None)."""
    if log.get("void_share_tokens") is None:
        return None
    sig = _Signals(log, th)
    spikes = [i for i in range(len(log)) if sig.is_spike(i)[0] or sig._extreme(sig.grad, i, 1.0)]
    found = attribute_spikes(log, spikes, th.attribution)
    if found is None:
        return None
    return Finding(found.kind, found.steps[0], found.steps, found.evidence)


def _spike_findings(log: MetricsLog, th: TrainingThresholds) -> tuple[list[Finding], list[int]]:
    """The IS-spike findings, and the steps of the spikes that matched no row of the table."""
    sig = _Signals(log, th)
    out: list[Finding] = []
    unmatched: list[int] = []
    has_counts = any(log.get(k) is not None for k in ("valid", "void", "void_ratio"))
    for i, step in enumerate(log.steps):
        spike, ev = sig.is_spike(i)
        if not spike:
            continue
        drop_now, drop_ev = sig.dropped(i)
        longest, len_ev = sig.len_spike(i)
        evidence = {**ev, **len_ev, **drop_ev, **sig.grad_evidence(i), **step_shares(log, i)}
        if drop_now:
            out.append(Finding("late_filter", step, (step,), evidence))
        elif longest or longest is None:
            if longest is None:
                evidence["note"] = "no max-length value for this step: the length condition was not checked"
            if drop_now is None:
                evidence["note_valid"] = (
                    "too few steps with void/valid counts around this one for a baseline: 'not reduced' assumed"
                    if has_counts
                    else "no valid/void counts in this log (no filter): 'not reduced' assumed"
                )
            out.append(Finding("void_leak", step, (step,), evidence))
        else:
            unmatched.append(step)
    return out, unmatched


def _inactive_findings(log: MetricsLog, th: TrainingThresholds) -> list[Finding]:
    """Longest stretches with void always 0 and a constant valid count (nulls inside are skipped)."""
    valid, void, ratio, trajs = log.get("valid"), log.get("void"), log.get("void_ratio"), log.get("trajectories")
    if (valid is None and ratio is None) or (void is None and ratio is None and trajs is None):
        return []  # a void share alone (SimpleTIR) is enough; the valid count is then not checked

    def zero_void(i: int) -> bool | None:
        d = void[i] if void else None
        r = ratio[i] if ratio else None
        if d is None and r is None:
            t, v = (trajs[i] if trajs else None), (valid[i] if valid else None)
            return None if t is None or v is None else v == t
        return (d is None or d == 0) and (r is None or r == 0)

    out: list[Finding] = []
    start = 0
    known: list[int] = []
    value: float | None = None

    def close() -> None:
        if len(known) >= th.inactive_steps:
            steps = tuple(log.steps[j] for j in known)
            elsewhere = [void[j] for j in range(len(log)) if void and void[j] and j not in set(known)]
            out.append(
                Finding(
                    "detector_inactive",
                    None,
                    steps,
                    {
                        "first_step": steps[0],
                        "last_step": steps[-1],
                        "steps_in_window": len(steps),
                        "valid_constant": value if valid else None,
                        "void_always": 0,
                        "void_steps_elsewhere": len(elsewhere),
                    },
                )
            )

    for i in range(len(log)):
        v = valid[i] if valid else 0.0
        z = zero_void(i)
        if v is None or z is None:
            continue  # a skipped step does not break the stretch
        if z and (value is None or v == value):
            value = v
            known.append(i)
            continue
        close()
        known, value = ([i], v) if z else ([], None)
        start = i
    close()
    del start
    return out


def _drift_finding(
    log: MetricsLog, th: TrainingThresholds, spikes: list[Finding]
) -> tuple[Finding | None, list[Finding]]:
    """The ``void_drift`` finding (if any) and the spike findings it does not explain.

    An IS-ratio spike at or after the onset (``late_filter``: the void count jumped with the rest of the
    rise; ``void_leak``: a long garbage trajectory of a policy that now writes void turns often) is the
    drift seen in one step, so it moves into the drift's evidence instead of being a verdict of its own.
    """
    share = log.get("void_ratio")
    if share is None:
        return None, spikes
    valid, void = log.get("valid"), log.get("void")
    counts = (
        [v + d if v is not None and d is not None else None for v, d in zip(valid, void, strict=True)]
        if valid is not None and void is not None
        else None
    )
    drift = find_drift(share, counts, th.drift)
    if drift is None:
        return None, spikes
    onset = log.steps[drift.onset_index]
    absorbed = [f for f in spikes if f.step is not None and f.step >= onset]
    lo, hi = drift.late_indices
    evidence: dict[str, Any] = {
        "onset_step": onset,
        "void_share_low": _r(drift.baseline),
        "low_steps": [log.steps[drift.baseline_indices[0]], log.steps[drift.baseline_indices[1]]],
        "void_share_end": _r(drift.late),
        "end_steps": [log.steps[lo], log.steps[hi]],
        "rise": _r(drift.late - drift.baseline),
        "rise_z": _r(drift.rise_z, 2),
        "noise_per_step": _r(drift.noise_per_step),
        "window_steps": drift.window,
        "test": drift.test,
    }
    if void is not None and valid is not None:
        evidence["void_at_onset"] = void[drift.onset_index]
        evidence["void_last"] = next((d for d in reversed(void) if d is not None), None)
    if absorbed:
        evidence["is_spikes_during_rise"] = [f"{f.step} ({f.kind} alone)" for f in absorbed]
    steps = tuple(s for s, v in zip(log.steps, share, strict=True) if s >= onset and v is not None)
    finding = Finding("void_drift", onset, steps, evidence)
    return finding, [f for f in spikes if f not in absorbed]


def diagnose_training(log: MetricsLog, thresholds: TrainingThresholds | None = None) -> TrainingDiagnosis:
    """Run every rule on ``log``; findings are ordered by step."""
    th = thresholds or TrainingThresholds()
    spike_findings, unmatched = _spike_findings(log, th)
    drift, spikes = _drift_finding(log, th, spike_findings)
    findings = merge_runs(spikes, log.steps) + empty_batch_findings(log) + _inactive_findings(log, th)
    findings += fault_findings(log, th.faults)
    findings += ([drift] if drift else []) + kl_findings(log, th) + entropy_findings(log, th)
    attribution = _attribution_finding(log, th)
    findings += [attribution] if attribution is not None else []
    findings.sort(key=lambda f: (f.steps[0] if f.steps else -1, SEVERITY.index(f.kind)))
    spike_steps = {f.step for f in spike_findings} | set(unmatched)
    judged = [i for i, step in enumerate(log.steps) if step in spike_steps]
    return TrainingDiagnosis(
        path=log.path,
        format=log.format,
        steps=len(log),
        findings=tuple(findings),
        run=log.run,
        unmatched_spikes=tuple(unmatched),
        not_checked={**not_checked(log, th, judged), **policy_not_checked(log), **faults_not_checked(log, th.faults)},
    )
