"""Entropy collapse and KL blow-up (:mod:`tirl.diagnostics.entropy_kl`), and the two IS-ratio gaps beside them.

Covered: each rule against a plain reference loop over the rows (seeded logs, collapses and blow-ups of several
sizes and places); real files — a synthetic metrics.jsonl with a collapse / a blow-up gives the finding with its
steps, value and fix in the text, ``--json``, the HTML report and the bundle; tirl's three real 30-step logs give
neither; a log without the keys (or with a KL of 0 at every step) lists the rule in ``not_checked``; a sustained
IS-ratio blow-up is one finding with its step range; an early fall of the IS-ratio min that stays down is listed
as not checked. Not covered here: the real `tirl train` run (tests/cli_contract/test_cli_train_verdict.py).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from diag_synth import as_verl, tirl_log, write_jsonl

from tirl.cli import main
from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.advice import check_first
from tirl.diagnostics.report import render_report
from tirl.diagnostics.thresholds import PolicyThresholds, TrainingThresholds
from tirl.diagnostics.training import diagnose_training

DATA = Path(__file__).parent / "data"
TH = TrainingThresholds()


def _diag(tmp_path: Path, rows: list[dict[str, Any]], name: str = "m.jsonl") -> Any:
    return diagnose_training(load_metrics(write_jsonl(tmp_path / name, rows)))


def _kinds(diag: Any, kind: str) -> list[Any]:
    return [f for f in diag.findings if f.kind == kind]


# --- plain references: one loop over the rows each, no helper of the module under test -------------------------


def reference_collapses(rows: list[dict[str, Any]], th: TrainingThresholds) -> list[tuple[int, list[int]]]:
    """(onset step, steps) of each entropy collapse, by the rule as docs/diagnostics.md states it."""
    p: PolicyThresholds = th.policy
    ent = [r.get("train/entropy") for r in rows]
    rew = [r.get("reward/mean") for r in rows]
    steps = [r["step"] for r in rows]
    out: list[tuple[int, list[int]]] = []
    i = 1
    while i < len(rows):
        e = ent[i]
        if e is None:
            i += 1
            continue
        before = [(j, ent[j]) for j in range(max(0, i - th.window), i) if ent[j] is not None]
        early = [(j, ent[j]) for j in range(i) if ent[j] is not None][: p.early_steps]
        ref, bar = None, None
        if before and statistics.median(v for _, v in before) > 0:
            level = statistics.median(v for _, v in before)
            if e <= (1 - p.entropy_drop) * level:
                ref, bar = before, (1 - p.entropy_drop) * level
        if ref is None and early and e <= p.entropy_floor:
            level = statistics.median(v for _, v in early)
            if e <= (1 - p.entropy_drop) * level:
                ref, bar = early, min(p.entropy_floor, (1 - p.entropy_drop) * level)
        later = [ent[j] for j in range(i + 1, len(rows)) if ent[j] is not None][: p.sustain - 1]
        if ref is None or bar is None or not later or statistics.median([e, *later]) > bar:
            i += 1
            continue
        end = i
        while end + 1 < len(rows) and (ent[end + 1] is None or ent[end + 1] <= bar):
            end += 1
        known = [j for j in range(i, end + 1) if ent[j] is not None]
        r_ref = [rew[j] for j, _ in ref if rew[j] is not None]
        r_now = [rew[j] for j in known[: p.sustain] if rew[j] is not None]
        rose = r_ref and r_now and statistics.median(r_now) - statistics.median(r_ref) >= p.reward_rise
        if not rose:
            out.append((steps[i], [steps[j] for j in known]))
        i = end + 1
    return out


def reference_blowups(rows: list[dict[str, Any]], th: TrainingThresholds) -> list[list[int]]:
    """The steps of each KL blow-up (runs of flagged steps with no known KL between them)."""
    p = th.policy
    kl = [r.get("train/kl") for r in rows]
    if not any(kl):
        return []
    flagged = []
    for i, v in enumerate(kl):
        if v is None:
            continue
        before = [kl[j] for j in range(max(0, i - th.window), i) if kl[j] is not None]
        med = statistics.median(before) if before else None
        if v >= p.kl_max or (med is not None and v >= p.kl_jump_floor and v >= p.kl_factor * max(med, 0.0)):
            flagged.append(i)
    runs: list[list[int]] = []
    for i in flagged:
        if runs and all(kl[j] is None for j in range(runs[-1][-1] + 1, i)):
            runs[-1].append(i)
        else:
            runs.append([i])
    return [[rows[i]["step"] for i in run] for run in runs]


def _collapse(seed: int, at: int, factor: float, reward_gain: float = 0.0, n: int = 120) -> list[dict[str, Any]]:
    """A seeded healthy log whose entropy drops to ``factor`` of itself from step ``at`` on (reward + gain)."""
    rows = tirl_log(n=n, seed=seed)
    for r in rows[at:]:
        if r["train/entropy"] is not None:
            r["train/entropy"] *= factor
            r["reward/mean"] += reward_gain
    return rows


def _blowup(seed: int, at: int, value: float, length: int, n: int = 120) -> list[dict[str, Any]]:
    rows = tirl_log(n=n, seed=seed)
    for r in rows[at : at + length]:
        if r["train/kl"] is not None:
            r["train/kl"] = value
    return rows


CASES = [(seed, at, factor) for seed in (0, 1, 2) for at in (2, 5, 40, 100) for factor in (0.5, 0.15, 0.02)]


@pytest.mark.parametrize(("seed", "at", "factor"), CASES)
def test_entropy_collapse_matches_the_reference_loop(tmp_path: Path, seed: int, at: int, factor: float) -> None:
    rows = _collapse(seed, at, factor)
    got = [(f.step, list(f.steps)) for f in _kinds(_diag(tmp_path, rows), "entropy_collapse")]
    assert got == reference_collapses(rows, TH)
    assert bool(got) == (factor <= 0.2), got  # a fall to 15 % or 2 % is a collapse; to 50 % is not


@pytest.mark.parametrize(("seed", "at", "value", "length"), [(s, a, v, n) for s in (0, 3) for a in (3, 60)
                                                              for v in (0.05, 0.3, 2.5) for n in (1, 6)])  # fmt: skip
def test_kl_blowup_matches_the_reference_loop(tmp_path: Path, seed: int, at: int, value: float, length: int) -> None:
    rows = _blowup(seed, at, value, length)
    got = [list(f.steps) for f in _kinds(_diag(tmp_path, rows), "kl_blowup")]
    assert got == reference_blowups(rows, TH)
    assert bool(got) == (value >= 0.3), got  # 0.05 is neither 10x a jump above the floor nor the level


def test_a_collapse_in_a_few_steps_is_found_at_its_onset_with_value_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _collapse(seed=0, at=5, factor=0.02)
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    capsys.readouterr()
    assert main(["diagnose", "training", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in got["findings"] if f["kind"] == "entropy_collapse"]
    assert got["verdict"] == "entropy_collapse" and finding["step"] == 5
    ev = finding["evidence"]
    assert ev["entropy"] == round(rows[5]["train/entropy"], 4) and ev["test"] == "fast"
    assert ev["fall"] >= 0.97 and ev["reference_steps"] == [0, 4]
    assert main(["diagnose", "training", str(path)]) == 0
    text = capsys.readouterr().out
    assert "entropy_collapse" in text and "algo.clip_high" in text and "algo.lr" in text


def test_a_fall_the_reward_matches_is_sharpening_not_collapse(tmp_path: Path) -> None:
    rows = _collapse(seed=0, at=50, factor=0.1, reward_gain=0.3)
    assert _kinds(_diag(tmp_path, rows), "entropy_collapse") == []
    assert reference_collapses(rows, TH) == []


def test_a_slow_slide_to_the_floor_is_found_by_the_early_level(tmp_path: Path) -> None:
    """Entropy decaying 3 % a step (never 80 % within 20 steps) from 0.9: at 0.01 nats it is near-deterministic."""
    rows = tirl_log(n=200, seed=0)
    for r in rows:
        if r["train/entropy"] is not None:
            r["train/entropy"] = 0.9 * math.exp(-0.03 * r["step"])
            r["reward/mean"] = 0.3
    (finding,) = _kinds(_diag(tmp_path, rows), "entropy_collapse")
    assert finding.evidence["test"] == "floor" and finding.step == math.ceil(math.log(90) / 0.03)
    assert [(finding.step, list(finding.steps))] == reference_collapses(rows, TH)


def test_a_kl_blowup_names_steps_value_and_fix_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _blowup(seed=0, at=60, value=2.5, length=6)
    run = tmp_path / "run"
    run.mkdir()
    path = write_jsonl(run / "metrics.jsonl", rows)
    diag = diagnose_training(load_metrics(path))
    (finding,) = _kinds(diag, "kl_blowup")
    assert finding.steps == tuple(s for s in range(60, 66) if rows[s]["train/kl"] is not None)
    assert finding.evidence["kl"] == 2.5 and finding.evidence["test"] == "level"
    capsys.readouterr()
    assert main(["diagnose", "training", str(path)]) == 0
    text = capsys.readouterr().out
    assert "verdict kl_blowup" in text and "kl 2.5" in text and "algo.kl_coef" in text
    page = render_report(run)
    assert "kl_blowup" in page and "raise algo.kl_coef" in page
    bundle = tmp_path / "b.md"
    assert main(["diagnose", "training", str(path), "--bundle", str(bundle)]) == 0
    text = bundle.read_text(encoding="utf-8")
    assert "## Finding 1: kl_blowup at step 60" in text and "| KL to ref |" in text and "| **60** ←" in text


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.metrics.jsonl")))
def test_the_real_tirl_runs_have_neither(name: str) -> None:
    """Entropy 0.08 -> 0.02 nats over 30 steps while the reward rose: sharpening; train/kl is 0 (kl_coef=0)."""
    diag = diagnose_training(load_metrics(DATA / name))
    assert not [f for f in diag.findings if f.kind in ("entropy_collapse", "kl_blowup")]
    assert "entropy_collapse" not in diag.not_checked
    assert diag.not_checked["kl_blowup"].startswith("the KL to the reference is 0 at every step: not measured")


def test_missing_keys_are_listed_as_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tirl_log(n=60, seed=2)
    for r in rows:
        del r["train/entropy"], r["train/kl"]
    path = write_jsonl(tmp_path / "none.jsonl", rows)
    capsys.readouterr()
    assert main(["diagnose", "training", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["not_checked"]["entropy_collapse"] == "the log has no policy entropy"
    assert got["not_checked"]["kl_blowup"] == "the log has no KL to the reference policy"
    assert main(["diagnose", "training", str(path)]) == 0
    line = " ".join(capsys.readouterr().out.split())
    assert "no entropy collapse" not in line and "no KL blow-up" not in line
    assert "entropy_collapse (the log has no policy entropy)" in line
    for r in rows:
        r["train/kl"] = 0.0
        del r["reward/mean"]
    rows[0]["train/entropy"] = 0.5
    rows[1]["train/entropy"] = 0.5
    diag = _diag(tmp_path, rows, "zeros.jsonl")
    assert "not measured" in diag.not_checked["kl_blowup"]
    assert diag.not_checked["entropy_collapse"].startswith("only in part: the log has no reward")


def test_the_verl_keys_carry_the_kl(tmp_path: Path) -> None:
    rows = _blowup(seed=1, at=40, value=3.0, length=2)
    diag = _diag(tmp_path, as_verl(rows), "verl.jsonl")
    assert diag.format == "verl" and [f.steps for f in _kinds(diag, "kl_blowup")] == [(40, 41)]
    assert "kl_blowup" not in diag.not_checked and "entropy_collapse" not in diag.not_checked
    for fmt, key in (("verl", "kl_loss_coef"), ("trl", "beta"), ("skyrl", "trainer.algorithm.kl_loss_coef")):
        advice = check_first("kl_blowup", fmt)  # in the words of the framework that wrote the log
        assert key in advice and "algo.kl_coef" not in advice, (fmt, advice)
    assert "clip_ratio_high" in check_first("entropy_collapse", "verl")


# --- the two IS-ratio gaps --------------------------------------------------------------------------------------


def test_a_sustained_is_ratio_blowup_is_one_finding_with_its_step_range(tmp_path: Path) -> None:
    rows = tirl_log(seed=0)
    run = [s for s in range(120, 131) if rows[s]["train/is_ratio_max"] is not None]
    for s in run:
        rows[s]["train/is_ratio_max"] = 60.0 + s
        rows[s]["rollout/max_seq_len"] = 4096
    diag = _diag(tmp_path, rows)
    spikes = [f for f in diag.findings if f.kind in ("void_leak", "late_filter")]
    assert len(spikes) == 1, [(f.kind, f.steps) for f in spikes]  # was one finding per step
    (f,) = spikes
    assert f.kind == "void_leak" and f.step == 120 and f.steps[-1] == f.evidence["last_step"]
    assert f.evidence["steps_in_run"] == len(f.steps) >= 2 and f.evidence["is_ratio_max_peak"] >= 60 + f.steps[-1]


def test_an_early_fall_of_the_is_ratio_min_is_listed_as_not_checked(tmp_path: Path) -> None:
    rows = [r for r in tirl_log(n=40, seed=1) if r["train/is_ratio_min"] is not None][:20]
    for r in rows[3:]:
        r["train/is_ratio_min"] *= 0.05  # 0.6 -> 0.03 from the 4th step on, too early for a rolling baseline
    diag = _diag(tmp_path, rows)
    why = diag.not_checked["void_leak"]
    assert "the IS-ratio min fell" in why and f"at step {rows[3]['step']}" in why and "stayed down" in why
    assert "IS-ratio fall at step" in diag.not_checked["late_filter"]
    calm = _diag(tmp_path, [r for r in tirl_log(n=40, seed=1) if r["train/is_ratio_min"] is not None][:20], "c.jsonl")
    assert "IS-ratio min fell" not in calm.not_checked.get("void_leak", "")
