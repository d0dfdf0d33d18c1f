"""The filter-mode ablation behind ``tirl ablate``: the same job under each ``filter.mode`` x paired seeds.

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
  first and of the last :data:`EDGE_STEPS` logged steps, fewer when the run is
  shorter than twice that, so the two windows never share a step);
* the training reward per step (``reward/mean``), for the collapse rule
  (:data:`tirl.ablation_stats.COLLAPSE_RULE`: last-3-step mean < 0.05 after an earlier one ≥ 0.10, no "before")
  and the area under the reward curve;
* the attribution figures when the run logs them (every ``void/share_*`` key, averaged over steps).

Seeds are **paired**: seed ``s`` sets both ``trainer.seed`` (sampling, the update) and ``env.seed`` (the
training-task draw and the held-out/validation draw), so task draws vary across seeds and are identical
within a seed across modes. The statistics (:func:`tirl.ablation_report.compare`,
:mod:`tirl.ablation_stats`) pair each mode's run with ``off``'s run of the same seed.

The configuration (:data:`STRESS`) is where the failure can occur: the
multi-turn ``tir-chain`` family (3–6 tool turns), sampling temperature 1, a
large learning rate without warm-up, 8 prompts x 8 episodes per step. The
held-out set is smaller than ``make run``'s (``env.eval_size`` 40 instead of
200) and runs are 8 steps instead of 25, and the same for every run: "before" is measured once per seed and
copied into each run directory (the trainer then skips its own before-eval;
the policy and tasks are identical, and greedy decoding makes it the same
number; per seed, since ``env.seed`` draws each seed's held-out set).
``--split validation`` evaluates on the validation set
(``env.eval_split=validation``: a draw disjoint from the held-out set, the
training tasks and the SFT prompts) — use it to choose settings; the
default split is the held-out one reported in the README.

The arms are :data:`MODES`: the four ``filter.mode`` values and ``roc`` (rStar2-Agent's Resample-on-Correct,
``filter.mode=roc``: each group is sampled at twice ``algo.group_size`` and the filter keeps half, see
:mod:`tirl.filters.roc`). :data:`DOSE_LEVELS` are the stress levels of ``tirl ablate --dose``
(:mod:`tirl.ablation_dose`); ``AblationPlan.level`` runs the ablation at one of them.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.ablation_stats import (
    COLLAPSE_REWARD,
    collapsed,
    reward_auc,
)
from tirl.errors import ConfigError, SetupError
from tirl.fileio import write_bytes
from tirl.trainer import run_files

MODES: tuple[str, ...] = ("off", "mask", "drop", "penalize", "roc")
BASELINE = "off"  # the arm every other is paired with, seed by seed (tirl.ablation_report)
RATIO_SPIKE = 3.0  # a step whose max IS ratio exceeds this has a ratio spike (the dual-clip bound)
BOOTSTRAP_SEED = 0  # the bootstrap CIs are seeded: the same runs give the same table
MECHANISM_PREFIX = "void/share_"  # attribution keys (issue 23 item 1), pooled when a run logs them
SPIKE_KEYS = ("void/share_ratio_outliers", "void/share_lowprob_tokens")  # where the spikes sit
BASE_KEY = "void/share_tokens"  # the void rows' share of tokens: what the spike shares are compared with
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

#: The stress levels of ``tirl ablate --dose``, mildest first, each added to :data:`STRESS` (each level holds
#: the previous level's overrides, so a level names its whole stress). Each override is a real option a user
#: has and targets one link of the seed's chain (off-distribution text -> low-probability tokens -> ratio and
#: gradient spikes -> collapse), not a learning-rate hammer:
#:
#: 1. ``mismatch``: the generator samples in bf16 while the trainer stays fp32 (vLLM vs FSDP;
#:    ``generation.dtype``) and nothing corrects the gap (``algo.tis_cap=none``);
#: 2. ``mismatch-ood``: plus out-of-distribution tool output on 30% of calls (tracebacks, warnings, noise;
#:    ``env.ood_rate``; the held-out evaluation too, ``env.eval_ood_rate``) and no dual clip on negative
#:    advantages (``algo.dual_clip=none``);
#: 3. ``mismatch-ood-long``: plus no gradient clipping (``algo.grad_clip=0``), one weight per sequence
#:    (``algo.loss_agg=seq_mean``: a short void row weighs as much as a long valid one) and longer horizons
#:    (tir-chain chains of 4-8 calls, up to 10 turns and 1024 tokens).
_MISMATCH = ("generation.dtype=bfloat16", "algo.tis_cap=none")
# env.eval_ood_rate: the held-out evaluation under the same noise, as the level's recorded results were measured
_OOD = (*_MISMATCH, "env.ood_rate=0.3", "env.eval_ood_rate=0.3", "algo.dual_clip=none")
DOSE_LEVELS: dict[str, tuple[str, ...]] = {
    "mismatch": _MISMATCH,
    "mismatch-ood": _OOD,
    "mismatch-ood-long": (
        *_OOD,
        "algo.grad_clip=0",
        "algo.loss_agg=seq_mean",
        "env.chain_min=4",
        "env.chain_max=8",
        "env.max_turns=10",
        "generation.max_total_tokens=1024",
    ),
}


@dataclass(frozen=True, slots=True)
class AblationPlan:
    """What to run: modes x seeds, each ``steps`` long, with the stress overrides plus ``extra``."""

    modes: tuple[str, ...] = MODES
    seeds: tuple[int, ...] = tuple(range(DEFAULT_SEEDS))
    steps: int = DEFAULT_STEPS
    split: str = "heldout"  # heldout | validation
    extra: tuple[str, ...] = ()
    level: str = ""  # a DOSE_LEVELS name added to STRESS ("" = STRESS alone)

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ConfigError(f"--modes {','.join(self.modes)!r} is invalid: choose from {','.join(MODES)}")
        if len(set(self.modes)) != len(self.modes):  # each (mode, seed) is one run directory
            raise ConfigError(f"--modes {','.join(self.modes)!r} names a mode twice: give each mode once")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ConfigError("--seeds is invalid: give a count >= 1 (seeds 0..N-1)")
        if self.steps < 1:
            raise ConfigError(f"--steps {self.steps} is invalid: use at least 1")
        if self.split not in ("heldout", "validation"):
            raise ConfigError(f"--split {self.split!r} is invalid: use heldout or validation")
        if self.level and self.level not in DOSE_LEVELS:
            raise ConfigError(f"--level {self.level!r} is invalid: choose from {', '.join(DOSE_LEVELS)}")

    @property
    def stress(self) -> tuple[str, ...]:
        """The stress overrides of every run: :data:`STRESS` plus the dose level's."""
        return (*STRESS, *DOSE_LEVELS.get(self.level, ()))

    def overrides(self, mode: str, seed: int) -> list[str]:
        """The ``--set`` pairs of one run, one per key: seed ``seed`` sets both ``trainer.seed`` and ``env.seed``.

        A key given twice (a dose level's ``env.max_turns`` over the stress one, an ``extra`` over either) keeps
        its later value, once: ``tirl train`` refuses one key set twice to two values.
        """
        base = last_wins([
            *self.stress,
            f"env.eval_split={self.split}",
            f"filter.mode={mode}",
            f"trainer.seed={seed}",
            f"env.seed={seed}",
            f"trainer.steps={self.steps}",
            *self.extra,
        ])  # fmt: skip
        if mode == "roc":  # oversample: twice the group size the other arms use; the filter keeps half
            size = base.pop("algo.group_size", "algo.group_size=8").split("=", 1)[1].strip()
            doubled = str(2 * int(size)) if size.isdigit() else size  # not a count: the config check says so
            base["algo.group_size"] = f"algo.group_size={doubled}"
        return list(base.values())


def last_wins(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` items by their tirl key (TRL/verl aliases read as tirl's), the last of each, in that order.

    An item that is no ``KEY=VALUE`` (or an alias with no tirl meaning) is kept under its own text: the run's
    config check reports it.
    """
    from tirl.config import parse_override, tirl_keys
    from tirl.config_aliases import translate
    from tirl.errors import TirlError

    keys = tirl_keys()
    out: dict[str, str] = {}
    for item in items:
        try:
            parts, value = parse_override(item)
            key = translate(".".join(parts), value, keys.__contains__).key
        except TirlError:
            key = item
        out.pop(key, None)
        out[key] = item
    return out


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
    reward: list[float | None] = field(default_factory=list)  # per step: reward/mean (collapse rule, AUC)
    mechanism: dict[str, float] = field(default_factory=dict)  # void/share_* means over steps ({}: not logged)
    spikes_in_void: bool | None = None  # before the reward fell, spike share > token share (None: not measured)

    @property
    def collapsed(self) -> bool:
        """The collapse rule of :func:`tirl.ablation_stats.collapsed` on the training reward."""
        return collapsed(self.reward)

    @property
    def reward_auc(self) -> float:
        """Area under the training-reward curve (:func:`tirl.ablation_stats.reward_auc`)."""
        return reward_auc(self.reward)


def _num(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(float(v)) else None


def _edge_mean(values: list[float | None], *, last: bool) -> float:
    """Mean of the first (last) ``min(EDGE_STEPS, n // 2)`` known values: start and end never share a step.

    One known value is both the start and the end; none gives 0.
    """
    known = [v for v in values if v is not None]
    width = max(1, min(EDGE_STEPS, len(known) // 2))
    part = known[-width:] if last else known[:width]
    return statistics.fmean(part) if part else 0.0


def _mechanism(rows: list[dict[str, Any]], rewards: list[float | None]) -> tuple[dict[str, float], bool | None]:
    """Per ``void/share_*`` key its mean over steps; and whether the spikes sat in void rows before the fall.

    "Before the fall": the steps before the first one whose reward is below the collapse threshold (all steps
    when it never falls). The spikes sit in void rows when the mean of a :data:`SPIKE_KEYS` share exceeds the
    mean :data:`BASE_KEY` share (void rows hold more of the spikes than of the tokens). None when the keys
    are absent.
    """
    keys = sorted({k for r in rows for k in r if k.startswith(MECHANISM_PREFIX)})
    means: dict[str, float] = {}
    for k in keys:
        vals = [v for v in (_num(r, k) for r in rows) if v is not None]
        if vals:
            means[k] = statistics.fmean(vals)
    fall = next((i for i, v in enumerate(rewards) if v is not None and v < COLLAPSE_REWARD), len(rows))
    early = rows[: max(fall, 1)]

    def early_mean(key: str) -> float | None:
        vals = [v for v in (_num(r, key) for r in early) if v is not None]
        return statistics.fmean(vals) if vals else None

    base = early_mean(BASE_KEY)
    spikes = [m for m in (early_mean(k) for k in SPIKE_KEYS) if m is not None]
    verdict = None if base is None or not spikes else any(m > base for m in spikes)
    return means, verdict


def read_run(run_dir: Path, mode: str, seed: int, wall_s: float) -> RunResult:
    """The :class:`RunResult` of a finished run directory."""
    from tirl.trainer.logging import read_metrics

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    rows = read_metrics(run_dir)
    voids = [_num(r, "filter/void_ratio") for r in rows]
    ratios = [_num(r, "train/is_ratio_max") for r in rows]
    grads = [_num(r, "train/grad_norm_max") for r in rows]
    rewards = [_num(r, "reward/mean") for r in rows]
    mechanism, spikes_in_void = _mechanism(rows, rewards)
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
        reward=rewards,
        mechanism=mechanism,
        spikes_in_void=spikes_in_void,
    )


def train_command(run_dir: Path, overrides: list[str]) -> list[str]:
    """The ``tirl train`` command line of one run (this interpreter; ``--set`` per override)."""
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--no-progress", "--run-dir", str(run_dir)]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def _train(run_dir: Path, overrides: list[str], log: Path) -> None:
    cmd = train_command(run_dir, overrides)
    env = dict(os.environ)
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise SetupError(
            f"training run {run_dir} failed (exit {proc.returncode}): {' | '.join(tail)} — its log is {log}; "
            "the runs that finished are in the table already written; fix the cause and rerun with a new --out"
        )


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
    for seed in plan.seeds:
        before: Path | None = None  # env.seed = seed draws this seed's held-out set: shared within the seed
        for mode in plan.modes:
            run_dir = out / f"{mode}-seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            if before is not None:  # same policy, same tasks, greedy: the before-eval is shared (whole or not at all)
                write_bytes(run_dir / "eval_before.json", before.read_bytes())
            t0 = time.perf_counter()
            _train(run_dir, plan.overrides(mode, seed), run_dir / run_files.ARM_LOG)
            result = read_run(run_dir, mode, seed, time.perf_counter() - t0)
            before = before or run_dir / "eval_before.json"
            results.append(result)
            if on_result is not None:
                on_result(list(results))
            echo(
                f"{mode:>9} seed {seed}: {result.accuracy_before:.3f} -> {result.accuracy_after:.3f}  "
                f"IS max {result.is_ratio_max:.2f}  grad max {result.grad_norm_max:.2f}  "
                f"void {result.void_ratio_start:.0%} -> {result.void_ratio_end:.0%}  "
                f"{'collapsed' if result.collapsed else 'ok'}  ({result.wall_s:.0f}s)"
            )
    return results


__all__ = [
    "DOSE_LEVELS",
    "MODES",
    "STRESS",
    "AblationPlan",
    "RunResult",
    "read_run",
    "run_ablation",
    "train_command",
]
