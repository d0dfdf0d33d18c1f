"""One finding of ``tirl diagnose training``, and the merge of a finding that repeats over consecutive steps.

A :class:`Finding` names its kind, its first step, every step it covers and the numbers behind it; the rules
that make findings live in :mod:`tirl.diagnostics.training` (the void-turn symptoms) and
:mod:`tirl.diagnostics.entropy_kl` (entropy collapse, KL blow-up). :func:`merge_runs` turns the per-step
findings of a sustained symptom (an IS ratio that jumps and stays up gives a ``void_leak`` at each step until the
rolling baseline catches up) into one finding with the step range: the evidence of its first step, its last
step, how many steps it spans and the peak of the IS-ratio max over them.

Not covered: merging across a gap (a step without the finding in between starts a new one) or across kinds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """One symptom: its kind, the step(s) and the numbers behind it."""

    kind: str
    step: int | None
    steps: tuple[int, ...]
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: ``{"kind", "step", "steps", "evidence"}``."""
        return {"kind": self.kind, "step": self.step, "steps": list(self.steps), "evidence": self.evidence}


def _peak(run: list[Finding], key: str) -> float | None:
    values = [v for f in run if isinstance(v := f.evidence.get(key), int | float) and not math.isnan(v)]
    return max(values) if values else None


def merge_runs(findings: Sequence[Finding], log_steps: Sequence[int]) -> list[Finding]:
    """One finding per run of single-step findings of one kind at consecutive steps of the log, in step order.

    ``log_steps``: the log's steps in order (consecutive means adjacent there, so a log that skips steps, e.g.
    TRL's ``logging_steps``, still merges). A run of one stays as it is. A merged finding keeps the evidence of
    its first step and adds ``last_step``, ``steps_in_run`` and ``is_ratio_max_peak`` (when the steps have an
    IS-ratio max). Findings that already span several steps are kept as they are.
    """
    index = {step: i for i, step in enumerate(log_steps)}
    single = [f for f in findings if len(f.steps) == 1 and f.step == f.steps[0]]
    single.sort(key=lambda f: index[f.steps[0]])
    runs: list[list[Finding]] = []
    for f in single:
        last = runs[-1][-1] if runs else None
        if last is not None and last.kind == f.kind and index[f.steps[0]] == index[last.steps[0]] + 1:
            runs[-1].append(f)
        else:
            runs.append([f])
    out = [f for f in findings if f not in single]
    for run in runs:
        if len(run) == 1:
            out.append(run[0])
            continue
        first = run[0]
        evidence = {**first.evidence, "last_step": run[-1].step, "steps_in_run": len(run)}
        peak = _peak(run, "is_ratio_max")
        if peak is not None:
            evidence["is_ratio_max_peak"] = peak
        out.append(Finding(first.kind, first.step, tuple(f.steps[0] for f in run), evidence))
    return out
