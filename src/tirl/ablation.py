"""The filter-mode ablation behind ``tirl ablate``: the same job under each ``filter.mode`` x seeds.

Each run is a real ``tirl train`` in its own process (``python -m tirl.cli
train --run-dir ... --set ...``), one after the other (2 CPU cores: running
them side by side would only slow each down and blur the timings), so the
ablation measures exactly what a user's run would do. From each run's
``summary.json`` and ``metrics.jsonl`` it reads:

* held-out greedy accuracy before and after (``eval/before``, ``eval/after``)
  and the mean assistant turns per held-out episode (``eval/after.mean_turns``);
* max importance ratio and max gradient norm over the run
  (``train/is_ratio_max``, ``train/grad_norm_max``), and the steps whose
  ratio exceeded :data:`RATIO_SPIKE`;
* the void share (``filter/void_ratio``) at the start and the end (mean of the
  first and of the last :data:`EDGE_STEPS` logged steps);
* collapse: held-out accuracy after < before - :data:`COLLAPSE_DROP`.

The configuration (:data:`STRESS`) is where the failure can occur: the
multi-turn ``tir-chain`` family (3–6 tool turns), sampling temperature 1, a
large learning rate without warm-up, 8 prompts x 8 episodes per step. The
held-out set is smaller than ``make run``'s (``env.eval_size`` 40 instead of
200) and runs are 8 steps instead of 25, and the same for every run: "before" is measured once per ablation and
copied into each run directory (the trainer then skips its own before-eval;
the policy and tasks are identical, and greedy decoding makes it the same
number). ``--split validation`` evaluates on the validation set
(``env.eval_split=validation``: a draw disjoint from the held-out set, the
training tasks and the SFT prompts) — use it to choose settings; the
default split is the held-out one reported in the README.

Not covered: parallel runs, resuming a half-finished ablation (a rerun
starts over in a new directory).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tirl.errors import ConfigError
from tirl.fileio import write_text

MODES: tuple[str, ...] = ("off", "mask", "drop", "penalize")
RATIO_SPIKE = 3.0  # a step whose max IS ratio exceeds this has a ratio spike (the dual-clip bound)
COLLAPSE_DROP = 0.10  # accuracy after < before - this is a collapse
EDGE_STEPS = 3  # void share "start"/"end": mean over this many first/last steps
DEFAULT_STEPS = 8
DEFAULT_SEEDS = 3

STRESS: tuple[str, ...] = (
    "env.name=tir-chain",
    "env.max_turns=6",
    "env.eval_size=40",
    "generation.temperature=1.0",
    "algo.lr=3e-4",
    "algo.warmup_steps=0",
    "trainer.prompts_per_step=8",
    "algo.group_size=8",
    "trainer.checkpoint_every=1000",
)


@dataclass(frozen=True, slots=True)
class AblationPlan:
    """What to run: modes x seeds, each ``steps`` long, with the stress overrides plus ``extra``."""

    modes: tuple[str, ...] = MODES
    seeds: tuple[int, ...] = tuple(range(DEFAULT_SEEDS))
    steps: int = DEFAULT_STEPS
    split: str = "heldout"  # heldout | validation
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ConfigError(f"--modes {','.join(self.modes)!r} is invalid: choose from {','.join(MODES)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ConfigError("--seeds is invalid: give a count >= 1 (seeds 0..N-1)")
        if self.steps < 1:
            raise ConfigError(f"--steps {self.steps} is invalid: use at least 1")
        if self.split not in ("heldout", "validation"):
            raise ConfigError(f"--split {self.split!r} is invalid: use heldout or validation")

    def overrides(self, mode: str, seed: int) -> list[str]:
        """The ``--set`` pairs of one run."""
        return [
            *STRESS,
            f"env.eval_split={self.split}",
            f"filter.mode={mode}",
            f"trainer.seed={seed}",
            f"trainer.steps={self.steps}",
            *self.extra,
        ]


@dataclass(slots=True)
class RunResult:
    """The figures of one (mode, seed) run."""

    mode: str
    seed: int
    run_dir: str
    accuracy_before: float
    accuracy_after: float
    turns_mean: float
    is_ratio_max: float
    grad_norm_max: float
    ratio_spike_steps: int
    void_ratio_start: float
    void_ratio_end: float
    wall_s: float
    void_ratio: list[float | None] = field(default_factory=list)  # per step (plots)
    is_ratio: list[float | None] = field(default_factory=list)  # per step (plots)

    @property
    def collapsed(self) -> bool:
        """Held-out accuracy fell by more than :data:`COLLAPSE_DROP`."""
        return self.accuracy_after < self.accuracy_before - COLLAPSE_DROP


def _num(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(float(v)) else None


def _edge_mean(values: list[float | None], *, last: bool) -> float:
    known = [v for v in values if v is not None]
    part = known[-EDGE_STEPS:] if last else known[:EDGE_STEPS]
    return statistics.fmean(part) if part else 0.0


def read_run(run_dir: Path, mode: str, seed: int, wall_s: float) -> RunResult:
    """The :class:`RunResult` of a finished run directory."""
    from tirl.trainer.logging import read_metrics

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    rows = read_metrics(run_dir)
    voids = [_num(r, "filter/void_ratio") for r in rows]
    ratios = [_num(r, "train/is_ratio_max") for r in rows]
    grads = [_num(r, "train/grad_norm_max") for r in rows]
    after = summary.get("eval/after") or {}
    return RunResult(
        mode=mode,
        seed=seed,
        run_dir=str(run_dir),
        accuracy_before=float(summary["eval/accuracy_before"]),
        accuracy_after=float(summary["eval/accuracy_after"]),
        turns_mean=float(after.get("mean_turns") or 0.0),
        is_ratio_max=max((v for v in ratios if v is not None), default=0.0),
        grad_norm_max=max((v for v in grads if v is not None), default=0.0),
        ratio_spike_steps=sum(1 for v in ratios if v is not None and v > RATIO_SPIKE),
        void_ratio_start=_edge_mean(voids, last=False),
        void_ratio_end=_edge_mean(voids, last=True),
        wall_s=wall_s,
        void_ratio=voids,
        is_ratio=ratios,
    )


def _train(run_dir: Path, overrides: list[str], log: Path) -> None:
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--no-progress", "--run-dir", str(run_dir)]
    for o in overrides:
        cmd += ["--set", o]
    env = dict(os.environ)
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"training run {run_dir} failed (exit {proc.returncode}): {' | '.join(tail)}")


def run_ablation(
    plan: AblationPlan,
    out: Path,
    *,
    echo: Callable[[str], None] = print,
    on_result: Callable[[list[RunResult]], object] | None = None,
) -> list[RunResult]:
    """Run every (mode, seed) of ``plan`` under ``out``, seed by seed; returns the results in plan order.

    ``on_result`` is called with the results so far after each run (the command rewrites its outputs, so an
    interrupted ablation still leaves the table of what finished).
    """
    out.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    before: Path | None = None
    for seed in plan.seeds:
        for mode in plan.modes:
            run_dir = out / f"{mode}-seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            if before is not None:  # same policy, same tasks, greedy: the before-eval is shared
                (run_dir / "eval_before.json").write_bytes(before.read_bytes())
            t0 = time.perf_counter()
            _train(run_dir, plan.overrides(mode, seed), run_dir / "train.log")
            result = read_run(run_dir, mode, seed, time.perf_counter() - t0)
            before = before or run_dir / "eval_before.json"
            results.append(result)
            if on_result is not None:
                on_result(list(results))
            echo(
                f"{mode:>9} seed {seed}: {result.accuracy_before:.3f} -> {result.accuracy_after:.3f}  "
                f"IS max {result.is_ratio_max:.2f}  grad max {result.grad_norm_max:.2f}  "
                f"void {result.void_ratio_start:.0%} -> {result.void_ratio_end:.0%}  ({result.wall_s:.0f}s)"
            )
    return results


def summary_json(results: Sequence[RunResult]) -> dict[str, Any]:
    """The one-line ``--json`` object: per mode, per-seed lists and the collapse count."""
    modes: dict[str, Any] = {}
    for r in results:
        m = modes.setdefault(
            r.mode,
            {"accuracy_after": [], "is_ratio_max": [], "grad_norm_max": [], "void_ratio_end": [], "collapsed": 0},
        )
        m["accuracy_after"].append(r.accuracy_after)
        m["is_ratio_max"].append(r.is_ratio_max)
        m["grad_norm_max"].append(r.grad_norm_max)
        m["void_ratio_end"].append(r.void_ratio_end)
        m["collapsed"] += int(r.collapsed)
    seeds = len({r.seed for r in results})
    turns = statistics.fmean(r.turns_mean for r in results) if results else 0.0
    return {"seeds": seeds, "turns_mean": turns, "modes": modes}


def best_mode(results: Sequence[RunResult]) -> str | None:
    """The mode with the fewest collapses, then the highest mean accuracy after, then the lowest max IS ratio."""

    def key(mode: str) -> tuple[int, float, float]:
        rs = [r for r in results if r.mode == mode]
        return (
            sum(r.collapsed for r in rs),
            -statistics.fmean(r.accuracy_after for r in rs),
            max(r.is_ratio_max for r in rs),
        )

    modes = list(dict.fromkeys(r.mode for r in results))
    return min(modes, key=key) if modes else None


def _spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def markdown_table(results: Sequence[RunResult]) -> str:
    """The README table: one row per mode (mean ± sample std over seeds, max over seeds)."""
    head = (
        "| mode | held-out accuracy after (mean ± std) | per seed | max IS ratio | max grad norm "
        f"| steps with ratio > {RATIO_SPIKE:g} | void share start → end | collapses |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for mode in dict.fromkeys(r.mode for r in results):
        rs = [r for r in results if r.mode == mode]
        acc = [r.accuracy_after for r in rs]
        lines.append(
            f"| `{mode}` | {_spread(acc)} | {' / '.join(f'{a:.3f}' for a in acc)} "
            f"| {max(r.is_ratio_max for r in rs):.2f} | {max(r.grad_norm_max for r in rs):.2f} "
            f"| {sum(r.ratio_spike_steps for r in rs)} "
            f"| {statistics.fmean(r.void_ratio_start for r in rs):.0%} → "
            f"{statistics.fmean(r.void_ratio_end for r in rs):.0%} "
            f"| {sum(r.collapsed for r in rs)} of {len(rs)} |"
        )
    before = sorted({round(r.accuracy_before, 3) for r in results})
    return (
        head
        + "\n".join(lines)
        + f"\n\nheld-out accuracy before: {', '.join(f'{b:.3f}' for b in before)}; "
        + f"best mode (fewest collapses, then mean accuracy): `{best_mode(results)}`\n"
    )


def plot(results: Sequence[RunResult], path: Path) -> Path:
    """Three panels: held-out accuracy after per mode and seed; void share and max IS ratio per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r.mode for r in results))
    colours = {m: f"C{i}" for i, m in enumerate(modes)}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for i, m in enumerate(modes):
        accs = [r.accuracy_after for r in results if r.mode == m]
        axes[0].scatter([i] * len(accs), accs, color=colours[m])
    befores = [r.accuracy_before for r in results]
    if befores:
        axes[0].axhline(statistics.fmean(befores), color="grey", linestyle="--", linewidth=1, label="before")
        axes[0].axhline(statistics.fmean(befores) - COLLAPSE_DROP, color="red", linestyle=":", linewidth=1)
    axes[0].set_xticks(range(len(modes)), modes)
    axes[0].set_title("held-out accuracy after (per seed)")
    axes[0].legend(fontsize=7)
    for r in results:
        steps = list(range(1, len(r.void_ratio) + 1))
        label = r.mode if r.seed == results[0].seed else None
        axes[1].plot(steps, [math.nan if v is None else v for v in r.void_ratio], color=colours[r.mode], label=label)
        axes[2].plot(steps, [math.nan if v is None else v for v in r.is_ratio], color=colours[r.mode], label=label)
    axes[1].set_title("void share per step")
    axes[2].set_title("max IS ratio per step")
    axes[2].set_yscale("log")
    axes[2].axhline(RATIO_SPIKE, color="red", linestyle=":", linewidth=1)
    for ax in axes[1:]:
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write_outputs(results: Sequence[RunResult], out: Path) -> dict[str, Any]:
    """``ablation.json`` (every run), ``ablation.md`` (the table) and ``ablation.png`` in ``out``."""
    data = summary_json(results)
    full = {**data, "best_mode": best_mode(results), "runs": [{**asdict(r), "collapsed": r.collapsed} for r in results]}
    write_text(out / "ablation.json", json.dumps(full, indent=1) + "\n")
    write_text(out / "ablation.md", markdown_table(results))
    plot(results, out / "ablation.png")
    return data


__all__ = [
    "MODES",
    "STRESS",
    "AblationPlan",
    "RunResult",
    "best_mode",
    "markdown_table",
    "plot",
    "read_run",
    "run_ablation",
    "summary_json",
    "write_outputs",
]
