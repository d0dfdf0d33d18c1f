"""bench_trainer_vs_trl: the like-for-like micro-batch, the JSON's order and ratios, and one real small run.

The summary and micro-batch tests are pure (synthetic runs). The last test runs
the real benchmark (tirl's trainer and TRL's GRPOTrainer, each in its own
subprocess) at its smallest size; it is skipped without TRL (the ``bench``
extra). Not covered: the figures themselves (they need a quiet machine:
``benchmarks/run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_trainer_vs_trl.py"


def bench() -> ModuleType:
    return load_benchmark("bench_trainer_vs_trl")


@pytest.mark.parametrize(
    ("sequences", "seq_tokens", "budget", "micro"),
    [(32, 100, 1024, 8), (32, 2000, 1024, 1), (32, 100, 0, 32), (6, 100, 400, 3), (32, 32, 1024, 32), (5, 90, 400, 1)],
)
def test_matched_micro_batch_is_the_largest_divisor_that_fits(
    sequences: int, seq_tokens: int, budget: int, micro: int
) -> None:
    assert bench().matched_micro_batch(sequences, seq_tokens, budget) == micro


def run(tokens_per_s: float, mem: float, rss: float = 500.0) -> dict[str, float]:
    return {"tokens_per_s": tokens_per_s, "train_mem_mb": mem, "peak_rss_mb": rss, "wall_s": 1.0, "tokens": 100,
            "optimizer_steps": 4, "reward_mean": 0.1}  # fmt: skip


def test_summary_leads_with_like_for_like_then_defaults() -> None:
    runs = {
        "tirl": [run(330, 110)] * 3,
        "tirl_matched": [run(300, 100), run(330, 110), run(360, 120)],
        "trl_matched": [run(200, 100), run(200, 100), run(150, 100)],
        "tirl_matched_ckpt": [run(240, 80)] * 3,
        "trl_matched_ckpt": [run(120, 100)] * 3,
        "trl": [run(100, 200, 600)] * 3,
    }
    runs["trl_matched"][0]["micro_batch_sequences"] = 8
    out = bench()._summary(runs)
    assert list(out) == ["like_for_like", "defaults", "entries"]
    assert list(out["like_for_like"]) == ["no_checkpointing", "checkpointing"]
    plain = out["like_for_like"]["no_checkpointing"]
    assert (plain["tirl"], plain["trl"]) == ("tirl_matched", "trl_matched")
    assert plain["tokens_per_s_ratio"] == pytest.approx(330 / 200)  # ratio of the medians
    assert plain["tokens_per_s_ratio_per_run_range"] == pytest.approx([1.5, 360 / 150])
    assert plain["train_mem_ratio"] == pytest.approx(1.1)
    ckpt = out["like_for_like"]["checkpointing"]
    assert (ckpt["tirl"], ckpt["trl"], ckpt["tokens_per_s_ratio"], ckpt["train_mem_ratio"]) == (
        "tirl_matched_ckpt", "trl_matched_ckpt", 2.0, 0.8
    )  # fmt: skip
    d = out["defaults"]
    assert (d["tirl"], d["trl"], d["tokens_per_s_ratio"]) == ("tirl", "trl", 3.3)
    assert d["train_mem_ratio"] == pytest.approx(0.55)
    assert d["peak_rss_ratio"] == pytest.approx(500 / 600)
    assert out["entries"]["trl_matched"]["micro_batch_sequences"] == 8


def test_summary_leaves_out_pairs_whose_entries_did_not_run() -> None:
    """Only ``defaults`` when the matched entries did not run."""
    out = bench()._summary({"tirl": [run(300, 100)], "trl": [run(100, 200)]})
    assert out["like_for_like"] == {} and out["defaults"]["tokens_per_s_ratio"] == 3.0


@pytest.mark.slow
def test_real_small_run_matches_trls_micro_batch_through_gradient_accumulation() -> None:
    """Both trainers for real, at the smallest size (about 30 s on 2 loaded cores: two trainings in subprocesses).

    ``algo.micro_batch_tokens=128`` makes TRL's matched micro-batch smaller than an
    optimiser step's 4 sequences, so gradient accumulation is exercised.
    """
    pytest.importorskip("trl", reason="could not import 'trl'")
    cmd = [sys.executable, str(SCRIPT), "--json", "--steps", "2", "--prompts", "2", "--group", "4", "--max-new", "16",
           "--only", "tirl_matched", "--only", "trl_matched", "--tirl-set", "algo.micro_batch_tokens=128"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert list(out) == ["like_for_like", "defaults", "entries", "machine"]
    pair = out["like_for_like"]["no_checkpointing"]
    assert pair["tokens_per_s_ratio"] > 0 and pair["train_mem_ratio"] > 0 and out["defaults"] == {}
    trl, tirl = out["entries"]["trl_matched"], out["entries"]["tirl_matched"]
    assert trl["gradient_accumulation_steps"] > 1 and trl["micro_batch_sequences"] * trl[
        "gradient_accumulation_steps"
    ] == 4  # fmt: skip
    assert trl["padded_tokens_in_flight_max"] <= 128 and not trl["gradient_checkpointing"]
    assert tirl["micro_batch_tokens"] == trl["padded_tokens_in_flight_max"]  # the same tokens in flight
    assert trl["optimizer_steps"] == tirl["optimizer_steps"] == 4
    assert trl["tokens"] > 0 and tirl["tokens"] > 0


@pytest.mark.slow
def test_a_step_without_signal_is_one_error_line_not_a_traceback() -> None:
    """At groups of 2 the random tiny model's two completions tie on reward, tirl skips the update (no signal)
    and TRL would step anyway: the benchmark refuses the comparison in one line naming the fix."""
    cmd = [sys.executable, str(SCRIPT), "--steps", "2", "--prompts", "2", "--group", "2", "--max-new", "8",
           "--threads", "1", "--only", "tirl"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]  # SystemExit with a message exits 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "equal rewards" in lines[0] and "raise --group or --prompts" in lines[0]
