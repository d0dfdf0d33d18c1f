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

A run directory tirl wrote holds no symbolic links, and one it is given (``--resume``, ``tirl report``) may hold
none among these names (``.lock`` has its own guard) or directly inside ``checkpoints/``, ``tb/`` and ``ranks/``:
the writers append to, replace and prune these paths in place, so a shared run with ``metrics.jsonl ->
~/.bashrc`` would have the next command write through the link outside the run (:func:`refuse_links`). The run
directory itself may be a link.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tirl.errors import InputError

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


def linked_entries(run_dir: Path) -> list[Path]:
    """The entries of ``run_dir`` that its writers use (its names and what its directories hold) and that are links."""
    found: list[Path] = []
    try:
        top = sorted(os.scandir(run_dir), key=lambda e: e.name)
    except OSError:  # not (yet) a directory: the caller's own checks name it
        return found
    for entry in top:
        if entry.name == LOCK or (entry.name != REPORT and not is_run_file(entry.name)):
            continue  # the lock file is opened without following a link (tirl.trainer.run_lock) and says so
        if entry.is_symlink():
            found.append(Path(entry.path))
        elif entry.name in DIRECTORIES and entry.is_dir(follow_symlinks=False):
            try:
                found += sorted(Path(e.path) for e in os.scandir(entry.path) if e.is_symlink())
            except OSError:
                continue
    return found


def refuse_links(run_dir: Path) -> None:
    """One ``error:`` (:class:`InputError`) naming the first link of :func:`linked_entries`; nothing when none."""
    links = linked_entries(run_dir)
    if not links:
        return
    link = links[0]
    more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
    raise InputError(
        str(link),
        None,
        f"is a symbolic link (to {os.readlink(link)}){more}; tirl writes a run's files in place, so it would "
        "write through the link outside the run",
        "replace each link by a copy of what it names (cp -rL), or give a copy of the run made with cp -rL",
    )


_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dirs(run_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoints/step-N`` entry of a run, by step (nothing inside is read).

    Here, free of torch: the line an interrupted ``tirl train`` prints lists them, and a Ctrl-C that landed in
    torch's import leaves a half-imported torch that a second ``import torch`` fails on.
    """
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = ((_STEP_DIR.match(child.name), child) for child in root.iterdir())
    return sorted((int(m.group(1)), child) for m, child in found if m)
