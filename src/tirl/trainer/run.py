"""The training recipe: one run directory from a config to a summary, in one room.

:class:`TrainingRun` is what ``tirl train`` runs (the command only turns its
arguments into a :class:`~tirl.config.TirlConfig` and a run directory):

1. **setup** — write ``config.json``; on resume, find the newest checkpoint
   and load the policy from it; wire the parts (:func:`tirl.trainer.wiring.build_parts`:
   generator, sandbox, env factory, the training and the evaluation strategy);
   start a generator that must be started (a remote server is checked up
   front); draw the task sets; with ``--nproc N`` join the other ranks
   (a :class:`~tirl.trainer.learner.RankGroup` from :mod:`tirl.distributed`, which
   gives this rank's gradient-sync strategy); build the learner once
   (:func:`~tirl.trainer.learner.build_learner`: optimiser, updater, and the
   frozen reference model when ``algo.kl_coef > 0``), the metric sinks
   (wandb when configured) and the :class:`~tirl.trainer.trainer.Trainer`;
   restore its optimiser and RNG state on resume; send the other ranks the
   (restored) weights and optimiser state.
2. **train** — the held-out evaluation *before* (``eval_before.json``, once per
   run directory, so a resumed run keeps its first figure), then the steps,
   then the evaluation *after* (``trainer.eval_before_after``).
3. **cleanup** — close the strategies, the generator and the sandbox (always).
4. **summary** — ``summary.json`` (steps logged, skipped steps and updates,
   accuracies, total time) and the diagnostics report (``report.html``) when
   the diagnostics are installed; a failing report never fails the run.

Not covered: several runs in one process sharing parts.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from tirl.config import TirlConfig, config_to_dict
from tirl.fileio import write_text
from tirl.inference.base import Startable
from tirl.integrations.wandb_sink import metric_sinks
from tirl.jsonl import read_json
from tirl.rollout.evaluation import EvalReport
from tirl.trainer.checkpoint import latest_checkpoint
from tirl.trainer.learner import RankGroup, build_learner, load_reference
from tirl.trainer.logging import read_metrics
from tirl.trainer.trainer import Trainer
from tirl.trainer.wiring import RunParts, TaskSets, build_parts, evaluate

log = logging.getLogger("tirl.trainer")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text(path, json.dumps(data, indent=1) + "\n")


def eval_record(report: EvalReport) -> dict[str, Any]:
    """The JSON record of one held-out evaluation (``eval_before.json``, ``summary.json``)."""
    return {
        "accuracy": report.accuracy,
        "n": report.n,
        "correct": report.correct,
        "wall_s": report.wall_s,
        "terminations": report.terminations,
        "mean_turns": report.mean_turns,
    }


def write_report(run_dir: Path) -> str | None:
    """The diagnostics report when the diagnostics are installed; a failure is a warning, never the run's."""
    try:
        from tirl.diagnostics.report import write_report as write
    except ImportError:
        return None
    try:
        return str(write(run_dir))
    except Exception as exc:  # the report is a bonus; the run already succeeded
        log.warning("the diagnostics report could not be written: %s", exc)
        return None


class TrainingRun:
    """One training run (or its continuation) in ``run_dir``; see the module docstring for the stages."""

    def __init__(
        self, cfg: TirlConfig, run_dir: Path, *, resume: bool = False, progress: bool = True,
        ranks: RankGroup | None = None,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.ranks = ranks  # --nproc N > 1: the other ranks (tirl.distributed); this process is rank 0
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.progress = progress
        self.parts: RunParts | None = None
        self.tasks: TaskSets | None = None
        self.trainer: Trainer | None = None

    async def setup(self) -> None:
        """Config file, parts, generator start, task sets, reference model, trainer (restored on resume)."""
        cfg = self.cfg
        _write_json(self.run_dir / "config.json", config_to_dict(cfg))
        ckpt = latest_checkpoint(self.run_dir) if self.resume else None
        self.parts = parts = build_parts(
            cfg,
            model_path=str(ckpt.model_dir) if ckpt else None,
            trace_path=str(self.run_dir / "pipeline_trace.jsonl"),
        )
        if isinstance(parts.generator, Startable):  # remote generators: check URL, key and model up front
            await parts.generator.start()
        self.tasks = TaskSets(cfg)
        sync = self.ranks.start(cfg.model.device) if self.ranks is not None else None
        policy = parts.policy
        learner = build_learner(
            cfg, policy.model, policy.tokenizer, ref_model=load_reference(cfg, cfg.model.device), sync=sync
        )
        self.trainer = Trainer(
            cfg=cfg,
            learner=learner,
            tokenizer=policy.tokenizer,
            strategy=parts.strategy,
            tasks=self.tasks.train,
            run_dir=self.run_dir,
            on_update=parts.set_policy_version,
            progress=self.progress,
            sinks=metric_sinks(cfg, self.run_dir),
        )
        if self.resume:
            self.trainer.resume()
        if self.ranks is not None:  # after resume: the other ranks receive the restored weights and optimiser
            self.ranks.share_state(learner)

    async def evaluate(self) -> dict[str, Any]:
        """Greedy accuracy of the current policy on the held-out set (or the validation set: ``env.eval_split``)."""
        assert self.parts is not None and self.tasks is not None, "setup() first"
        tasks = self.tasks.split(self.cfg.env.eval_split)
        return eval_record(await evaluate(self.parts, tasks, seed=self.cfg.trainer.seed))

    async def train(self) -> dict[str, Any]:
        """Evaluation before, the steps, evaluation after; returns the evaluation part of the summary."""
        assert self.trainer is not None, "setup() first"
        tc = self.cfg.trainer
        before_path = self.run_dir / "eval_before.json"
        if tc.eval_before_after and not before_path.exists():
            _write_json(before_path, await self.evaluate())
        await self.trainer.run()
        if not tc.eval_before_after:
            return {}
        before = read_json(before_path)
        after = await self.evaluate()
        return {
            "eval/accuracy_before": before["accuracy"],
            "eval/accuracy_after": after["accuracy"],
            "eval/n": after["n"],
            "eval/seed": tc.seed,
            "eval/before": before,
            "eval/after": after,
        }

    async def cleanup(self) -> None:
        """Close everything ``setup`` opened."""
        if self.ranks is not None:
            ranks, self.ranks = self.ranks, None
            ranks.close()
        if self.parts is not None:
            parts, self.parts = self.parts, None
            await parts.close()

    def summarize(self, evals: dict[str, Any], started: float) -> dict[str, Any]:
        """Write ``summary.json`` (and the report); returns the summary."""
        rows = read_metrics(self.run_dir)
        summary: dict[str, Any] = {"run_dir": str(self.run_dir), "steps": self.cfg.trainer.steps, **evals}
        summary["steps_logged"] = len(rows)
        summary["skipped_steps"] = sum(1 for r in rows if r.get("train/skipped_step") == 1)
        summary["skipped_updates"] = sum(int(r.get("train/skipped_updates") or 0) for r in rows)
        summary["time/total_s"] = time.perf_counter() - started
        _write_json(self.run_dir / "summary.json", summary)
        report = write_report(self.run_dir)
        if report:
            summary["report"] = report
        return summary

    async def __call__(self) -> dict[str, Any]:
        """Setup → train → cleanup → summary; returns the summary."""
        started = time.perf_counter()
        try:
            await self.setup()
            evals = await self.train()
        finally:
            await self.cleanup()
        return self.summarize(evals, started)


async def train_run(
    cfg: TirlConfig, run_dir: Path, *, resume: bool = False, progress: bool = True, ranks: RankGroup | None = None
) -> dict[str, Any]:
    """Run (or continue) the training job of ``cfg`` in ``run_dir``; returns the summary."""
    return await TrainingRun(cfg, run_dir, resume=resume, progress=progress, ranks=ranks)()
