"""The names ``tirl train`` writes in a run directory: the one list of them.

The writers use these names, and commands that must not write over a run's files check against them
(``tirl report --out``, :func:`is_run_file`).

At the top of ``RUN_DIR``::

    config.json  config_notes.json  metrics.jsonl  trajectories.jsonl  pipeline_trace.jsonl
    eval_before.json  summary.json  report.html  .lock
    eval_before_sampled.json  eval_after_sampled.json   (trainer.eval_samples > 0: tirl eval --sampled's JSON)
    metrics.jsonl.torn  trajectories.jsonl.torn   (lines a killed run left half-written)
    checkpoints/step-N/  tb/  ranks/              (directories: checkpoints, TensorBoard, the --nproc ranks' logs)
    train.log                                     (tirl ablate: each arm's output)

``report.html`` is the report's own file (``tirl report RUN`` rewrites it); every other name is the run's
record, which :func:`is_run_file` recognises (any ``eval_*.json`` too, and each file's ``.torn`` companion).
"""

from __future__ import annotations

CONFIG = "config.json"
NOTES = "config_notes.json"  # the notes on TRL/verl names the saved config was made from
METRICS = "metrics.jsonl"
TRAJECTORIES = "trajectories.jsonl"
TRACE = "pipeline_trace.jsonl"
EVAL_BEFORE = "eval_before.json"
EVAL_BEFORE_SAMPLED = "eval_before_sampled.json"  # trainer.eval_samples: K episodes per task, sampled
EVAL_AFTER_SAMPLED = "eval_after_sampled.json"
SUMMARY = "summary.json"
REPORT = "report.html"
LOCK = ".lock"
TORN = ".torn"  # appended to a log's name: its damaged lines (tirl.trainer.logging)
CHECKPOINTS = "checkpoints"
TB = "tb"
RANKS = "ranks"
ARM_LOG = "train.log"

RECORD = frozenset({CONFIG, NOTES, METRICS, TRAJECTORIES, TRACE, EVAL_BEFORE, EVAL_BEFORE_SAMPLED, EVAL_AFTER_SAMPLED,
                    SUMMARY, LOCK, ARM_LOG})  # fmt: skip
DIRECTORIES = frozenset({CHECKPOINTS, TB, RANKS})


def is_run_file(name: str) -> bool:
    """Whether ``name`` (one path component at the top of a run directory) is part of the run's record."""
    base = name.removesuffix(TORN)
    return base in RECORD or name in DIRECTORIES or (base.startswith("eval_") and base.endswith(".json"))
