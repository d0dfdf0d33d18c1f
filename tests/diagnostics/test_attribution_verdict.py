"""`tirl diagnose training` on the attribution keys: spikes in void turns vs spikes in valid turns.

Fixtures: the seeded noisy tirl log of :mod:`diag_synth` with two injected IS-ratio/grad spikes (steps 20 and
40), plus the ``void/*`` keys: a void token share near 0.06 on every step, and on the spike steps spike
shares that put the outliers in void rows, in valid rows, or in proportion (inconclusive). The verl variant
has only the generator-side keys tirl's verl patch writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from diag_synth import as_verl, tirl_log, write_jsonl

from tirl.cli import main
from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.thresholds import AttributionThresholds, TrainingThresholds
from tirl.diagnostics.training import diagnose_training

SPIKES = (20, 40)


def _with_attribution(
    rows: list[dict[str, Any]], spike_share: float, at: tuple[int, ...] = SPIKES, seed: int = 0
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    for row in rows:
        base = 0.06 + rng.uniform(-0.01, 0.01)
        spike = row["step"] in at
        share = spike_share if spike else base + rng.uniform(-0.02, 0.02)
        row.update(
            {
                "void/share_trajectories": base * 0.8,
                "void/share_tokens": base,
                "void/share_lowprob_tokens": share,
                "void/share_ratio_outliers": share if spike else None,  # no outlier token on a quiet step
                "void/share_ratio_dual_clip": share if spike else None,
                "void/share_grad_norm": share,
                "void/min_logprob_void": -9.0 if spike_share > 0.5 and spike else -4.0,
                "void/min_logprob_valid": -3.5,
            }
        )
    return rows


def _diagnose(tmp_path: Path, rows: list[dict[str, Any]], th: TrainingThresholds | None = None):  # type: ignore[no-untyped-def]
    return diagnose_training(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)), th)


def _attribution(diag):  # type: ignore[no-untyped-def]
    return [f for f in diag.findings if f.kind.startswith("spikes_in")]


def test_spikes_carried_by_void_rows_are_the_seeds_disease(tmp_path: Path) -> None:
    diag = _diagnose(tmp_path, _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.7))
    (f,) = _attribution(diag)
    assert f.kind == "spikes_in_void" and f.steps == SPIKES
    assert f.evidence["void_spike_share"] == pytest.approx(0.7) and f.evidence["lift"] > 5
    assert f.evidence["void_token_share"] == pytest.approx(0.06, abs=0.011)


def test_spikes_in_valid_rows_say_the_filter_cannot_help(tmp_path: Path) -> None:
    diag = _diagnose(tmp_path, _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.01))
    (f,) = _attribution(diag)
    assert f.kind == "spikes_in_valid" and f.steps == SPIKES
    from tirl.diagnostics.training import CHECK_FIRST

    assert "learning rate" in CHECK_FIRST[f.kind] and "mismatch" in CHECK_FIRST[f.kind]


def test_a_seed_verdict_at_a_spike_step_carries_that_steps_shares(tmp_path: Path) -> None:
    """The seed's void_leak infers a void turn in the loss; the attribution keys say where the spike sat."""
    diag = _diagnose(tmp_path, _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.01))
    leaks = [f for f in diag.findings if f.kind == "void_leak"]
    assert [f.step for f in leaks] == list(SPIKES)
    assert all(f.evidence["void_spike_share"] == 0.01 and f.evidence["void_token_share"] > 0.04 for f in leaks)


def test_spikes_in_proportion_to_tokens_give_no_attribution_verdict(tmp_path: Path) -> None:
    rows = _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.09)  # 1.5 x 0.06, below the margin
    assert _attribution(_diagnose(tmp_path, rows)) == []


def test_thresholds_move_the_verdict(tmp_path: Path) -> None:
    rows = _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.2)  # +0.14 over 0.06: under 0.15
    assert _attribution(_diagnose(tmp_path, rows)) == []
    th = TrainingThresholds(attribution=AttributionThresholds(margin=0.1))
    assert [f.kind for f in _attribution(_diagnose(tmp_path, rows, th))] == ["spikes_in_void"]


def test_no_spike_step_and_no_keys_give_no_attribution_verdict(tmp_path: Path) -> None:
    quiet = _with_attribution(tirl_log(n=60, seed=3), 0.7, at=())  # no spike injected, nothing special anywhere
    for row in quiet:
        row["train/grad_norm"] = 0.6  # no grad bump either
    assert _attribution(_diagnose(tmp_path, quiet)) == []
    assert _attribution(_diagnose(tmp_path, tirl_log(n=60, inject="void_leak", at=SPIKES))) == []  # no keys


def test_a_grad_norm_spike_alone_makes_a_spike_step(tmp_path: Path) -> None:
    rows = _with_attribution(tirl_log(n=60, seed=3), 0.7, at=(12, 33))  # no IS-ratio spike anywhere
    for row in rows:
        row["train/grad_norm"] = 6.0 if row["step"] in (12, 33) else 0.6
    (f,) = _attribution(_diagnose(tmp_path, rows))
    assert f.kind == "spikes_in_void" and f.steps == (12, 33)


def test_verl_log_with_tirls_patch_keys_uses_the_low_prob_share(tmp_path: Path) -> None:
    rows = _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.7)
    verl = as_verl(rows)
    for src, dst in zip(rows, verl, strict=True):  # the patch logs the generator side only
        for key in ("void/share_trajectories", "void/share_tokens", "void/share_lowprob_tokens",
                    "void/min_logprob_void", "void/min_logprob_valid"):  # fmt: skip
            dst[key] = src[key]
    log = load_metrics(write_jsonl(tmp_path / "verl.jsonl", verl))
    assert log.format == "verl"
    (f,) = _attribution(diagnose_training(log))
    assert f.kind == "spikes_in_void" and f.evidence["void_share_ratio_outliers"] is None
    assert f.evidence["void_share_lowprob_tokens"] == pytest.approx(0.7)


def test_cli_json_names_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.01))
    code = main(["diagnose", "training", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert "spikes_in_valid" in [f["kind"] for f in out["findings"]]


def test_report_plots_the_void_shares_and_min_log_probs_only_when_logged(tmp_path: Path) -> None:
    from tirl.diagnostics.report import write_report

    with_keys, without = tmp_path / "with", tmp_path / "without"
    for run, rows in ((with_keys, _with_attribution(tirl_log(n=60, inject="void_leak", at=SPIKES), 0.7)),
                      (without, tirl_log(n=60, inject="void_leak", at=SPIKES))):  # fmt: skip
        run.mkdir()
        write_jsonl(run / "metrics.jsonl", rows)
    page = write_report(with_keys).read_text(encoding="utf-8")
    titles = ("void rows&#x27; share: of the tokens vs of the spikes", "lowest generator log-prob: void vs valid rows")
    for title in titles:
        assert f'<img alt="{title}" src="data:image/png;base64,' in page, title
    assert "spikes_in_void" in page
    assert "lowest generator log-prob" not in write_report(without).read_text(encoding="utf-8")
