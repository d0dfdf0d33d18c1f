"""The sampled evaluation: episodes at the training sampling, their JSON record, and a run's change in them.

``tirl eval --sampled [--samples K]`` and the training job's ``trainer.eval_samples = K`` (before and after
training, beside the greedy evaluation) run it through the same code, so the two give the same episodes for
the same config, model and tasks:

* :func:`sampling_strategy` — an evaluation strategy over the *training* runner (``generation.temperature``
  and ``top_p``, per-turn sampling seeds from ``trainer.seed``) with the evaluation's concurrency, closed on
  exit;
* :func:`draw` — one episode per task (K = 1) or one request of group size K
  (:func:`~tirl.rollout.evaluation.evaluate_samples`, with pass@k), numbered by the request's step
  ``trainer.seed``: the same config draws the same episodes;
* :func:`eval_json` — the record ``tirl eval --json`` prints, which a run's ``eval_before_sampled.json`` and
  ``eval_after_sampled.json`` hold too (so ``tirl compare`` reads either);
* :func:`sampled_summary` — the run summary's ``eval/sampled_*`` keys: pass@1 before and after and their
  task-by-task comparison, :class:`~tirl.rollout.paired.PairedSamples` (what ``tirl compare`` prints:
  Wilcoxon's exact signed-rank p for K > 1, McNemar's exact p for K = 1); :func:`summary_lines` says it in
  words.

Not covered: a sampled evaluation of the policy a resumed run started from when its first part did not write
one (the policy is gone: the summary then carries the evaluation after training alone).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from tirl.config import TirlConfig
from tirl.envs.base import Task
from tirl.rollout.base import RolloutStrategy
from tirl.rollout.evaluation import EvalReport, TaskOutcome, eval_rollout_config, evaluate_policy, evaluate_samples
from tirl.rollout.paired import PairedSamples
from tirl.rollout.pass_at_k import PassAtK
from tirl.trainer.preflight import run_label
from tirl.trainer.wiring import RunParts

log = logging.getLogger("tirl.trainer")


@asynccontextmanager
async def sampling_strategy(parts: RunParts, cfg: TirlConfig) -> AsyncIterator[RolloutStrategy]:
    """An evaluation strategy over ``parts``' sampling (training) runner; closed when the block ends."""
    from tirl.rollout.strategies import make_strategy

    strategy = make_strategy(eval_rollout_config(cfg.rollout), parts.eval_env_factory, parts.runner)
    try:
        yield strategy
    finally:
        await strategy.close()


async def draw(
    strategy: RolloutStrategy, tasks: Sequence[Task], samples: int, *, step: int
) -> tuple[EvalReport, PassAtK | None]:
    """``samples`` episodes per task through ``strategy``; pass@k only for ``samples`` > 1 (as ``tirl eval``)."""
    if samples > 1:
        return await evaluate_samples(strategy, tasks, samples, step=step)
    return await evaluate_policy(strategy, tasks, step=step), None


def decoding(cfg: TirlConfig, sampled: bool) -> str:
    """How the episodes were decoded, in words (the record's ``decoding``)."""
    g = cfg.generation
    return f"sampled (temperature {g.temperature:g}, top-p {g.top_p:g})" if sampled else "greedy"


def eval_json(
    cfg: TirlConfig, report: EvalReport, passes: PassAtK | None, *, model: str, split: str, sampled: bool
) -> dict[str, Any]:
    """The evaluation record of ``tirl eval --json`` (and of a run's sampled evaluation files)."""
    return {
        "model": model,
        "env": cfg.env.name,
        "tasks_file": cfg.env.tasks_file,
        "label": run_label(cfg),
        "split": split,
        "decoding": decoding(cfg, sampled),
        "seed": cfg.env.seed,
        "ood_rate": cfg.env.eval_ood_rate,  # out-of-distribution tool output in this evaluation (0: the clean env)
        "max_turns": cfg.env.max_turns,
        "n": report.n,
        "correct": report.correct,
        "accuracy": report.accuracy,
        "terminations": report.terminations,
        "mean_turns": report.mean_turns,
        "wall_s": report.wall_s,
        "tasks": [o.to_dict() for o in report.outcomes()],
        "pass_at_k": passes.to_dict() if passes is not None else None,
    }


def _outcomes(record: dict[str, Any]) -> list[TaskOutcome]:
    return [TaskOutcome.from_dict(row) for row in record["tasks"]]


def sampled_summary(before: dict[str, Any] | None, after: dict[str, Any], samples: int) -> dict[str, Any]:
    """The summary's ``eval/sampled_*`` keys from the two :func:`eval_json` records (``before`` None: none).

    ``eval/samples`` (K), ``eval/sampled_decoding``, ``eval/sampled_accuracy_before``/``_after`` (pass@1: the
    solved share of every episode) and ``eval/sampled_paired`` (:meth:`PairedSamples.to_dict`; absent without a
    before record, or when the two share no task — a resume that changed the evaluation set, with a warning).
    """
    out: dict[str, Any] = {
        "eval/samples": samples,
        "eval/sampled_decoding": after["decoding"],
        "eval/sampled_accuracy_after": after["accuracy"],
    }
    if before is None:
        return out
    out["eval/sampled_accuracy_before"] = before["accuracy"]
    try:
        out["eval/sampled_paired"] = PairedSamples.of(_outcomes(before), _outcomes(after)).to_dict()
    except ValueError as exc:  # no task in common, or uneven episodes: both files are still there to read
        log.warning("the sampled evaluations before and after training cannot be paired: %s", exc)
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The sampled change in words, for ``tirl train``'s last lines (none when ``eval/samples`` is absent)."""
    k = summary.get("eval/samples")
    if not k:
        return []
    head = f"sampled eval ({k} per task, {summary.get('eval/sampled_decoding', 'sampled')}):"
    paired = summary.get("eval/sampled_paired")
    if isinstance(paired, dict):
        return [head, *(f"  {line}" for line in PairedSamples.from_dict(paired).lines())]
    after = summary["eval/sampled_accuracy_after"]
    before = summary.get("eval/sampled_accuracy_before")
    if before is None:
        return [head, f"  pass@1 {after:.4f} after training (no sampled evaluation before training to compare)"]
    return [head, f"  pass@1 {before:.4f} -> {after:.4f} (not paired: the two share no task)"]
