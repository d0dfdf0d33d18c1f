"""The learning cost of staleness: held-out accuracy of the main job at max staleness K = 0, 1, 2, 4.

    python benchmarks/bench_staleness.py [--json] [--seeds 3] [--ks 0,1,2,4] [--steps N] [--eval-size N]
                                         [--out DIR] [--parallel N] [--set KEY=VALUE ...]

The main job is ``tirl train`` with its defaults (``tir-chain`` from the
built-in warm-started model, 25 steps of 8 prompts x 8 episodes, 200 held-out
tasks). For each seed ``s`` and each K this script runs one real
``python -m tirl.cli train`` subprocess with ``trainer.seed=s``,
``env.seed=s`` (paired seeds, as ``tirl ablate`` pairs them: the task draws
and sampling of seed ``s`` are the same for every K) and
``rollout.max_staleness=K``, seed by seed, one run at a time (2 cores: side by
side they would only slow each other; ``--parallel N`` runs N at a time, for a
machine with more cores or when only the learning figures matter). The held-out evaluation *before*
training is the same policy on the same tasks within a seed, so it is run once
per seed and copied into the other K's run directories (as ``tirl ablate``
does).

Per K it reports: the held-out accuracy after training (mean and per seed), the area under the
training-reward curve (:func:`tirl.ablation_stats.reward_auc`: how fast it learned — at 25 steps the main
job's held-out accuracy saturates near 1.0 at K = 0 and K = 1 alike, docs/scaling.md),
the paired difference against K = 0 (per seed, mean, and a seeded percentile
bootstrap 95% CI from :func:`tirl.ablation_stats.bootstrap_ci`, which gives
None below :data:`tirl.ablation_stats.MIN_PAIRS_CI` pairs: with 3 seeds the
per-seed differences are the figure), the mean ``async/step_lag`` actually
reached, and the time: the whole process (``wall_s``) and the step loop alone
(``loop_s``: the sum of ``time/step_interval_s`` under K > 0, of
``time/step_s`` under K = 0, i.e. from the loop's start to the last update's
end) with ``steps_per_s`` = steps / ``loop_s``, over the runs this invocation made (``timed_runs``; a run read
from ``--out`` may have run on another day or beside other runs, so it counts for accuracy only).

``--out DIR`` keeps the run directories there, and a run whose directory
already holds ``summary.json`` and ``bench_wall.json`` is read, not rerun
(so ``--seeds 5`` after ``--seeds 3`` into the same directory runs only the
new seeds). Without ``--out`` the runs go to a temporary directory that is
deleted afterwards.

Not covered: more than one job (the learning cost on a harder task or a
larger model can differ), the speed-up itself on a real disaggregated system
(here generation and the update share 2 CPU cores, so K > 0 mostly overlaps
the update with the rollout's idle tail; ``bench_async.py`` models the
speed-up), and run-to-run noise within a seed (the batches a rollout forms
depend on timing, so a rerun of a seed is not bit-identical).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from tirl.ablation import read_run  # noqa: E402
from tirl.ablation_stats import MIN_PAIRS_CI, bootstrap_ci  # noqa: E402
from tirl.cli import OneLineParser  # noqa: E402
from tirl.trainer.logging import read_metrics  # noqa: E402

DEFAULT_KS = (0, 1, 2, 4)
BOOTSTRAP_SEED = 0


@dataclass(frozen=True, slots=True)
class StaleRun:
    """The figures of one (K, seed) run."""

    k: int
    seed: int
    accuracy_before: float
    accuracy_after: float
    turns_mean: float
    reward_auc: float  # area under the per-step training reward (tirl.ablation_stats.reward_auc): learning speed
    steps: int
    step_lag_mean: float  # mean async/step_lag over the steps (0 under K = 0)
    loop_s: float  # the step loop: sum of time/step_interval_s (K > 0) or time/step_s (K = 0)
    wall_s: float  # the whole subprocess: model load, evaluations, steps, checkpoints
    fresh: bool = True  # run by this invocation (False: read from --out, made earlier, perhaps on another day)


def parse_ks(text: str) -> tuple[int, ...]:
    """``"0,1,2,4"`` -> (0, 1, 2, 4); ValueError naming the fix for anything else."""
    try:
        ks = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ValueError(f"--ks {text!r}: give comma-separated integers >= 0, e.g. 0,1,2,4") from None
    if not ks or min(ks) < 0 or len(set(ks)) != len(ks):
        raise ValueError(f"--ks {text!r}: give distinct integers >= 0, e.g. 0,1,2,4")
    if 0 not in ks:
        raise ValueError(f"--ks {text!r}: include 0 (the differences are taken against K = 0)")
    return tuple(sorted(ks))


def overrides(k: int, seed: int, steps: int | None, eval_size: int | None, extra: Sequence[str]) -> list[str]:
    """The ``--set`` pairs of one run: paired seeds, the staleness bound, optional sizes, then ``extra``."""
    out = [f"trainer.seed={seed}", f"env.seed={seed}", f"rollout.max_staleness={k}"]
    if steps is not None:
        out.append(f"trainer.steps={steps}")
    if eval_size is not None:
        out.append(f"env.eval_size={eval_size}")
    return [*out, *extra]


def _train(run_dir: Path, sets: list[str]) -> float:
    """One real ``tirl train`` subprocess into ``run_dir``; its wall seconds. RuntimeError on failure."""
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--no-progress", "--run-dir", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    log = run_dir / "train.log"
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"training run {run_dir} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return wall


def read_stale_run(run_dir: Path, k: int, seed: int, wall_s: float) -> StaleRun:
    """The :class:`StaleRun` of a finished run directory (accuracy through :func:`tirl.ablation.read_run`)."""
    base = read_run(run_dir, f"K={k}", seed, wall_s)
    rows = read_metrics(run_dir)
    lags = [float(r["async/step_lag"]) for r in rows if isinstance(r.get("async/step_lag"), int | float)]
    key = "time/step_interval_s" if k > 0 else "time/step_s"
    loop = sum(float(r[key]) for r in rows if isinstance(r.get(key), int | float))
    return StaleRun(
        k=k,
        seed=seed,
        accuracy_before=base.accuracy_before,
        accuracy_after=base.accuracy_after,
        turns_mean=base.turns_mean,
        reward_auc=base.reward_auc,
        steps=len(rows),
        step_lag_mean=statistics.fmean(lags) if lags else 0.0,
        loop_s=loop,
        wall_s=wall_s,
    )


def _one(run_dir: Path, k: int, seed: int, sets: dict[str, Any], before: Path | None, failed: set[int]) -> StaleRun:
    """One (K, seed) run into ``run_dir`` (read instead when it already finished).

    ``failed``: the seeds whose first run failed (a run waiting for that seed's before-evaluation gives up).
    """
    wall_file = run_dir / "bench_wall.json"
    fresh = not ((run_dir / "summary.json").exists() and wall_file.exists())
    if fresh:
        run_dir.mkdir(parents=True, exist_ok=True)
        if before is not None:  # same policy, same held-out tasks, greedy: the before-eval is shared
            while not before.exists():  # the seed's K = 0 run writes it first thing (atomically)
                if seed in failed:
                    raise RuntimeError(f"seed {seed}: its first run failed, so {run_dir} has no before-evaluation")
                time.sleep(2)
            (run_dir / "eval_before.json").write_bytes(before.read_bytes())
        wall = _train(run_dir, overrides(k, seed, sets["steps"], sets["eval_size"], sets["extra"]))
        wall_file.write_text(json.dumps({"wall_s": wall}), encoding="utf-8")
    run = read_stale_run(run_dir, k, seed, float(json.loads(wall_file.read_text(encoding="utf-8"))["wall_s"]))
    run = replace(run, fresh=fresh)
    print(
        f"K={k} seed {seed}: {run.accuracy_before:.3f} -> {run.accuracy_after:.3f}  lag {run.step_lag_mean:.2f}"
        f"  loop {run.loop_s:.0f} s  wall {run.wall_s:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return run


def run_all(
    ks: Sequence[int], seeds: Sequence[int], out: Path, sets: dict[str, Any], parallel: int = 1
) -> list[StaleRun]:
    """Every (seed, K) run under ``out``; a finished run directory is read, not rerun.

    ``parallel`` runs at a time (1: one after the other, seed by seed). The K = 0 runs are queued first;
    a K > 0 run waits for its seed's before-evaluation (``k0-seed<s>/eval_before.json``) and copies it.
    """
    jobs = [(k, seed) for k in ks for seed in seeds] if parallel > 1 else [(k, s) for s in seeds for k in ks]
    first = min(ks)
    failed: set[int] = set()

    def job(k: int, seed: int) -> StaleRun:
        before = None if k == first else out / f"k{first}-seed{seed}" / "eval_before.json"
        try:
            return _one(out / f"k{k}-seed{seed}", k, seed, sets, before, failed)
        except Exception:
            failed.add(seed)
            raise

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        runs = list(pool.map(lambda ks_: job(*ks_), jobs))
    return sorted(runs, key=lambda r: (r.seed, r.k))


def summarize(runs: Sequence[StaleRun]) -> dict[str, Any]:
    """The ``--json`` object: ``by_k`` (per K: accuracy, paired difference vs K = 0, lag, time) and ``runs``."""
    base = {r.seed: r.accuracy_after for r in runs if r.k == 0}
    by_k: dict[str, Any] = {}
    for k in sorted({r.k for r in runs}):
        mine = sorted((r for r in runs if r.k == k), key=lambda r: r.seed)
        diffs = [r.accuracy_after - base[r.seed] for r in mine if r.seed in base]
        ci = bootstrap_ci(diffs, seed=BOOTSTRAP_SEED)
        timed = [r for r in mine if r.fresh]  # speed only from this invocation's runs: read ones ran elsewhen
        loop = sum(r.loop_s for r in timed)
        by_k[str(k)] = {
            "accuracy_after_mean": statistics.fmean(r.accuracy_after for r in mine),
            "accuracy_after": {str(r.seed): r.accuracy_after for r in mine},
            "accuracy_before": {str(r.seed): r.accuracy_before for r in mine},
            "diff_vs_k0": {str(r.seed): r.accuracy_after - base[r.seed] for r in mine if r.seed in base},
            "diff_vs_k0_mean": statistics.fmean(diffs) if diffs else None,
            "diff_vs_k0_ci95": list(ci) if ci else None,
            "turns_mean": statistics.fmean(r.turns_mean for r in mine),
            "reward_auc": {str(r.seed): r.reward_auc for r in mine},
            "reward_auc_mean": statistics.fmean(r.reward_auc for r in mine),
            "step_lag_mean": statistics.fmean(r.step_lag_mean for r in mine),
            "loop_s_mean": statistics.fmean(r.loop_s for r in mine),
            "wall_s_mean": statistics.fmean(r.wall_s for r in mine),
            "steps_per_s": sum(r.steps for r in timed) / loop if loop > 0 else None,
            "timed_runs": len(timed),
        }
    k0 = by_k.get("0", {}).get("steps_per_s")
    for row in by_k.values():
        row["speed_vs_k0"] = row["steps_per_s"] / k0 if k0 and row["steps_per_s"] else None
    return {
        "by_k": by_k,
        "seeds": sorted({r.seed for r in runs}),
        "ci_note": f"bootstrap 95% CI of the mean paired difference; None below {MIN_PAIRS_CI} seeds",
        "runs": [asdict(r) for r in runs],
    }


def table(res: dict[str, Any]) -> str:
    """The human-readable table of :func:`summarize`'s object."""
    lines = ["  K  accuracy after (per seed)          diff vs K=0 (mean, CI)        lag   steps/s  speed"]
    for k, row in res["by_k"].items():
        seeds = " ".join(f"{v:.3f}" for v in row["accuracy_after"].values())
        ci = row["diff_vs_k0_ci95"]
        diff = row["diff_vs_k0_mean"]
        lines.append(
            f"{k:>3}  {row['accuracy_after_mean']:.3f} ({seeds})  "
            f"{diff if diff is None else f'{diff:+.3f}'} {'' if ci is None else f'[{ci[0]:+.3f}, {ci[1]:+.3f}]'}  "
            f"{row['step_lag_mean']:.2f}  {row['steps_per_s'] or 0:.4f}  {row['speed_vs_k0'] or 0:.2f}x"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid and print the table (or ``--json``); bad arguments are one ``error:`` line, exit 2."""
    p = OneLineParser(prog="bench_staleness.py", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the result object only")
    p.add_argument("--seeds", type=int, default=3, help="paired seeds 0..N-1 (default 3; a CI needs 5)")
    p.add_argument("--ks", default="0,1,2,4", help="the staleness bounds, comma-separated, 0 included")
    p.add_argument("--steps", type=int, default=None, help="trainer.steps (default: tirl train's, 25)")
    p.add_argument("--eval-size", type=int, default=None, help="env.eval_size (default: tirl train's, 200)")
    p.add_argument("--out", default=None, help="keep the run directories here (and reuse finished ones)")
    p.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1: timings comparable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another override for every run")
    a = p.parse_args(argv)
    try:
        ks = parse_ks(a.ks)
    except ValueError as exc:
        p.error(str(exc))
    if a.parallel < 1:
        p.error(f"--parallel {a.parallel}: use at least 1")
    if a.seeds < 1:
        p.error(f"--seeds {a.seeds}: use at least 1")
    if a.steps is not None and a.steps < 1:
        p.error(f"--steps {a.steps}: use at least 1")
    if a.eval_size is not None and a.eval_size < 1:
        p.error(f"--eval-size {a.eval_size}: use at least 1")
    sets = {"steps": a.steps, "eval_size": a.eval_size, "extra": list(a.set)}
    try:
        if a.out:
            runs = run_all(ks, range(a.seeds), Path(a.out), sets, a.parallel)
        else:
            with tempfile.TemporaryDirectory(prefix="bench_staleness_") as tmp:
                runs = run_all(ks, range(a.seeds), Path(tmp), sets, a.parallel)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    res = summarize(runs)
    print(json.dumps(res) if a.json else table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
