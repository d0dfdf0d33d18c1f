"""Verdicts on real tirl training logs (``data/README.md`` says how each was produced)."""

from __future__ import annotations

import statistics
from pathlib import Path

from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.training import diagnose_training

DATA = Path(__file__).parent / "data"


def test_real_collapsed_drop_run_is_void_drift_from_its_onset() -> None:
    log = load_metrics(DATA / "real_drop_lr3e-4_seed0.metrics.jsonl")
    share = log.get("void_ratio")
    assert share is not None and max(share[:15]) < 0.25 and min(share[-10:]) > 0.99  # the run really collapsed
    diag = diagnose_training(log)
    assert diag.verdict == "void_drift"
    drift = next(f for f in diag.findings if f.kind == "void_drift")
    assert 14 <= drift.step <= 17  # 34 % at step 17, 81 % at 18
    assert drift.evidence["void_share_end"] > 0.99 and drift.evidence["void_share_low"] < 0.1
    # all-void steps 20-24, 26-28 and 30 stay listed; the IS-ratio minima of this lr (0.03-0.05 at steps 2, 7
    # and 18 against a median near 0.5) are not spikes: no void_leak or late_filter outranks the drift
    rest = [(f.kind, f.step) for f in diag.findings if f is not drift]
    assert rest == [("empty_batch", 20), ("empty_batch", 26), ("empty_batch", 30)]


def test_real_drop_run_that_did_not_collapse_is_healthy() -> None:
    log = load_metrics(DATA / "real_drop_lr1e-4_seed1.metrics.jsonl")
    share = [s for s in log.get("void_ratio") or [] if s is not None]
    assert max(share) > 0.25 and min(share) == 0.0  # a burst and a quiet step: noise, not drift
    assert diagnose_training(log).verdict == "healthy"


def test_real_off_run_with_heavy_tailed_is_min_is_healthy() -> None:
    log = load_metrics(DATA / "real_off_lr3e-4_seed0.metrics.jsonl")
    is_min = [v for v in log.get("is_min") or [] if v is not None]
    assert min(is_min) < 0.01 and statistics.median(is_min) > 0.3  # minima far below the median: ordinary here
    assert diagnose_training(log).verdict == "healthy"
