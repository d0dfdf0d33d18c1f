"""Diagnostics: verdicts from training logs and pipeline traces, the trajectory audit, the HTML report.

* :mod:`tirl.diagnostics.training` — ``void_leak`` / ``void_drift`` / ``late_filter`` / ``detector_inactive`` /
  ``empty_batch`` (the drift test itself: :mod:`tirl.diagnostics.drift`), ``kl_blowup`` / ``entropy_collapse``
  (:mod:`tirl.diagnostics.entropy_kl`); each a :class:`~tirl.diagnostics.finding.Finding`
* :mod:`tirl.diagnostics.adapters` / :mod:`tirl.diagnostics.wandb_csv` — tirl, verl, SimpleTIR logs; wandb exports
  (:mod:`tirl.diagnostics.log_rows`: their rows checked and joined on the step)
* :mod:`tirl.diagnostics.pipeline` — ``initializer`` / ``runner`` / ``evaluator`` / ``overall`` / ``starved``
  (``cannot_judge`` when the trace cannot support a verdict; ``not_checked``: the rules the trace did not let
  run in full), each queue judged against its capacity
* :mod:`tirl.diagnostics.thresholds` — the tuning of the training, drift and pipeline rules, in one place
* :mod:`tirl.diagnostics.audit` — void reasons, detector-too-eager rate, turn/length/tool-error stats
* :mod:`tirl.diagnostics.report` — :func:`write_report` (self-contained HTML)
* :mod:`tirl.diagnostics.bundle` / :mod:`tirl.diagnostics.review` — evidence bundle, LLM second opinion

Submodules are imported on use (the report pulls in matplotlib, the review the openai client).
"""

from __future__ import annotations

from pathlib import Path


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (see :func:`tirl.diagnostics.report.write_report`)."""
    from tirl.diagnostics.report import write_report as _write

    return _write(run_dir, out)


__all__ = ["write_report"]
