"""benchmarks/bench_staleness.py: the K list, the paired summary, the plot, bad input, and one real tiny run.

The summary, plot and argument tests are pure (synthetic runs). The last test runs the real script: two
real ``tirl train`` subprocesses (K = 0 and K = 1, one seed, one step of 2 x 2 episodes, 2 held-out tasks);
it takes about a minute on an idle 2-core machine (two model loads and two trainer start-ups), longer under
load. Not covered: the figures themselves (a full run is 12 runs of the main job: ``run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_staleness.py"


def bench() -> ModuleType:
    return load_benchmark("bench_staleness")


def table_module() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_table

    return bench_table


def test_ks_are_sorted_distinct_and_include_zero() -> None:
    b = bench()
    assert b.parse_ks("4,0,2,1") == (0, 1, 2, 4)
    for bad in ("1,2", "0,0", "0,-1", "0,x", ""):
        with pytest.raises(ValueError, match="--ks"):
            b.parse_ks(bad)


def test_overrides_pair_the_seeds_and_set_k() -> None:
    sets = bench().overrides(2, 7, 3, None, ["algo.lr=1e-4"])
    assert sets == ["trainer.seed=7", "env.seed=7", "rollout.max_staleness=2", "trainer.steps=3", "algo.lr=1e-4"]


def _run(b: ModuleType, k: int, seed: int, acc: float, loop_s: float = 10.0) -> object:
    return b.StaleRun(k=k, seed=seed, accuracy_before=0.4, accuracy_after=acc, turns_mean=4.0, reward_auc=0.5, steps=5,
                      step_lag_mean=0.8 * k, loop_s=loop_s, wall_s=60.0)  # fmt: skip


def test_summary_pairs_each_seed_with_its_k0_run() -> None:
    b = bench()
    runs = [_run(b, 0, s, a) for s, a in enumerate([0.9, 0.8, 0.7])]
    runs += [_run(b, 2, s, a, loop_s=5.0) for s, a in enumerate([0.8, 0.85, 0.5])]
    res = b.summarize(runs)
    k2 = res["by_k"]["2"]
    assert k2["diff_vs_k0"] == pytest.approx({"0": -0.1, "1": 0.05, "2": -0.2})
    assert k2["diff_vs_k0_mean"] == pytest.approx(-0.25 / 3)
    assert k2["accuracy_after_mean"] == pytest.approx(2.15 / 3)
    assert k2["diff_vs_k0_ci95"] is None  # 3 pairs: below MIN_PAIRS_CI, no bootstrap interval
    assert k2["steps_per_s"] == pytest.approx(15 / 15.0) and k2["speed_vs_k0"] == pytest.approx(2.0)
    assert res["by_k"]["0"]["diff_vs_k0_mean"] == 0.0
    five = [_run(b, 0, s, 0.9) for s in range(5)] + [_run(b, 1, s, 0.9 - 0.1 * (s % 2)) for s in range(5)]
    lo, hi = b.summarize(five)["by_k"]["1"]["diff_vs_k0_ci95"]
    assert -0.1 <= lo <= hi <= 0.0 and lo < hi  # five pairs: a seeded bootstrap CI inside the diffs' range


def test_speed_counts_only_the_runs_this_invocation_made() -> None:
    """Runs read from --out may have run on another day or side by side: accuracy only (their loop_s is ignored)."""
    b = bench()
    runs = [_run(b, 0, s, 0.9) for s in range(3)] + [_run(b, 1, s, 0.9, loop_s=5.0) for s in range(3)]
    runs[0] = replace(runs[0], fresh=False, loop_s=1000.0)  # K = 0 seed 0, read: slow (another day), not counted
    runs[3:] = [replace(r, fresh=False) for r in runs[3:]]  # every K = 1 run read
    res = b.summarize(runs)
    k0, k1 = res["by_k"]["0"], res["by_k"]["1"]
    assert k0["timed_runs"] == 2 and k0["steps_per_s"] == pytest.approx(10 / 20.0)
    assert k1["timed_runs"] == 0 and k1["steps_per_s"] is None and k1["speed_vs_k0"] is None
    assert k1["accuracy_after_mean"] == pytest.approx(0.9) and k1["diff_vs_k0_mean"] == pytest.approx(0.0)


def test_plot_is_a_png_and_needs_by_k() -> None:
    b, t = bench(), table_module()
    runs = [_run(b, k, s, 0.9 - 0.05 * k) for k in (0, 1, 2, 4) for s in range(3)]
    assert t._staleness_plot([b.summarize(runs)]).startswith(b"\x89PNG\r\n\x1a\n")
    assert t._staleness_plot([{}]) is None
    bench_ = next(x for x in t.BENCHMARKS if x.name == "staleness")
    read = {f.name: f.read(b.summarize(runs)) for f in bench_.figures}
    assert read["K = 4: accuracy − K = 0's (mean paired difference)"] == pytest.approx(-0.2)
    assert read["K = 4: training-reward area ÷ K = 0's (learning speed)"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--ks", "1,2"], "--ks '1,2': include 0"), (["--seeds", "0"], "--seeds 0"), (["--steps", "0"], "--steps 0")],
)
def test_bad_input_is_one_error_line_exit_2(args: list[str], needle: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_a_real_tiny_run_reports_both_ks(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    args = ["--json", "--seeds", "1", "--ks", "0,1", "--steps", "1", "--eval-size", "2", "--out", str(out),
            "--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2"]  # fmt: skip
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(res["by_k"]) == {"0", "1"} and res["seeds"] == [0]
    for k, row in res["by_k"].items():
        assert 0.0 <= row["accuracy_after"]["0"] <= 1.0 and row["steps_per_s"] > 0
        assert row["accuracy_before"]["0"] == res["by_k"]["0"]["accuracy_before"]["0"]  # one shared before-eval
        assert row["step_lag_mean"] <= int(k)  # the gate's bound: lag <= K
        assert 0.0 <= row["reward_auc_mean"] <= 1.0
    assert res["by_k"]["0"]["diff_vs_k0"] == {"0": 0.0}
    config = json.loads((out / "k1-seed0" / "config.json").read_text())
    assert config["rollout"]["max_staleness"] == 1 and config["trainer"]["seed"] == 0 and config["env"]["seed"] == 0
    assert all(row["timed_runs"] == 1 for row in res["by_k"].values())
    # a second call reads the finished runs instead of training again: the same figures, but no speed (its runs
    # were made by another invocation, so their times are not this one's)
    again = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    reread = json.loads(again.stdout.strip().splitlines()[-1])
    speed = ("steps_per_s", "timed_runs", "speed_vs_k0")
    for k, row in reread["by_k"].items():
        assert (row["steps_per_s"], row["timed_runs"], row["speed_vs_k0"]) == (None, 0, None)
        assert {f: v for f, v in row.items() if f not in speed} == {
            f: v for f, v in res["by_k"][k].items() if f not in speed
        }
