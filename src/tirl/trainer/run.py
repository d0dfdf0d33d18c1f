"""The training recipe: one run directory from a config to a summary, in one room.

:class:`TrainingRun` is what ``tirl train`` runs (the command only turns its
arguments into a :class:`~tirl.config.TirlConfig` and a run directory):

1. **setup** — on resume, find the newest checkpoint that verifies
   (:func:`find_resume`: it says which one, and refuses with one error line
   when checkpoints exist but none verifies) and load the policy from it;
   write ``config.json``; draw the task sets (a task file is read whole here, so a bad row is an error
   before the model loads); wire the parts (:func:`tirl.trainer.wiring.build_parts`:
   generator, sandbox, env factory, the training and the evaluation strategy);
   start a generator that must be started (a remote server is checked up
   front); with ``--nproc N`` join the other ranks
   (a :class:`~tirl.trainer.learner.RankGroup` from :mod:`tirl.distributed`, which
   gives this rank's gradient-sync strategy); build the learner once
   (:func:`~tirl.trainer.learner.build_learner`: optimiser, updater, and the
   frozen reference model when ``algo.kl_coef > 0``), the metric sinks
   (wandb when configured) and the :class:`~tirl.trainer.trainer.Trainer`;
   restore its optimiser and RNG state on resume; send the other ranks the
   (restored) weights and optimiser state.
2. **train** — the held-out evaluation *before* (``eval_before.json``, once per
   run directory, so a resumed run keeps its first figure), then the steps,
   then the evaluation *after* (``trainer.eval_before_after``). With ``trainer.eval_samples = K`` each is
   followed by a sampled one, K episodes per task at the training sampling (``eval_before_sampled.json``,
   once per run directory as well, and ``eval_after_sampled.json``: :mod:`tirl.trainer.sampled_eval`).
3. **cleanup** — close the strategies, the generator and the sandbox (always).
4. **summary** — ``summary.json`` (steps logged, skipped steps and updates,
   accuracies, total time) and the diagnostics report (``report.html``) when
   the diagnostics are installed; a failing report never fails the run.

The whole run holds the run directory's lock (:mod:`tirl.trainer.run_lock`),
so a second writer is refused; a full disk anywhere in the run is one
:class:`~tirl.errors.OutputError` naming the run and ``--resume``.

Not covered: several runs in one process sharing parts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.config import TirlConfig, config_to_dict
from tirl.errors import InputError, OutputError
from tirl.fileio import write_text
from tirl.inference.base import Startable
from tirl.integrations.wandb_sink import metric_sinks
from tirl.jsonl import read_json
from tirl.models.kernels import build_line
from tirl.rollout.evaluation import EvalReport, PairedChange, TaskOutcome
from tirl.trainer import run_files
from tirl.trainer.checkpoint import ResumePoint, clean_leftovers, resume_point, warn_skipped
from tirl.trainer.failfast import failed_error, summarize_failures
from tirl.trainer.learner import RankGroup, build_learner, load_reference
from tirl.trainer.logging import log_eval_scalars, read_metrics
from tirl.trainer.preflight import run_label
from tirl.trainer.progress import EvalProgress
from tirl.trainer.run_lock import hold_run_dir
from tirl.trainer.sampled_eval import draw, eval_json, sampled_summary, sampling_strategy
from tirl.trainer.trainer import Trainer
from tirl.trainer.wiring import RunParts, TaskSets, build_parts

log = logging.getLogger("tirl.trainer")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text(path, json.dumps(data, indent=1) + "\n")


def eval_record(report: EvalReport) -> dict[str, Any]:
    """The JSON record of one held-out evaluation (``eval_before.json``, ``summary.json``), with each task's end."""
    return {
        "accuracy": report.accuracy,
        "n": report.n,
        "correct": report.correct,
        "wall_s": report.wall_s,
        "terminations": report.terminations,
        "mean_turns": report.mean_turns,
        "tasks": [o.to_dict() for o in report.outcomes()],
    }


def read_eval_before(path: Path, *, fix: str = "") -> dict[str, Any]:
    """A run's evaluation before training, checked as tirl wrote it; else :class:`InputError` at once.

    ``eval_before.json``, or ``eval_before_sampled.json`` with its own ``fix`` (:func:`read_sampled_before`).

    A resumed run reads them before its first step: a file that is missing, torn or edited was found only at the
    end of training (a torn one: an ``error:`` line after the last step; one without ``accuracy``: a traceback),
    and a missing ``eval_before.json`` was written anew from the *resumed* policy, mislabelled "before". The
    policy the run started from is gone by then, so the fix is to restore the file or to go on without it.
    """
    fix = fix or "restore the eval_before.json the run wrote, or resume with --set trainer.eval_before_after=false"
    if not path.is_file():
        problem = "is missing, and the run resumes from a checkpoint: the policy it started from is gone"
        raise InputError(str(path), None, problem, fix)
    try:
        record = read_json(path, missing_fix=fix)
    except InputError as exc:  # torn or not JSON: the same way on as a missing one
        raise InputError(exc.path, exc.line, exc.problem, fix) from None
    if not isinstance(record, dict):
        raise InputError(str(path), None, f"holds a JSON {type(record).__name__}, not an evaluation record", fix)
    accuracy, n = record.get("accuracy"), record.get("n")
    fraction = isinstance(accuracy, int | float) and not isinstance(accuracy, bool) and 0 <= accuracy <= 1
    if not fraction or not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(str(path), None, "needs a number 'accuracy' from 0 to 1 and a whole number 'n' >= 1", fix)
    try:
        [TaskOutcome.from_dict(row) for row in record.get("tasks", [])]
    except (TypeError, KeyError, ValueError, AttributeError):
        raise InputError(str(path), None, "has a 'tasks' list whose rows are not the ones tirl writes", fix) from None
    return record


def read_sampled_before(run_dir: Path) -> dict[str, Any] | None:
    """``eval_before_sampled.json`` checked (:func:`read_eval_before`), or None where the run has none."""
    path = run_dir / run_files.EVAL_BEFORE_SAMPLED
    if not path.exists():
        return None
    fix = "restore the file the run wrote, or delete it (the summary then has the sampled evaluation after alone)"
    record = read_eval_before(path, fix=fix)
    if not isinstance(record.get("tasks"), list):
        raise InputError(str(path), None, "has no 'tasks' list (each task's sampled episodes)", fix)
    return record


def _readable_before(path: Path) -> bool:
    """Whether a run that has not trained yet has its evaluation before training; a damaged one is done again."""
    if not path.exists():
        return False
    try:
        read_eval_before(path)
    except InputError as exc:
        print(f"note: {path}: {exc.problem}; the policy has not trained yet, so it is evaluated again", file=sys.stderr)
        return False
    return True


def paired_record(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """The task-by-task comparison of two :func:`eval_record` s (None: one has no task list, an older run's)."""
    if "tasks" not in before or "tasks" not in after:
        return None
    rows = [[TaskOutcome.from_dict(r) for r in rec["tasks"]] for rec in (before, after)]
    return PairedChange.of(rows[0], rows[1]).to_dict()


def write_report(run_dir: Path) -> dict[str, Any]:
    """The diagnostics report when the diagnostics are installed; a failure is a warning, never the run's.

    Returns the summary's ``report`` (the path), ``training_verdict`` (the training diagnosis in one line,
    which ``tirl train`` prints at its end; absent when ``metrics.jsonl`` could not be read) and, when there are
    any, ``report_warnings``: the lines ``tirl report`` prints on stderr (a section it could not read, a torn line
    it skipped), which ``tirl train`` prints at its end too; ``{}`` without a report.
    """
    try:
        from tirl.diagnostics.report import stderr_lines
        from tirl.diagnostics.report import write_report as write
    except ImportError:
        return {}
    problems: dict[str, str] = {}
    notes: list[str] = []
    verdicts: list[str] = []
    try:
        out: dict[str, Any] = {"report": str(write(run_dir, problems=problems, notes=notes, verdicts=verdicts))}
    except Exception as exc:  # the report is a bonus; the run already succeeded
        log.warning("the diagnostics report could not be written: %s", exc)
        return {}
    if verdicts:
        out["training_verdict"] = verdicts[0]
    lines = stderr_lines(problems, notes)
    return {**out, "report_warnings": lines} if lines else out


@dataclass(frozen=True, slots=True)
class ResumeFrom:
    """Where a resumed run continues: a verified checkpoint, or step 1 when the run has no checkpoint yet."""

    point: ResumePoint | None

    @property
    def model_dir(self) -> str | None:
        """The checkpoint's model directory (None: the configured model)."""
        return str(self.point.checkpoint.model_dir) if self.point else None


def find_resume(
    run_dir: Path,
    checkpoint_every: int = 1,
    steps: int | None = None,
    *,
    eval_before: bool = False,
    sampled: bool = False,
) -> ResumeFrom:
    """The newest checkpoint of ``run_dir`` that can be resumed, announced on stderr with what was skipped.

    A checkpoint that a killed save had set aside (``.step-N.old.*``, where the file system cannot swap in one
    step) is first put back at ``step-N``, with a line saying so; hidden leftovers are otherwise left to the
    next save (:func:`~tirl.trainer.checkpoint.clean_leftovers`).

    :class:`~tirl.errors.InputError` (one line naming the damage) when checkpoints exist but none verifies, and
    when the run has none although it must have written one: it logged a step after ``checkpoint_every`` (each
    checkpoint is complete before the next step starts) or it finished. Only a run killed before its first
    checkpoint starts again at step 1. With ``steps`` (``trainer.steps``), a run that finished them all and wrote
    its summary is an error saying how to continue it (it used to redo the after-evaluation and say training
    continued); one killed after its last step but before its summary finishes its evaluation. With
    ``eval_before`` (``trainer.eval_before_after``), resuming from a checkpoint needs the run's
    ``eval_before.json`` as it was written (:func:`read_eval_before`), checked here, before anything runs; with
    ``sampled`` (``trainer.eval_samples`` > 0) its ``eval_before_sampled.json`` too, where it has one.
    """
    for name in clean_leftovers(run_dir, restore_only=True):  # the run's lock is held: no save is under way
        print(f"resuming {run_dir}: put back checkpoint {name}, set aside by a save that was killed", file=sys.stderr)
    point = resume_point(run_dir)
    if point is None:
        logged = max((r["step"] for r in read_metrics(run_dir) if isinstance(r.get("step"), int)), default=0)
        if logged > checkpoint_every or (run_dir / run_files.SUMMARY).exists():
            raise InputError(str(run_dir), None, f"has no checkpoint, but it logged step {logged} (a checkpoint "
                             f"every {checkpoint_every} steps): its checkpoints are missing; nothing was changed",
                             "restore checkpoints/ from a copy, or start a new run with --run-dir")  # fmt: skip
        print(f"resuming {run_dir}: it has no checkpoint yet, so training starts at step 1", file=sys.stderr)
        return ResumeFrom(None)
    ckpt = point.checkpoint
    if steps is not None and ckpt.step >= steps:
        if (run_dir / run_files.SUMMARY).exists():
            more = f"tirl train --resume {run_dir} --steps {ckpt.step + 10}"
            raise InputError(str(run_dir), None, f"finished: its last checkpoint is step {ckpt.step} of "
                             f"trainer.steps={steps} and its summary is written; nothing was changed",
                             f"train it further with `{more}` (any number above {ckpt.step}), or evaluate it "
                             f"with `tirl eval --model {run_dir}`")  # fmt: skip
        then = f"its {steps} steps are done; the evaluation after training and the summary run now"
    else:
        then = f"training continues at step {ckpt.step + 1}"
    if eval_before:
        read_eval_before(run_dir / run_files.EVAL_BEFORE)
    if sampled:
        read_sampled_before(run_dir)
    warn_skipped(point.skipped, ckpt)
    print(f"resuming {run_dir} from checkpoint {ckpt.path.name}: {then}", file=sys.stderr)
    return ResumeFrom(point)


def _full_disk(exc: OSError, run_dir: Path) -> OutputError | None:
    """A full disk while writing the run is one error line (the logs' lines are whole, so resume continues it)."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return OutputError(str(run_dir), None, f"no space left on the device while writing the run ({exc.strerror})",
                       f"free space, then continue the run with `tirl train --resume {run_dir}`")  # fmt: skip


class TrainingRun:
    """One training run (or its continuation) in ``run_dir``; see the module docstring for the stages."""

    def __init__(
        self,
        cfg: TirlConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: bool = True,
        ranks: RankGroup | None = None,
        resume_from: ResumeFrom | None = None,
        lock: bool = True,
    ) -> None:
        self.cfg = cfg
        self.lock = lock  # False: a process that holds the run directory's lock runs this recipe elsewhere (Ray)
        self.ranks = ranks  # --nproc N > 1: the other ranks (tirl.distributed); this process is rank 0
        self.run_dir = Path(run_dir)
        self.resume = resume or resume_from is not None
        self.resume_from = resume_from  # already found (tirl train finds it before starting ranks)
        self.progress = progress
        self.parts: RunParts | None = None
        self.tasks: TaskSets | None = None
        self.trainer: Trainer | None = None

    async def setup(self) -> None:
        """Config file, parts, generator start, task sets, reference model, trainer (restored on resume)."""
        cfg = self.cfg
        if self.resume and self.resume_from is None:  # before anything is written: a refusal changes nothing
            self.resume_from = find_resume(
                self.run_dir, cfg.trainer.checkpoint_every, cfg.trainer.steps,
                eval_before=cfg.trainer.eval_before_after, sampled=cfg.trainer.eval_samples > 0,
            )  # fmt: skip
        start = self.resume_from
        if not self.resume:  # a resumed run's config is written once its checkpoint is restored under it (below)
            _write_json(self.run_dir / run_files.CONFIG, config_to_dict(cfg))
        self.tasks = TaskSets(cfg)  # a bad task-file row is an error before the model loads (minutes on a GPU)
        self.parts = parts = build_parts(
            cfg,
            model_path=start.model_dir if start else None,
            trace_path=str(self.run_dir / run_files.TRACE),
        )
        if isinstance(parts.generator, Startable):  # remote generators: check URL, key and model up front
            await parts.generator.start()
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
        if start is not None and start.point is not None:
            self.trainer.resume(start.point)
        if self.resume:  # written before, a resume refused here (a LoRA rank on a full-model checkpoint) left
            _write_json(self.run_dir / run_files.CONFIG, config_to_dict(cfg))  # settings no later resume could load
        if self.ranks is not None:  # after resume: the other ranks receive the restored weights and optimiser
            self.ranks.share_state(learner)

    async def evaluate(self, when: str = "", *, samples: int = 0) -> dict[str, Any]:
        """Greedy accuracy of the current policy on the held-out set (or the validation set: ``env.eval_split``).

        ``samples`` > 0: that many episodes per task at the training sampling instead
        (:mod:`tirl.trainer.sampled_eval`), returned as the record of ``tirl eval --sampled --json``.
        Shows its progress (``when``: "before training"...); stops the run when every episode failed
        (:mod:`tirl.trainer.failfast`) unless ``trainer.tolerate_failed_steps`` > 0.
        """
        assert self.parts is not None and self.tasks is not None, "setup() first"
        cfg, parts = self.cfg, self.parts
        tasks = self.tasks.split(cfg.env.eval_split)
        split = "held-out" if cfg.env.eval_split == "heldout" else "validation"
        what = f"{split} {run_label(cfg)} tasks" + (f" ({when})" if when else "")
        if samples:  # "evaluating 400 sampled episodes (2 per held-out tir-chain task, before training)"
            what = f"sampled episodes ({samples} per {split} {run_label(cfg)} task" + (f", {when})" if when else ")")
        sampling = sampling_strategy(parts, cfg) if samples else contextlib.nullcontext(parts.eval_strategy)
        async with (
            sampling as strategy,
            EvalProgress(len(tasks) * max(samples, 1), what, lambda: getattr(strategy, "last_board", None),
                         enabled=self.progress) as bar,
        ):  # fmt: skip
            report, passes = await draw(strategy, tasks, max(samples, 1), step=cfg.trainer.seed)
        bar.report(report.correct, report.n)
        failures = summarize_failures(report.trajectories)
        if failures.all_failed and cfg.trainer.tolerate_failed_steps == 0:
            raise failed_error(failures, cfg, f"the {split} evaluation ({when or 'of the policy'})")
        if not samples:
            return eval_record(report)
        model = cfg.model.path or "built-in"
        if when.startswith("after"):
            model = str(self.run_dir / run_files.CHECKPOINTS / f"step-{cfg.trainer.steps}" / "model")
        return eval_json(cfg, report, passes, model=model, split=cfg.env.eval_split, sampled=True)

    async def _sampled_before(self) -> None:
        """``eval_before_sampled.json``, once per run directory, while the policy is still the one it started from.

        A resume from a checkpoint whose run has none (started with ``trainer.eval_samples=0``) writes none: the
        starting policy is gone, so the summary carries the sampled evaluation after training alone.
        """
        path = self.run_dir / run_files.EVAL_BEFORE_SAMPLED
        if path.exists():
            return
        if self.resume_from is not None and self.resume_from.point is not None:
            print(f"note: {path} is missing and the run resumes from a checkpoint, so there is no sampled "
                  "evaluation before training (the policy it started from is gone); the one after is written",
                  file=sys.stderr)  # fmt: skip
            return
        _write_json(path, await self.evaluate("before training", samples=self.cfg.trainer.eval_samples))

    async def train(self) -> dict[str, Any]:
        """Evaluation before, the steps, evaluation after; returns the evaluation part of the summary."""
        assert self.trainer is not None, "setup() first"
        tc = self.cfg.trainer
        before_path = self.run_dir / run_files.EVAL_BEFORE
        resumed = self.resume_from is not None and self.resume_from.point is not None  # its file: find_resume's
        if tc.eval_before_after and not resumed and not _readable_before(before_path):
            _write_json(before_path, await self.evaluate("before training"))
        if tc.eval_before_after and tc.eval_samples:
            await self._sampled_before()
        await self.trainer.run()
        if not tc.eval_before_after:
            return {}
        before = read_eval_before(before_path)
        after = await self.evaluate("after training")
        log_eval_scalars(self.run_dir, [(0, before), (self.cfg.trainer.steps, after)])
        out = {
            "eval/accuracy_before": before["accuracy"],
            "eval/accuracy_after": after["accuracy"],
            "eval/n": after["n"],
            "eval/seed": tc.seed,
            "eval/before": before,
            "eval/after": after,
        }
        paired = paired_record(before, after)
        if paired is not None:
            out["eval/paired"] = paired
        if tc.eval_samples:
            sampled_after = await self.evaluate("after training", samples=tc.eval_samples)
            _write_json(self.run_dir / run_files.EVAL_AFTER_SAMPLED, sampled_after)
            sampled_before = read_sampled_before(self.run_dir)
            out.update(sampled_summary(sampled_before, sampled_after, tc.eval_samples))
        return out

    async def cleanup(self, *, abort: bool = False) -> None:
        """Close everything ``setup`` opened (``abort``: interrupted or failed, the other ranks are ended, not told)."""
        if self.ranks is not None:
            ranks, self.ranks = self.ranks, None
            ranks.close(abort=abort)
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
        summary["built_with"] = build_line()  # the kernels the figures repeat on to the digit (tirl.models.kernels)
        _write_json(self.run_dir / run_files.SUMMARY, summary)
        summary.update(write_report(self.run_dir))
        return summary

    async def __call__(self) -> dict[str, Any]:
        """Setup → train → cleanup → summary; returns the summary."""
        started = time.perf_counter()
        self.run_dir.mkdir(parents=True, exist_ok=True)  # `tirl train` made it; a recipe called directly may not
        with hold_run_dir(self.run_dir) if self.lock else contextlib.nullcontext():
            try:
                await self.setup()
                if self.progress:  # before the first evaluation: TensorBoard can be pointed at it for the whole run
                    # stderr, with the step lines and the evaluation's progress (--no-progress silences all three)
                    print(
                        f"run directory: {self.run_dir}  (tensorboard --logdir {self.run_dir / 'tb'})", file=sys.stderr
                    )
                evals = await self.train()
                await self.cleanup()
                return self.summarize(evals, started)
            except BaseException as exc:  # Ctrl-C / SIGTERM (a cancellation here) or a failure, maybe mid-collective
                await self.cleanup(abort=True)
                full = _full_disk(exc, self.run_dir) if isinstance(exc, OSError) else None
                if full is None:
                    raise
                raise full from None
            finally:
                await self.cleanup()


async def train_run(
    cfg: TirlConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    ranks: RankGroup | None = None,
    resume_from: ResumeFrom | None = None,
    lock: bool = True,
) -> dict[str, Any]:
    """Run (or continue) the training job of ``cfg`` in ``run_dir``; returns the summary.

    ``lock=False`` only where another process holds the run directory's lock for this run (a Ray rank 0).
    """
    run = TrainingRun(cfg, run_dir, resume=resume, progress=progress, ranks=ranks, resume_from=resume_from, lock=lock)
    return await run()
