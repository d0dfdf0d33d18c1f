"""Batches that lost their episodes: ``empty_batch`` and ``rollout_faults``, with the cause the rollout logged.

Two verdicts of ``tirl diagnose training`` about what reached the update, read from the canonical series of
:mod:`tirl.diagnostics.adapters` (the numbers are :class:`~tirl.diagnostics.thresholds.FaultThresholds`,
``th.faults``):

* ``empty_batch``: a step with 0 valid trajectories (or, without a valid count, a void share of 1); consecutive
  steps are one finding.
* ``rollout_faults``: at least ``steps`` consecutive steps (a step without the counts does not break the
  stretch) in each of which at least ``min_count`` episodes, and at least ``share`` of the step's sampled
  trajectories, were lost to the rollout: failed (``rollout/failed``: set-up, runner or evaluation failed, or
  timed out; out of the update, so the batch silently shrinks) or scored 0 by an evaluation that broke for a
  reason of its own (``rollout/eval_failure/<reason>``: in the update, with a reward that says nothing of the
  answer). Runs of fewer steps are no finding.

Both name the cause where tirl's trainer logged it in the same steps (:class:`Faults`): how the failed episodes
ended (``rollout/termination/<reason>``: ``init_failed``, ``timeout``, ``error``, ``eval_failed``,
``cancelled``), the stage attempts that timed out and the retries (``rollout/{init,run,eval}_timeouts``,
``rollout/{init,eval}_retries``) and the evaluation failures by reason — each with the config key that moves it
(``rollout.init_timeout_s``, ``rollout.run_timeout_s``, ``rollout.eval_timeout_s``, ``rollout.retries``).

:func:`faults_not_checked` lists ``rollout_faults`` where the log has no failed count (other frameworks) or
fewer than ``steps`` steps with one, and as checked only in part where it has no stage counts (tirl logs
written before them): evaluation failures, which are logged only where they occurred, are then not counted,
and no cause is named.

Not covered: the config values the run used (the log has the keys' names, not their values); a step whose
resample rounds lost episodes that the resample replaced counts them against all it sampled; attempts that
timed out and succeeded on a retry are named in the cause, never a finding of their own (nothing was lost).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tirl.diagnostics.adapters import FAILED_ENDS, MetricsLog
from tirl.diagnostics.finding import Finding
from tirl.diagnostics.log_rows import raw_number
from tirl.diagnostics.thresholds import FaultThresholds
from tirl.wording import counted

EVAL_FAILURE = "rollout/eval_failure/"
_MAX_COUNT = 1e15  # the largest count the adapter reads (tirl.diagnostics.adapters); beyond it, or inf: missing

#: verdict kind -> its one-line summary (``SUMMARY`` of :mod:`tirl.diagnostics.training` includes these)
SUMMARY: dict[str, str] = {
    "empty_batch": "no valid trajectory in the step",
    "rollout_faults": "for several steps, a sizeable share of the episodes failed or their evaluation broke",
}
#: verdict kind -> what to check first, in tirl's config keys (other frameworks: :mod:`tirl.diagnostics.advice`)
CHECK_FIRST: dict[str, str] = {
    "empty_batch": "resampling (filter.max_resample_rounds) and the logged minimum valid count — resample, "
    "do not loosen the rule; when `failed` equals `trajectories`, no episode ran at all: the env or its set-up "
    "failed (the `cause` names the stage and the key; each trajectory's `error`), not the filter",
    "rollout_faults": "the `cause`: the stage whose episodes failed and its key (rollout.init_timeout_s, "
    "rollout.run_timeout_s, rollout.eval_timeout_s, rollout.retries), the env's set-up and sandbox (each "
    "trajectory's `error` in trajectories.jsonl); for evaluation failures, info.eval.eval_failure of those "
    "trajectories: a judge limit too tight, or a policy that learned to break its judge",
}

_STAGE_KEY = {"init": "rollout.init_timeout_s", "run": "rollout.run_timeout_s", "eval": "rollout.eval_timeout_s"}
_END_TEXT = {
    "init_failed": "failed set-up on every attempt (the Initializer: env reset raised or timed out)",
    "timeout": "ran past rollout.run_timeout_s (the Agent Runner: raise it)",
    "error": "ended with an Agent Runner error (each trajectory's `error`)",
    "eval_failed": "failed evaluation on every attempt (the Evaluator: evaluate raised or timed out)",
    "cancelled": "were cancelled",
}


@dataclass(slots=True)
class Faults:
    """What the rollout lost over some steps of a log: counts summed over the steps that have them."""

    trajectories: float = 0.0
    failed: float = 0.0
    ends: dict[str, float] = field(default_factory=dict)  # failure termination reason -> episodes
    timeouts: dict[str, float] = field(default_factory=dict)  # stage -> attempts that timed out
    retries: dict[str, float] = field(default_factory=dict)  # stage -> attempts beyond each episode's first
    eval_failures: dict[str, float] = field(default_factory=dict)  # eval_failure reason -> episodes (reward 0)
    staged: bool = False  # whether the steps carry the stage counts (a tirl log that writes them)

    @property
    def eval_broken(self) -> float:
        """Episodes that an evaluation of their own scored 0 (in the update)."""
        return sum(self.eval_failures.values())

    @property
    def lost(self) -> float:
        """Failed episodes plus those scored 0 by a broken evaluation."""
        return self.failed + self.eval_broken


def _at(log: MetricsLog, name: str, i: int) -> float | None:
    values = log.get(name)
    return None if values is None else values[i]


def _add(into: dict[str, float], key: str, value: float | None) -> None:
    if value:
        into[key] = into.get(key, 0.0) + value


def step_faults(log: MetricsLog, i: int) -> Faults | None:
    """The faults of step ``i``, or None where the step has no trajectory and failed counts (or no trajectory)."""
    trajs, failed = _at(log, "trajectories", i), _at(log, "failed", i)
    if trajs is None or failed is None or trajs <= 0:
        return None
    out = Faults(trajectories=trajs, failed=failed, staged=_at(log, "eval_attempts", i) is not None)
    for why in FAILED_ENDS:
        _add(out.ends, why, _at(log, f"end_{why}", i))
    for stage in ("init", "run", "eval"):
        _add(out.timeouts, stage, _at(log, f"{stage}_timeouts", i))
        _add(out.retries, stage, _at(log, f"{stage}_retries", i))
    if out.staged:  # the rows of such a log hold the evaluation failures that occurred
        for key, value in log.rows[i].items():
            number = raw_number(value) if key.startswith(EVAL_FAILURE) else None
            if number is not None and 0 < number <= _MAX_COUNT:  # as the adapter reads a count: else missing
                _add(out.eval_failures, key.removeprefix(EVAL_FAILURE), number)
    return out


def total(parts: list[Faults]) -> Faults:
    """The sum of several steps' faults (``staged`` when every one is)."""
    out = Faults(staged=bool(parts) and all(p.staged for p in parts))
    for p in parts:
        out.trajectories += p.trajectories
        out.failed += p.failed
        for mine, theirs in ((out.ends, p.ends), (out.timeouts, p.timeouts), (out.retries, p.retries)):
            for key, value in theirs.items():
                _add(mine, key, value)
        for key, value in p.eval_failures.items():
            _add(out.eval_failures, key, value)
    return out


def _n(x: float) -> str:
    return f"{x:g}"


def _stage_attempts(f: Faults, stage: str) -> str:
    """``"12 eval attempts timed out (raise rollout.eval_timeout_s), 12 retried (rollout.retries)"``, or ``""``."""
    parts = []
    if f.timeouts.get(stage):
        parts.append(f"{_n(f.timeouts[stage])} {stage} attempts timed out (raise {_STAGE_KEY[stage]})")
    if f.retries.get(stage):
        parts.append(f"{_n(f.retries[stage])} retried (rollout.retries)")
    return ", ".join(parts)


def cause(f: Faults) -> str | None:
    """The cause in one line: the failed episodes by how they ended, the stage attempts, the evaluation failures.

    None where nothing failed, timed out or broke; a log without stage counts says so instead of a cause.
    """
    if not f.staged:
        if not f.failed:
            return None
        return (
            f"{_n(f.failed)} of {_n(f.trajectories)} trajectories failed; the log has no per-stage counts "
            "(rollout/termination/*, rollout/*_timeouts: a tirl log before they were written), so no stage is "
            "named: see each trajectory's `error`"
        )
    retried = {"init_failed": "init", "eval_failed": "eval"}  # the stages with rollout.retries
    parts = []
    for why in FAILED_ENDS:
        if f.ends.get(why):
            attempts = _stage_attempts(f, retried[why]) if why in retried else ""
            parts.append(f"{_n(f.ends[why])} {_END_TEXT[why]}" + (f": {attempts}" if attempts else ""))
    for why, stage in retried.items():
        if not f.ends.get(why) and (attempts := _stage_attempts(f, stage)):
            parts.append(f"{attempts}, and recovered")
    if f.eval_failures:
        reasons = ", ".join(f"{why} {_n(n)}" for why, n in sorted(f.eval_failures.items()))
        parts.append(
            f"{_n(f.eval_broken)} scored 0 by an evaluation that broke for a reason of its own ({reasons}; "
            "info.eval.eval_failure)"
        )
    if not parts:
        return None
    head = f"{_n(f.failed)} of {_n(f.trajectories)} trajectories failed" if f.failed else "no trajectory failed"
    return f"{head}: " + "; ".join(parts)


def _fault_evidence(f: Faults) -> dict[str, Any]:
    """The counts behind a finding (only those the log has) and the cause."""
    out: dict[str, Any] = {"trajectories": f.trajectories, "failed": f.failed}
    if f.staged:
        out.update({f"failed_{why}": n for why, n in f.ends.items()})
        out["eval_failures"] = f.eval_broken
    out["cause"] = cause(f)
    return out


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def empty_batch_findings(log: MetricsLog) -> list[Finding]:
    """One ``empty_batch`` finding per run of consecutive steps without a valid trajectory, with its cause."""
    valid, ratio = log.get("valid"), log.get("void_ratio")
    empty = []
    for i in range(len(log)):
        v = valid[i] if valid else None
        r = ratio[i] if ratio else None
        if (v is not None and v <= 0) or (v is None and r is not None and r >= 1.0):
            empty.append(i)
    out = []
    resampled, trajs, failed = log.get("resampled"), log.get("trajectories"), log.get("failed")
    for run in _runs(empty):
        steps = tuple(log.steps[i] for i in run)
        evidence: dict[str, Any] = {
            "valid": [valid[i] if valid else None for i in run],
            "trajectories": [trajs[i] for i in run] if trajs else None,
            "resampled": [resampled[i] for i in run] if resampled else None,
        }
        if failed and any(failed[i] for i in run):  # infrastructure failures, not void turns
            evidence["failed"] = [failed[i] for i in run]
        known = [f for i in run if (f := step_faults(log, i)) is not None]
        if (text := cause(total(known))) is not None:
            evidence["cause"] = text
        out.append(Finding("empty_batch", steps[0], steps, evidence))
    return out


def _faulty(f: Faults, th: FaultThresholds) -> bool:
    return f.lost >= th.min_count and f.lost >= th.share * f.trajectories


def fault_findings(log: MetricsLog, th: FaultThresholds) -> list[Finding]:
    """One ``rollout_faults`` finding per stretch of at least ``th.steps`` faulty steps (see the module)."""
    out: list[Finding] = []
    stretch: list[tuple[int, Faults]] = []

    def close() -> None:
        if len(stretch) >= th.steps:
            f = total([p for _, p in stretch])
            steps = tuple(log.steps[i] for i, _ in stretch)
            shares = [p.lost / p.trajectories for _, p in stretch]
            evidence = {
                "first_step": steps[0],
                "last_step": steps[-1],
                "steps_in_run": len(steps),
                "lost_share": round(f.lost / f.trajectories, 4),
                "lost_share_peak": round(max(shares), 4),
                **_fault_evidence(f),
            }
            out.append(Finding("rollout_faults", steps[0], steps, evidence))

    for i in range(len(log)):
        f = step_faults(log, i)
        if f is None:
            continue  # a step without the counts does not break the stretch
        if _faulty(f, th):
            stretch.append((i, f))
            continue
        close()
        stretch = []
    close()
    return out


def faults_not_checked(log: MetricsLog, th: FaultThresholds) -> dict[str, str]:
    """``rollout_faults`` -> why it could not run (``"only in part: …"`` where it ran in part); see the module."""
    known = [f for i in range(len(log)) if (f := step_faults(log, i)) is not None]
    if not known:
        return {
            "rollout_faults": "the log has no per-step trajectory and failed counts (rollout/trajectories, "
            "rollout/failed: tirl's own logs)"
        }
    if len(known) < th.steps:
        have = counted(len(known), "step")
        return {"rollout_faults": f"needs {th.steps} steps with trajectory and failed counts, the log has {have}"}
    if not all(f.staged for f in known):
        return {
            "rollout_faults": "only in part: the log has no stage counts (rollout/eval_attempts, "
            "rollout/termination/*, rollout/*_timeouts; a tirl log before they were written), so evaluation "
            "failures (rollout/eval_failure/*) are not counted and no cause is named"
        }
    return {}
