"""``void_drift``: a sustained rise of the void share, apart from ``late_filter`` and ``void_leak`` (issue 10).

The 30-step logs are shaped like the runs measured in issue 10 (``diag_synth.issue10_run``); the 200-step
ones are the seeded noisy logs of the other verdicts with a void-share ramp injected.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from pathlib import Path

import pytest
from diag_synth import as_verl, issue10_run, tirl_log, write_jsonl

from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.drift import _noise, _trend, find_drift
from tirl.diagnostics.training import SEVERITY, diagnose_training


def diagnose(tmp_path: Path, rows: list[dict]) -> object:
    return diagnose_training(load_metrics(write_jsonl(tmp_path / "metrics.jsonl", rows)))


@pytest.mark.parametrize("seed", range(5))
def test_collapsed_drop_run_is_void_drift_not_late_filter(tmp_path: Path, seed: int) -> None:
    rows = issue10_run("drop_collapse", seed)
    assert rows[24]["step"] == 25 and rows[24]["rollout/trajectories"] == 152  # resampling at its limit
    assert rows[24]["filter/void_trajectories"] > 0.85 * 152
    diag = diagnose(tmp_path, rows)
    assert diag.verdict == "void_drift"
    (f,) = diag.findings
    assert 15 <= f.step <= 23  # the creep before the collapse, not the collapse itself
    assert f.steps[-1] == 30 and f.evidence["void_share_end"] > 0.85
    assert f.evidence["void_share_low"] < 0.15
    # the IS spike with the void jump at step 23 is the drift seen in one step, not a verdict of its own
    assert any(s.startswith("23 (") for s in f.evidence["is_spikes_during_rise"])


@pytest.mark.parametrize("seed", range(5))
def test_slow_rise_from_9_to_26_percent_is_void_drift(tmp_path: Path, seed: int) -> None:
    diag = diagnose(tmp_path, issue10_run("drop_slow", seed))
    assert diag.verdict == "void_drift"
    (f,) = diag.findings
    assert f.evidence["rise"] > 0.08 and f.evidence["void_share_end"] > 0.18


@pytest.mark.parametrize("seed", range(5))
def test_off_run_early_is_spike_at_the_length_cap_is_void_leak(tmp_path: Path, seed: int) -> None:
    rows = issue10_run("off_spike", seed)
    diag = diagnose(tmp_path, rows)
    assert diag.verdict == "void_leak"
    leak = next(f for f in diag.findings if f.kind == "void_leak")
    assert leak.step == 5 and leak.evidence["is_ratio_max"] == 37.0 and leak.evidence["max_len"] == 1024


@pytest.mark.parametrize("seed", range(5))
def test_share_moving_around_and_falling_is_not_drift(tmp_path: Path, seed: int) -> None:
    rows = issue10_run("mask_wander", seed)
    shares = [r["filter/void_ratio"] for r in rows]
    assert statistics.fmean(shares[:5]) > 0.12 and statistics.fmean(shares[-5:]) < 0.12  # 17 % -> 8 %
    assert diagnose(tmp_path, rows).verdict == "healthy"


def test_one_step_jump_at_the_end_and_a_burst_that_goes_away_are_not_drift(tmp_path: Path) -> None:
    rows = tirl_log(seed=7)
    rows[-1]["filter/void_trajectories"], rows[-1]["filter/valid_trajectories"] = 40, 24
    for r in rows[100:104]:
        r["filter/void_trajectories"], r["filter/valid_trajectories"] = 30, 34
    diag = diagnose(tmp_path, rows)
    assert "void_drift" not in {f.kind for f in diag.findings}


@pytest.mark.parametrize("seed", range(3))
def test_injected_ramp_in_a_long_log_is_found_near_its_start(tmp_path: Path, seed: int) -> None:
    diag = diagnose(tmp_path, tirl_log(seed=seed, inject="void_drift", at=(90,)))
    assert diag.verdict == "void_drift" and SEVERITY.index("void_drift") == 1
    (f,) = diag.findings
    assert 85 <= f.step <= 110


def test_simpletir_void_share_alone_is_enough(tmp_path: Path) -> None:
    rows = as_verl(tirl_log(seed=1, inject="void_drift", at=(90,)), simpletir=True)
    log = load_metrics(write_jsonl(tmp_path / "simpletir.jsonl", rows))
    assert log.format == "simpletir" and log.get("valid") is None
    assert diagnose_training(log).verdict == "void_drift"


def test_short_logs_have_no_drift_verdict() -> None:
    assert find_drift([0.1, 0.1, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]) is None  # fewer than 2 windows + 1


def test_trend_matches_a_plain_least_squares_loop() -> None:
    rng = random.Random(3)
    ys = [0.1 + 0.004 * i + rng.gauss(0, 0.02) for i in range(40)]
    n = len(ys)
    sx = sum(range(n))
    sy = sum(ys)
    sxy = sum(i * y for i, y in enumerate(ys))
    sxx = sum(i * i for i in range(n))
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    intercept = (sy - slope * sx) / n
    se = 0.02 / math.sqrt(sxx - sx * sx / n)
    start, rise, t = _trend(ys, 0.02)
    assert start == pytest.approx(intercept) and rise == pytest.approx(slope * (n - 1))
    assert t == pytest.approx(slope / se)


def test_noise_estimate_is_the_per_step_sd_despite_a_trend_and_a_jump() -> None:
    rng = random.Random(5)
    ys = [0.002 * i + rng.gauss(0, 0.05) for i in range(2000)]
    ys[1000:] = [y + 0.5 for y in ys[1000:]]  # one jump
    assert _noise(ys, None, 0.1, 0.0) == pytest.approx(0.05, rel=0.06)
    # a plain loop over the same definition: trimmed mean of |step changes|, normal constant
    diffs = sorted(abs(b - a) for a, b in itertools.pairwise(ys))[: math.ceil(0.9 * 1999)]
    assert _noise(ys, None, 0.1, 0.0) == pytest.approx(sum(diffs) / len(diffs) / 0.6574 / math.sqrt(2))
    assert _noise([0.1] * 30, [64] * 30, 0.1, 0.0) == pytest.approx(math.sqrt(0.1 * 0.9 / 64))  # binomial floor


def _noisy_ramp(n: int = 40, start: float = 0.1, end: float = 0.3, swing: float = 0.2) -> list[float]:
    """A steady climb from ``start`` to ``end`` under a large alternating noise of +-``swing``."""
    return [start + (end - start) * i / (n - 1) + (swing if i % 2 else -swing) / 2 for i in range(n)]


def test_a_rise_as_small_as_the_noise_is_not_drift_and_the_same_rise_without_noise_is() -> None:
    """The significance tests decide, not the size of the rise alone.

    The noisy ramp rises 0.2 (above ``min_rise``) in both its window and trend test, but only about one noise
    unit: neither ``rise_z`` nor ``trend_z`` is reached. Kills ``or`` -> ``and`` in either test.
    """
    noisy = _noisy_ramp()
    drift = find_drift(noisy)
    assert drift is None
    quiet = find_drift(_noisy_ramp(swing=0.004))
    assert quiet is not None and quiet.late - quiet.baseline >= 0.08
    # the noisy ramp's rise is above min_rise: what rejects it is the z of each test
    assert statistics.fmean(noisy[-10:]) - statistics.fmean(noisy[:10]) > 0.08
    _start, rise, t = _trend(noisy, _noise(noisy, None, 0.1, 0.01))
    assert rise > 0.08 and t < 3.5


def test_a_late_burst_that_does_not_stay_up_is_not_drift() -> None:
    """Three high steps inside the final window lift its mean well past ``min_rise`` at a large z, but fewer
    than ``sustained_frac`` of the late values sit above the midpoint. Kills ``or`` -> ``and`` in that check."""
    share = [0.1 + (0.002 if i % 2 else 0.0) for i in range(40)]
    share[33:36] = [0.9, 0.9, 0.9]
    assert statistics.fmean(share[-10:]) - 0.1 > 0.08
    assert find_drift(share) is None
    share[30:40] = [0.9] * 10  # the same level held for the whole window is a drift
    assert find_drift(share) is not None
