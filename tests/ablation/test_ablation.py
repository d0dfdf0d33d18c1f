"""`tirl ablate`: reading runs, paired seeds, the statistics in the JSON and table, bad input, tiny real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.ablation import DOSE_LEVELS, AblationPlan, RunResult, read_run
from tirl.ablation_dose import NOT_MEASURED, judge_level
from tirl.ablation_report import best_mode, compare, markdown_table, plot, summary_json
from tirl.errors import ConfigError

TIRL = [sys.executable, "-m", "tirl.cli"]


def _result(
    mode: str,
    seed: int,
    after: float,
    *,
    before: float = 0.6,
    ratio: float = 1.2,
    reward: float = 0.4,
    mechanism: dict[str, float] | None = None,
    spikes: bool | None = None,
) -> RunResult:
    return RunResult(
        mode=mode, seed=seed, run_dir="x", accuracy_before=before, accuracy_after=after, turns_mean=3.5,
        is_ratio_max=ratio, grad_norm_max=0.5, ratio_spike_steps=int(ratio > 3), void_ratio_start=0.1,
        void_ratio_end=0.2, wall_s=1.0, void_ratio=[0.1, 0.2], is_ratio=[1.0, ratio],
        reward=[0.3, reward, reward, reward],
        mechanism=mechanism or {}, spikes_in_void=spikes,
    )  # fmt: skip


def test_read_run_takes_the_figures_from_the_run_directory(tmp_path: Path) -> None:
    table = [(0.1, 1.5, 0.3, 0.4), (0.2, 7.0, 0.9, 0.2), (None, None, None, None), (0.6, 3.5, 0.2, 0.0),
             (0.9, 1.1, 0.1, 0.1)]  # fmt: skip
    keys = ("filter/void_ratio", "train/is_ratio_max", "train/grad_norm_max", "reward/mean")
    rows = [{"step": i + 1, **{k: v for k, v in zip(keys, vals, strict=True) if k != "reward/mean" or v is not None}}
            for i, vals in enumerate(table)]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {"eval/accuracy_before": 0.7, "eval/accuracy_after": 0.55, "eval/after": {"mean_turns": 3.25}}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    r = read_run(tmp_path, "drop", 2, 10.0)
    assert (r.accuracy_before, r.accuracy_after, r.turns_mean) == (0.7, 0.55, 3.25)
    assert (r.is_ratio_max, r.grad_norm_max, r.ratio_spike_steps) == (7.0, 0.9, 2)
    assert r.void_ratio_start == pytest.approx((0.1 + 0.2) / 2)  # 4 logged values: the first 2, the last 2
    assert r.void_ratio_end == pytest.approx((0.6 + 0.9) / 2)  # (before: 3 each, sharing 0.2 and 0.6)
    assert r.reward == [0.4, 0.2, None, 0.0, 0.1]
    assert not r.collapsed  # last 3 known rewards 0.2, 0.0, 0.1: mean 0.1 >= 0.05 (accuracy fell 15 points: no matter)
    assert r.mechanism == {} and r.spikes_in_void is None  # no void/share_* keys: not measured
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 6, "reward/mean": 0.0}) + "\n")
    assert read_run(tmp_path, "drop", 2, 10.0).collapsed  # 0.0, 0.1, 0.0: mean 0.033 < 0.05


def test_void_share_start_and_end_windows_never_overlap(tmp_path: Path) -> None:
    """Before: a 2-step run's start and end were both the mean of the same two steps (14% -> 14%)."""
    summary = {"eval/accuracy_before": 0.4, "eval/accuracy_after": 0.1}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    for voids, start, end in (([0.25, 0.05], 0.25, 0.05), ([0.3], 0.3, 0.3), ([0.1] * 3 + [0.5] * 3 + [0.9] * 3,
                              0.1, 0.9), ([0.2, 0.4, 0.6], 0.2, 0.6)):  # fmt: skip
        rows = [{"step": i + 1, "filter/void_ratio": v} for i, v in enumerate(voids)]
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        r = read_run(tmp_path, "drop", 0, 1.0)
        assert (r.void_ratio_start, r.void_ratio_end) == (pytest.approx(start), pytest.approx(end)), voids


def test_the_plot_labels_steps_with_whole_numbers() -> None:
    """Before: a 2-step run's step axis read 1.0, 1.2, 1.4, ... 2.0."""
    from tirl.ablation_report import figure

    fig = figure([_result("off", 0, 0.3), _result("drop", 0, 0.5)])
    fig.canvas.draw()
    for ax in fig.axes[1:]:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert all("." not in label.get_text() for label in ax.get_xticklabels() if label.get_text())


def test_mechanism_compares_spike_shares_before_the_fall(tmp_path: Path) -> None:
    rows = [
        {"reward/mean": 0.4, "void/share_tokens": 0.1, "void/share_ratio_outliers": 0.5, "void/share_grad_norm": 0.3},
        {"reward/mean": 0.3, "void/share_tokens": 0.1, "void/share_ratio_outliers": 0.7, "void/share_grad_norm": 0.2},
        {"reward/mean": 0.0, "void/share_tokens": 0.9, "void/share_ratio_outliers": 0.0, "void/share_grad_norm": 0.0},
    ]  # after the fall (step 3) the shares are ignored for the verdict, not for the means
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {"eval/accuracy_before": 0.4, "eval/accuracy_after": 0.1}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    r = read_run(tmp_path, "off", 0, 1.0)
    assert r.spikes_in_void is True
    assert r.mechanism["void/share_ratio_outliers"] == pytest.approx(0.4)
    assert set(r.mechanism) == {"void/share_tokens", "void/share_ratio_outliers", "void/share_grad_norm"}


def test_summary_json_table_and_plot(tmp_path: Path) -> None:
    results = [_result("off", 0, 0.3, ratio=9.0, reward=0.0), _result("off", 1, 0.7), _result("penalize", 0, 0.8),
               _result("penalize", 1, 0.75, mechanism={"void/share_tokens": 0.2})]  # fmt: skip
    data = summary_json(results, stress=["env.name=tir-chain"])
    assert data["seeds"] == 2 and data["turns_mean"] == 3.5
    assert (
        data["paired"] is True and data["stress"] == ["env.name=tir-chain"] and "last 3 steps" in data["collapse_rule"]
    )
    off = data["modes"]["off"]
    assert {k: off[k] for k in ("accuracy_after", "is_ratio_max", "grad_norm_max", "void_ratio_end", "collapsed")} == {
        "accuracy_after": [0.3, 0.7],
        "is_ratio_max": [9.0, 1.2],
        "grad_norm_max": [0.5, 0.5],
        "void_ratio_end": [0.2, 0.2],
        "collapsed": 1,
    }  # fmt: skip  (today's keys, unchanged)
    assert off["collapse_p"] is None and off["acc_diff_vs_off"] is None and off["mechanism"] is None
    pen = data["modes"]["penalize"]
    assert pen["collapsed"] == 0 and pen["collapse_p"] == pytest.approx(1.0)  # 0 of 2 vs 1 of 2
    assert pen["acc_diff_vs_off"] == pytest.approx(((0.8 - 0.3) + (0.75 - 0.7)) / 2)
    assert pen["acc_diff_ci"] is None  # 2 pairs: no CI
    assert pen["mechanism"] == {"void/share_tokens": 0.2}
    assert pen["auc_p"] == pytest.approx(1.0)  # Wilcoxon: one nonzero AUC difference, 2 of 2 sign patterns as extreme
    table = markdown_table(results)
    assert "| `off` | 0.500 ± 0.283 | 0.300 / 0.700 | — | 1 of 2 (p —) |" in table
    assert "| `penalize` | 0.775 ± 0.035 | 0.800 / 0.750 | +0.275 no CI (< 5 pairs) | 0 of 2 (p 1) |" in table
    assert "no best mode: no 95% CI" in table and best_mode(compare(results)) is None
    png = plot(results, tmp_path / "a.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_best_mode_needs_a_ci_that_excludes_zero() -> None:
    better = [_result("off", s, 0.5 + 0.01 * s) for s in range(6)] + [
        _result("drop", s, 0.8 + 0.02 * s) for s in range(6)
    ]
    noisy = [_result("mask", s, 0.5 + (0.3 if s % 2 else -0.3)) for s in range(6)]
    stats = compare(better + noisy)
    drop = next(s for s in stats if s.mode == "drop")
    assert drop.acc_diff_ci is not None and drop.acc_diff_ci[0] > 0
    assert best_mode(stats) == "drop"
    assert "best mode (95% CI of the paired accuracy difference vs `off` excludes 0): `drop`" in markdown_table(
        better + noisy
    )
    assert best_mode(compare([*better[:6], *noisy])) is None  # mask's CI straddles 0
    worse = [_result("drop", s, 0.1) for s in range(6)]
    assert best_mode(compare([*better[:6], *worse])) == "off"  # every other mode is worse with a CI


def test_plan_pairs_seeds_and_builds_overrides() -> None:
    plan = AblationPlan(modes=("off", "penalize", "roc"), seeds=(0, 1), steps=3, split="validation")
    o = plan.overrides("penalize", 1)
    assert {
        "filter.mode=penalize",
        "trainer.seed=1",
        "env.seed=1",
        "trainer.steps=3",
        "env.eval_split=validation",
    } <= set(o)
    assert "env.name=tir-chain" in o
    assert plan.overrides("roc", 0)[-1] == "algo.group_size=16"  # twice the stress group size: RoC oversamples
    shrunk = AblationPlan(modes=("roc",), extra=("algo.group_size=2",))
    assert shrunk.overrides("roc", 0)[-1] == "algo.group_size=4"  # twice the group size the other arms get
    assert "env.eval_split=heldout" in AblationPlan().overrides("off", 0)
    level = AblationPlan(level="mismatch-ood")
    assert level.stress[-1] == "algo.dual_clip=none" and "env.ood_rate=0.3" in level.overrides("off", 0)
    assert len(DOSE_LEVELS) >= 3
    for bad in ({"modes": ("sometimes",)}, {"seeds": ()}, {"steps": 0}, {"split": "test"}, {"level": "max"}):
        with pytest.raises(ConfigError):
            AblationPlan(**bad)  # type: ignore[arg-type]


def test_dose_acceptance_rule() -> None:
    runs = [_result("off", s, 0.1, reward=0.0 if s < 2 else 0.4) for s in range(3)]
    assert [r.collapsed for r in runs] == [True, True, False]
    v = judge_level("mismatch", ["generation.dtype=bfloat16"], runs)
    assert (v.collapses, v.runs, v.accepted, v.mechanism) == (2, 3, True, NOT_MEASURED)
    valid = [_result("off", s, 0.1, reward=0.0, spikes=False) for s in range(3)]
    v = judge_level("mismatch", [], valid)
    assert not v.accepted and v.mechanism == "spikes in valid tokens"  # collapses, but not the seed's disease
    void = [_result("off", s, 0.1, reward=0.0, spikes=True) for s in range(3)]
    assert judge_level("mismatch", [], void).accepted
    assert not judge_level("mismatch", [], [_result("off", 0, 0.1, reward=0.0), *runs[2:] * 2]).accepted  # 1 of 3


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--modes", "off,sometimes"], "--modes"),
        (["--modes", "off,off"], "names a mode twice"),  # the second run found the first's directory: a traceback
        # every statistic pairs a mode's run with off's: without off it ran, then printed "no 95% CI ... excludes 0"
        (["--modes", "mask,drop"], "--modes mask,drop has no off"),
        (["--levels", "mismatch"], "--levels picks the levels of --dose"),  # ignored without --dose, silently
        (["--dose", "--modes", "drop"], "--modes does not go with --dose"),  # ignored, silently
        (["--steps", "2", "--set", "trainer.steps=9"], "use --steps instead"),  # --set won, silently
        (["--seeds", "100000"], "--seeds 100000 is invalid: use 1 to 1000"),
        (["--seeds", "0"], "--seeds"),
        (["--set", "algo.lr=-1"], "algo.lr"),
        (["--level", "max"], "--level"),
        (["--dose", "--levels", "mismatch,huge"], "--levels"),
        (["--dose", "--level", "mismatch"], "--level"),
        (["--set", "env.ood_rate=2"], "env.ood_rate"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = subprocess.run([*TIRL, "ablate", "--out", str(tmp_path / "o"), *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and needle in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_failed_training_run_is_one_error_naming_its_log(tmp_path: Path) -> None:
    """A sub-run's own failure (here: its directory already holds a run) is a SetupError, not a traceback."""
    from tirl.ablation import _train
    from tirl.errors import SetupError

    run_dir = tmp_path / "off-seed0"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    with pytest.raises(SetupError, match=r"training run .*off-seed0 failed \(exit 2\): .*already holds a run") as info:
        _train(run_dir, ["trainer.steps=1"], tmp_path / "train.log")
    assert f"its log is {tmp_path / 'train.log'}" in str(info.value) and "rerun with a new --out" in str(info.value)


def test_tiny_real_ablation_prints_one_json_line(tmp_path: Path) -> None:
    """Two real one-step training runs (off, roc) on a shrunken job; checks the JSON contract and the roc wiring.

    Each run is a real `tirl train` process: ~20 s of CPU, 39-62 s wall on the shared, loaded 2-core machine (the
    old off/drop version of this test cost the same); the roc arm's oversampling is only visible in a real run.
    """
    out = tmp_path / "abl"
    shrink = ["env.eval_size=3", "trainer.prompts_per_step=2", "algo.group_size=2", "rollout.run_workers=4"]
    cmd = [*TIRL, "ablate", "--json", "--seeds", "1", "--modes", "off,roc", "--steps", "1", "--out", str(out)]
    for s in shrink:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    data = json.loads(last)
    assert data["seeds"] == 1 and set(data["modes"]) == {"off", "roc"}
    assert data["paired"] is True and "reward/mean" in data["collapse_rule"]
    assert "env.name=tir-chain" in data["stress"]
    assert isinstance(data["turns_mean"], float)
    for mode in ("off", "roc"):
        m = data["modes"][mode]
        assert {"accuracy_after", "is_ratio_max", "grad_norm_max", "void_ratio_end", "collapsed"} <= set(m)
        assert {"collapse_p", "acc_diff_vs_off", "acc_diff_ci", "mechanism"} <= set(m)
        assert len(m["accuracy_after"]) == 1 and 0.0 <= m["accuracy_after"][0] <= 1.0
        assert isinstance(m["collapsed"], int)
    assert data["modes"]["roc"]["collapse_p"] == 1.0 or data["modes"]["roc"]["collapse_p"] is not None
    assert data["modes"]["roc"]["acc_diff_ci"] is None  # one pair: no CI
    assert (out / "ablation.md").is_file() and (out / "ablation.png").is_file()
    runs = json.loads((out / "ablation.json").read_text(encoding="utf-8"))["runs"]
    assert [r["mode"] for r in runs] == ["off", "roc"]
    before = [json.loads((out / f"{m}-seed0" / "eval_before.json").read_text()) for m in ("off", "roc")]
    assert before[0] == before[1]  # measured once per seed, shared across modes
    roc_cfg = json.loads((out / "roc-seed0" / "config.json").read_text(encoding="utf-8"))
    assert roc_cfg["filter"]["mode"] == "roc" and roc_cfg["algo"]["group_size"] == 4  # oversampled 2x
    assert roc_cfg["env"]["seed"] == roc_cfg["trainer"]["seed"] == 0
    rows = [json.loads(x) for x in (out / "roc-seed0" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    kept = rows[0].get("filter/valid_trajectories", 0) + rows[0].get("filter/void_trajectories", 0)
    assert kept >= 8  # 2 prompts x 4 sampled (the filter then keeps 2 per group)


def test_tiny_real_dose_step(tmp_path: Path) -> None:
    """One level x one seed x one step of `tirl ablate --dose` (a real `tirl train`, bf16 generator); ~15-30 s."""
    out = tmp_path / "dose"
    shrink = ["env.eval_size=2", "trainer.prompts_per_step=2", "algo.group_size=2", "rollout.run_workers=4"]
    shrink.append("env.ood_rate=1.0")  # after the level's 0.3: every tool output carries its change (checked below)
    cmd = [*TIRL, "ablate", "--dose", "--json", "--seeds", "1", "--steps", "1", "--levels", "mismatch-ood-long"]
    for s in shrink:
        cmd += ["--set", s]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    [level] = data["dose"]
    assert level["level"] == "mismatch-ood-long" and "generation.dtype=bfloat16" in level["stress"]
    assert level["runs"] == 1 and level["collapsed"] in (0, 1) and level["mechanism"] == NOT_MEASURED
    assert data["accepted_level"] == ("mismatch-ood-long" if level["collapsed"] else None)
    run = out / "mismatch-ood-long" / "off-seed0"
    assert (out / "dose.md").is_file() and (run / "summary.json").is_file()
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert cfg["env"]["ood_rate"] == 1.0 and cfg["algo"]["dual_clip"] is None and cfg["algo"]["loss_agg"] == "seq_mean"
    assert cfg["generation"]["dtype"] == "bfloat16" and cfg["algo"]["tis_cap"] is None
    assert (cfg["env"]["chain_min"], cfg["env"]["chain_max"], cfg["env"]["max_turns"]) == (4, 8, 10)
    lines = (run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    tool = [m["content"] for line in lines if line.strip() for m in json.loads(line)["messages"] if m["role"] == "tool"]
    marks = ("Traceback (most recent call last)", "Warning:", "\x1b[", '"stdout"', "\t", "\u250c")
    assert tool and all(any(k in c for k in marks) for c in tool), tool[
        :3
    ]  # rate 1: every tool output carries its change
