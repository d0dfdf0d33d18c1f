"""What a `tirl diagnose training` verdict says it did not check (:mod:`tirl.diagnostics.coverage`), and its text.

Covered: IS-ratio spikes that matched no row of the table are named (the healthy line said "no IS-ratio
spike"), the rules a short log (1, 5, … steps) or a log without counts does not let run (against a plain
reference of the step counts), "1 step" in the header, the step count and an ``Infinity`` IS ratio in
``--json`` (``null``, not 1.7976931348623157e+308) and in the bundle.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from diag_synth import as_verl, tirl_log, write_jsonl

from tirl.cli import main
from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.thresholds import TrainingThresholds
from tirl.diagnostics.training import diagnose_training


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[str, str]:
    capsys.readouterr()
    assert main(["diagnose", "training", *map(str, argv)]) == 0
    got = capsys.readouterr()
    return got.out, got.err


def _line(out: str) -> str:
    """The healthy line below the header, unwrapped."""
    return " ".join(out.split("\n", 1)[1].split())


def test_a_spike_that_matched_no_row_is_named_not_denied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tirl_log(seed=0)
    rows[120]["train/is_ratio_max"] = 33.0  # no longest trajectory, no filter drop in that step
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    out, _ = _run(capsys, path)
    line = _line(out)
    assert "verdict healthy" in out and "no IS-ratio spike" not in line
    assert "an IS-ratio spike at step 120 matched no row of the table" in line and "no empty batch" in line
    got = json.loads(_run(capsys, path, "--json")[0])
    assert got["verdict"] == "healthy" and got["unmatched_is_spikes"] == [120] and got["findings"] == []


def test_a_healthy_log_without_a_spike_keeps_the_plain_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, write_jsonl(tmp_path / "m.jsonl", tirl_log(seed=0)))
    assert _line(out) == (
        "No symptom of the void-turn table: no IS-ratio spike, no empty batch, no rollout faults; no entropy "
        "collapse, no KL blow-up."
    )


def reference_not_checked(n: int, th: TrainingThresholds) -> set[str]:
    """The kinds a tirl log of ``n`` steps (every value present) cannot fully check, by the thresholds alone."""
    kinds = set()
    if n <= th.min_points:  # no rolling baseline: early-step IS rule only, no filter-drop test
        kinds |= {"void_leak", "late_filter"}
    if n < th.inactive_steps:
        kinds.add("detector_inactive")
    if n < 2 * th.drift.min_window + 1:
        kinds.add("void_drift")
    if n < 2:  # one entropy value: no fall to see
        kinds.add("entropy_collapse")
    if n < th.faults.steps:  # fewer steps than a stretch of faulty ones
        kinds.add("rollout_faults")
    return kinds


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 10, 11, 24, 25, 30])
def test_the_rules_a_short_log_cannot_run_match_a_reference(tmp_path: Path, n: int) -> None:
    rows = [r for r in tirl_log(n=40, seed=1) if all(v is not None for v in r.values())][:n]
    diag = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert diag.steps == n
    assert set(diag.not_checked) == reference_not_checked(n, TrainingThresholds()), diag.not_checked


def test_a_short_log_says_what_it_could_not_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [r for r in tirl_log(n=20, seed=1) if r["train/is_ratio_max"] is not None]
    one = write_jsonl(tmp_path / "one.jsonl", rows[:1])
    out, _ = _run(capsys, one)
    assert "(tirl format, 1 step): verdict healthy" in out and ", 1 steps" not in out
    line = _line(out)
    assert (
        "void_leak (only by the early-step rule" in line
        and "needs 9 steps with an IS ratio, the log has 1 step" in line
    )
    assert "late_filter (the filter-drop test needs 9 steps" in line and "void_drift (needs 11 steps" in line
    got = json.loads(_run(capsys, write_jsonl(tmp_path / "five.jsonl", rows[:5]), "--json")[0])
    assert got["steps"] == 5 and got["verdict"] == "healthy"
    assert set(got["not_checked"]) == {"void_leak", "late_filter", "detector_inactive", "void_drift"}
    assert got["not_checked"]["detector_inactive"] == "needs 25 steps, the log has 5 steps"


def test_a_log_without_counts_does_not_claim_no_empty_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verl = write_jsonl(tmp_path / "verl.jsonl", as_verl(tirl_log(seed=3)))  # verl: no void filter, no counts
    out, _ = _run(capsys, verl)
    line = _line(out)
    assert "no empty batch" not in line and "empty_batch (the log has no valid count or void share)" in line
    got = json.loads(_run(capsys, verl, "--json")[0])
    expected = {"late_filter", "empty_batch", "detector_inactive", "void_drift", "rollout_faults"}
    assert set(got["not_checked"]) == expected


def _inf_spike() -> list[dict[str, Any]]:
    rows = tirl_log(seed=0)
    rows[120]["train/is_ratio_max"] = math.inf
    rows[120]["rollout/max_seq_len"] = 4096
    return rows


def test_an_infinite_is_ratio_is_null_in_json_and_inf_in_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _inf_spike()), encoding="utf-8")  # writes Infinity
    out, _ = _run(capsys, path, "--json")
    assert "e+308" not in out and "Infinity" not in out
    got = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))
    (finding,) = got["findings"]
    assert finding["kind"] == "void_leak" and finding["evidence"]["is_ratio_max"] is None
    text, _ = _run(capsys, path)
    assert "is_ratio_max inf" in text
    bundle = tmp_path / "b.md"
    _run(capsys, path, "--bundle", bundle)
    written = bundle.read_text(encoding="utf-8")
    assert "e+308" not in written and "Infinity" not in written and '"is_ratio_max": null' in written


def test_a_spike_in_a_short_log_with_counts_does_not_say_the_log_has_none(tmp_path: Path) -> None:
    rows = [r for r in tirl_log(n=20, seed=1) if all(v is not None for v in r.values())][:6]
    rows[3]["train/is_ratio_max"], rows[3]["rollout/max_seq_len"] = 40.0, 4096  # the early-step rule's spike
    (finding,) = diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))).findings
    assert finding.kind == "void_leak"
    assert finding.evidence["note_valid"].startswith("too few steps with void/valid counts")  # said "no counts"
