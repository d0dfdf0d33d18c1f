"""`diagnose training` reads the rollout's fault counts (:mod:`tirl.diagnostics.rollout_faults`).

Covered: the keys are those the trainer's own ``rollout_metrics`` and ``RolloutStats.metrics`` write; the
``empty_batch`` finding names the stage, the count and the config key of the failures in its steps;
the ``rollout_faults`` finding (a sizeable share of the episodes failed or their evaluation broke for several
steps) through the real CLI, against a plain reference loop on seeded logs, and its false-finding rate on the
real healthy tirl logs and on seeded healthy logs with random failures; a log without the counts lists the rule
as not (fully) checked and its healthy line does not claim "no rollout faults".
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from diag_synth import BATCH, rollout_counts, tirl_log, write_jsonl

from tirl.cli import main
from tirl.diagnostics.adapters import FAILED_ENDS, load_metrics
from tirl.diagnostics.thresholds import FaultThresholds, TrainingThresholds
from tirl.diagnostics.training import diagnose_training
from tirl.rollout.batch_stats import RolloutStats
from tirl.trainer.trainer import rollout_metrics
from tirl.types import TerminationReason, Trajectory

DATA = Path(__file__).parent / "data"
REAL = sorted(DATA.glob("real_*.metrics.jsonl"))


def _diagnose(capsys: pytest.CaptureFixture[str], path: Path, *more: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["diagnose", "training", str(path), *more])
    return code, capsys.readouterr().out


def _findings(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code, out = _diagnose(capsys, path, "--json")
    assert code == 0
    return json.loads(out)


def test_the_failed_ends_read_are_the_failure_reasons() -> None:
    assert set(FAILED_ENDS) == {r.value for r in TerminationReason if r.is_failure}


def _trainer_row(step: int, ends: list[TerminationReason], broken: int = 0) -> dict[str, Any]:
    """A metrics row as the trainer writes it: its own ``rollout_metrics`` and ``RolloutStats.metrics`` keys."""
    sampled = [Trajectory(id=f"t{i}", messages=[], termination=end, reward=0.0) for i, end in enumerate(ends)]
    for t in sampled[:broken]:
        t.info["eval"] = {"eval_failure": "no_verdict"}
    stats = RolloutStats(episodes=len(ends), wall_s=1.0)
    stats.stages["eval"].timeouts = stats.stages["eval"].retries = ends.count(TerminationReason.EVAL_FAILED)
    stats.stages["eval"].attempts = len(ends)
    valid = sum(not t.failed for t in sampled)
    return {"step": step, **rollout_metrics(sampled), **stats.metrics(), "filter/valid_trajectories": valid}


def test_the_keys_the_trainer_writes_are_read(tmp_path: Path) -> None:
    """The counts come from the trainer's own functions, not from key names typed in a test."""
    ok, failed = TerminationReason.ANSWERED, TerminationReason.EVAL_FAILED
    rows = [_trainer_row(s, [ok] * 6 + [failed] * 2, broken=1) for s in range(1, 5)]
    rows += [_trainer_row(5, [failed] * 8)]
    for row in rows:
        row["filter/void_trajectories"] = 0
    findings = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))).findings
    assert [(f.kind, f.steps) for f in findings] == [("rollout_faults", (1, 2, 3, 4, 5)), ("empty_batch", (5,))]
    faults, empty = findings
    assert faults.evidence["failed_eval_failed"] == 16 and faults.evidence["eval_failures"] == 4
    assert "no_verdict 4" in faults.evidence["cause"]
    rows[0]["rollout/eval_failure/no_verdict"] = float("inf")  # not a count: missing, as the adapter reads counts
    path = write_jsonl(tmp_path / "inf.jsonl", rows)
    assert diagnose_training(load_metrics(path)).findings[0].evidence["eval_failures"] == 3
    assert empty.evidence["cause"] == (
        "8 of 8 trajectories failed: 8 failed evaluation on every attempt (the Evaluator: evaluate raised or "
        "timed out): 8 eval attempts timed out (raise rollout.eval_timeout_s), 8 retried (rollout.retries)"
    )


def _all_failed(rows: list[dict[str, Any]], step: int, counts: dict[str, Any]) -> list[dict[str, Any]]:
    """Step ``step``: every episode failed as ``counts`` says; no valid or void trajectory, no update (nulls)."""
    row = rows[step]
    row.update(counts)
    row.update({"rollout/trajectories": counts["rollout/failed"], "filter/valid_trajectories": 0})
    row.update({"filter/void_trajectories": 0, "train/is_ratio_max": None, "train/is_ratio_min": None})
    return rows


def test_an_empty_batch_of_timed_out_evaluations_names_the_stage_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _all_failed(tirl_log(seed=2), 80, rollout_counts(None, eval_failed=BATCH))
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    got = _findings(capsys, path)
    (empty,) = [f for f in got["findings"] if f["kind"] == "empty_batch"]
    assert empty["steps"] == [80] and empty["evidence"]["failed"] == [BATCH]
    assert empty["evidence"]["cause"] == (
        "64 of 64 trajectories failed: 64 failed evaluation on every attempt (the Evaluator: evaluate raised or "
        "timed out): 128 eval attempts timed out (raise rollout.eval_timeout_s), 64 retried (rollout.retries)"
    )
    _, text = _diagnose(capsys, path)
    assert "cause 64 of 64 trajectories failed" in " ".join(text.split()) and "rollout.eval_timeout_s" in text


def test_an_empty_batch_of_runner_timeouts_names_run_timeout(tmp_path: Path) -> None:
    counts = rollout_counts(None)
    counts.update({"rollout/failed": 40, "rollout/termination/timeout": 30.0, "rollout/termination/init_failed": 10.0})
    counts.update({"rollout/run_timeouts": 30.0, "rollout/init_timeouts": 20.0, "rollout/init_retries": 10.0})
    rows = _all_failed(tirl_log(seed=2), 60, counts)
    (empty,) = [f for f in diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))).findings]
    cause = empty.evidence["cause"]
    assert cause.startswith("40 of 40 trajectories failed: 10 failed set-up on every attempt")
    assert "20 init attempts timed out (raise rollout.init_timeout_s), 10 retried (rollout.retries)" in cause
    assert "30 ran past rollout.run_timeout_s (the Agent Runner: raise it)" in cause


def test_an_all_void_empty_batch_has_no_failure_cause(tmp_path: Path) -> None:
    rows = tirl_log(seed=1, inject="empty_batch", at=(70,))
    (empty,) = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))).findings
    assert empty.kind == "empty_batch" and "cause" not in empty.evidence and "failed" not in empty.evidence


def test_sustained_evaluation_failures_are_a_finding_with_their_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", tirl_log(seed=4, inject="rollout_faults", at=(90,)))
    got = _findings(capsys, path)
    assert got["verdict"] == "rollout_faults"
    (found,) = got["findings"]
    assert found["steps"] == [90, 91, 92, 93, 94]
    ev = found["evidence"]
    assert ev["failed"] == 100 and ev["failed_eval_failed"] == 100 and ev["eval_failures"] == 20
    assert ev["lost_share"] == pytest.approx(120 / 420, abs=1e-4)
    assert "raise rollout.eval_timeout_s" in ev["cause"] and "timed_out 20" in ev["cause"]
    code, text = _diagnose(capsys, path)
    assert code == 0 and "verdict rollout_faults" in text


def reference_fault_steps(rows: list[dict[str, Any]], th: FaultThresholds) -> list[list[int]]:
    """The steps of each ``rollout_faults`` finding, by a plain loop over the raw rows."""
    found, stretch = [], []
    for row in rows:
        n, failed = row.get("rollout/trajectories"), row.get("rollout/failed")
        if n is None or failed is None or n <= 0:
            continue
        lost = failed + sum(v for k, v in row.items() if k.startswith("rollout/eval_failure/"))
        if lost >= th.min_count and lost >= th.share * n:
            stretch.append(row["step"])
        else:
            if len(stretch) >= th.steps:
                found.append(stretch)
            stretch = []
    if len(stretch) >= th.steps:
        found.append(stretch)
    return found


@pytest.mark.parametrize("seed", range(6))
def test_the_rule_matches_a_plain_reference_loop(tmp_path: Path, seed: int) -> None:
    """Bursts of failures of random size and length, some steps without the counts (skipped, not breaking)."""
    rng = random.Random(seed)
    rows = tirl_log(n=120, seed=seed, faults=0.02)
    burst = False
    for row in rows:
        burst = burst != (rng.random() < 0.2)  # bursts of a few steps
        if burst:  # a burst step: up to 14 failed, and at times 5 broken evaluations (in the update)
            extra = rollout_counts(None, eval_failed=rng.randint(0, 14), eval_broken=rng.choice((0, 0, 5)))
            extra["rollout/trajectories"] = BATCH + extra["rollout/failed"]
            row.update(extra)
        if rng.random() < 0.05:
            row["rollout/failed"] = None
    th = TrainingThresholds()
    diag = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)), th)
    got = [list(f.steps) for f in diag.findings if f.kind == "rollout_faults"]
    assert got == reference_fault_steps(rows, th.faults)
    assert got  # the bursts made at least one finding: the comparison is not of two empty lists


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_healthy_logs_have_no_rollout_faults_and_say_it_ran_in_part(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tirl's real 30-step logs carry rollout/failed (0 at every step) but not the stage counts they predate."""
    got = _findings(capsys, path)
    assert all(f["kind"] != "rollout_faults" for f in got["findings"])
    assert got["not_checked"]["rollout_faults"].startswith("only in part: the log has no stage counts")


@pytest.mark.parametrize("seed", range(4))
def test_healthy_logs_with_random_failures_have_no_finding(tmp_path: Path, seed: int) -> None:
    """2 % of the episodes fail at random (a flaky sandbox): a shrunk batch now and then, never a finding."""
    rows = tirl_log(seed=20_000 + seed, faults=0.02)
    assert sum(r["rollout/failed"] for r in rows) > 100  # the noise is there
    diag = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert diag.findings == () and "rollout_faults" not in diag.not_checked


def test_one_failure_a_step_in_a_small_batch_is_no_finding(tmp_path: Path) -> None:
    """8 episodes a step, one of them failing every step (12.5 %): under min_count, not infrastructure trouble."""
    rows = tirl_log(n=40, seed=5)
    for row in rows:
        row.update({"rollout/trajectories": 8, "rollout/failed": 1, "rollout/termination/timeout": 1.0})
    diag = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert all(f.kind != "rollout_faults" for f in diag.findings)
    for row in rows[10:13]:
        row["rollout/failed"] = 2  # 25 % for three steps: a finding
    diag = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert [f.steps for f in diag.findings if f.kind == "rollout_faults"] == [(10, 11, 12)]


def test_a_log_without_the_counts_does_not_claim_no_rollout_faults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep = ("rollout/failed", "rollout/termination/", "rollout/eval_failure/", "rollout/init_", "rollout/run_")
    rows = [
        {k: v for k, v in r.items() if not k.startswith((*keep, "rollout/eval_"))} for r in tirl_log(seed=3, faults=0.5)
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    got = _findings(capsys, path)
    assert got["verdict"] == "healthy"
    assert got["not_checked"]["rollout_faults"].startswith("the log has no per-step trajectory and failed counts")
    _, text = _diagnose(capsys, path)
    line = " ".join(text.split())
    assert "no rollout faults" not in line and "rollout_faults (the log has no per-step" in line
    short = write_jsonl(tmp_path / "short.jsonl", tirl_log(n=2, seed=3))
    assert _findings(capsys, short)["not_checked"]["rollout_faults"] == (
        "needs 3 steps with trajectory and failed counts, the log has 2 steps"
    )
