"""`tirl ablate`: reading runs, the summary JSON, the table and plot, bad input, and one tiny real ablation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.ablation import AblationPlan, RunResult, best_mode, markdown_table, plot, read_run, summary_json
from tirl.errors import ConfigError

TIRL = [sys.executable, "-m", "tirl.cli"]


def _result(mode: str, seed: int, after: float, *, before: float = 0.6, ratio: float = 1.2) -> RunResult:
    return RunResult(
        mode=mode, seed=seed, run_dir="x", accuracy_before=before, accuracy_after=after, turns_mean=3.5,
        is_ratio_max=ratio, grad_norm_max=0.5, ratio_spike_steps=int(ratio > 3), void_ratio_start=0.1,
        void_ratio_end=0.2, wall_s=1.0, void_ratio=[0.1, 0.2], is_ratio=[1.0, ratio],
    )  # fmt: skip


def test_read_run_takes_the_figures_from_the_run_directory(tmp_path: Path) -> None:
    rows = [
        {"step": 1, "filter/void_ratio": 0.1, "train/is_ratio_max": 1.5, "train/grad_norm_max": 0.3},
        {"step": 2, "filter/void_ratio": 0.2, "train/is_ratio_max": 7.0, "train/grad_norm_max": 0.9},
        {"step": 3, "filter/void_ratio": None, "train/is_ratio_max": None, "train/grad_norm_max": None},
        {"step": 4, "filter/void_ratio": 0.6, "train/is_ratio_max": 3.5, "train/grad_norm_max": 0.2},
        {"step": 5, "filter/void_ratio": 0.9, "train/is_ratio_max": 1.1, "train/grad_norm_max": 0.1},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {"eval/accuracy_before": 0.7, "eval/accuracy_after": 0.55, "eval/after": {"mean_turns": 3.25}}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    r = read_run(tmp_path, "drop", 2, 10.0)
    assert (r.accuracy_before, r.accuracy_after, r.turns_mean) == (0.7, 0.55, 3.25)
    assert (r.is_ratio_max, r.grad_norm_max, r.ratio_spike_steps) == (7.0, 0.9, 2)
    assert r.void_ratio_start == pytest.approx((0.1 + 0.2 + 0.6) / 3)  # the first 3 logged values
    assert r.void_ratio_end == pytest.approx((0.2 + 0.6 + 0.9) / 3)
    assert r.collapsed  # 0.55 < 0.7 - 0.10


def test_summary_json_table_and_plot(tmp_path: Path) -> None:
    results = [_result("off", 0, 0.3, ratio=9.0), _result("off", 1, 0.7), _result("penalize", 0, 0.8),
               _result("penalize", 1, 0.75)]  # fmt: skip
    data = summary_json(results)
    assert data["seeds"] == 2 and data["turns_mean"] == 3.5
    assert data["modes"]["off"] == {
        "accuracy_after": [0.3, 0.7], "is_ratio_max": [9.0, 1.2], "grad_norm_max": [0.5, 0.5],
        "void_ratio_end": [0.2, 0.2], "collapsed": 1,
    }  # fmt: skip
    assert data["modes"]["penalize"]["collapsed"] == 0
    table = markdown_table(results)
    assert "| `off` | 0.500 ± 0.283 | 0.300 / 0.700 | 9.00 |" in table
    assert "| 1 of 2 |" in table and "| 0 of 2 |" in table
    assert best_mode(results) == "penalize" and "best mode (fewest collapses, then mean accuracy): `penalize`" in table
    assert best_mode([_result("off", 0, 0.9), _result("drop", 0, 0.95)]) == "drop"  # no collapse: higher accuracy
    png = plot(results, tmp_path / "a.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_validates_and_builds_overrides() -> None:
    plan = AblationPlan(modes=("off", "penalize"), seeds=(0, 1), steps=3, split="validation")
    o = plan.overrides("penalize", 1)
    assert {"filter.mode=penalize", "trainer.seed=1", "trainer.steps=3", "env.eval_split=validation"} <= set(o)
    assert "env.name=tir-chain" in o
    assert "env.eval_split=heldout" in AblationPlan().overrides("off", 0)
    for bad in ({"modes": ("sometimes",)}, {"seeds": ()}, {"steps": 0}, {"split": "test"}):
        with pytest.raises(ConfigError):
            AblationPlan(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args, needle",
    [(["--modes", "off,sometimes"], "--modes"), (["--seeds", "0"], "--seeds"), (["--set", "algo.lr=-1"], "algo.lr")],
)
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = subprocess.run([*TIRL, "ablate", "--out", str(tmp_path / "o"), *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and needle in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_tiny_real_ablation_prints_one_json_line(tmp_path: Path) -> None:
    """Two real one-step training runs (off, drop) on a shrunken job; checks the JSON contract."""
    out = tmp_path / "abl"
    shrink = ["env.eval_size=3", "trainer.prompts_per_step=2", "algo.group_size=2", "rollout.run_workers=4"]
    cmd = [*TIRL, "ablate", "--json", "--seeds", "1", "--modes", "off,drop", "--steps", "1", "--out", str(out)]
    for s in shrink:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    data = json.loads(last)
    assert data["seeds"] == 1 and set(data["modes"]) == {"off", "drop"}
    assert isinstance(data["turns_mean"], float)
    for mode in ("off", "drop"):
        m = data["modes"][mode]
        assert set(m) == {"accuracy_after", "is_ratio_max", "grad_norm_max", "void_ratio_end", "collapsed"}
        assert len(m["accuracy_after"]) == 1 and 0.0 <= m["accuracy_after"][0] <= 1.0
        assert isinstance(m["collapsed"], int)
    assert (out / "ablation.md").is_file() and (out / "ablation.png").is_file()
    runs = json.loads((out / "ablation.json").read_text(encoding="utf-8"))["runs"]
    assert [r["mode"] for r in runs] == ["off", "drop"]
    before = [json.loads((out / f"{m}-seed0" / "eval_before.json").read_text()) for m in ("off", "drop")]
    assert before[0] == before[1]  # measured once, shared
