"""``tirl compare FIRST [SECOND]``: two evaluations of the same tasks, task by task, with a CI and a p-value.

Each side is an evaluation record: the JSON that ``tirl eval --json`` prints (greedy, or ``--sampled --samples
K``), a run's ``eval_before.json``, or a run directory (its ``summary.json``'s after-training evaluation). One
run directory alone compares that run's evaluation before training with the one after it. With ``--sampled``
a run directory stands for its sampled evaluations instead (``trainer.eval_samples``: ``eval_before_sampled.json``
and ``eval_after_sampled.json``, the same records as ``tirl eval --sampled --json``); without it, a run that has
them gets a note naming the option. What is printed, and which test, is
:class:`tirl.rollout.paired.PairedSamples`; ``--json`` prints its record with the two sides' paths, models,
splits and decodings.

Refused with one ``error:`` line naming the path (and ``tasks[i]`` for a bad row) and the fix: a missing or
unreadable file, one that is not a JSON object, a record without a ``tasks`` list (an evaluation written before
tirl recorded tasks), a row without a string ``id`` and a boolean ``correct``, a task with another number of
episodes than the rest of its file, two records with no task in common, a run directory without both
evaluations (with ``--sampled``: without its sampled file), ``--sampled`` without a run directory, and the
same path twice (links resolved). Two records with different decodings are compared, with a note saying so.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.errors import InputError, printable
from tirl.inputs import input_file
from tirl.jsonl import read_json
from tirl.rollout.evaluation import TaskOutcome
from tirl.rollout.paired import PairedSamples, UnevenSamples, solved_counts
from tirl.trainer import run_files

_FIX_EVAL = "give the JSON of `tirl eval --json` (greedy or --sampled --samples K), or a run directory"


@dataclass(frozen=True, slots=True)
class EvalSide:
    """One side of the comparison: where it was read, what it says about itself, and its task rows."""

    where: str
    model: str
    split: str
    decoding: str
    outcomes: list[TaskOutcome]

    def describe(self) -> str:
        """The side in one line."""
        return f"{self.where} (model {self.model}, {self.split}, {self.decoding})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tirl compare``."""
    parser.add_argument(
        "first", help="an evaluation (the JSON of tirl eval --json, a run's eval_before.json) or a run directory"
    )
    parser.add_argument(
        "second",
        nargs="?",
        help="the evaluation to compare with FIRST (a run directory: its evaluation after training); "
        "without it FIRST must be a run directory, compared before -> after",
    )
    parser.add_argument(
        "--sampled",
        action="store_true",
        help="a run directory stands for its sampled evaluations (trainer.eval_samples: eval_before_sampled.json, "
        "eval_after_sampled.json) instead of the greedy ones",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")


def _outcomes(where: str, record: Any) -> list[TaskOutcome]:
    """The ``tasks`` rows of an evaluation record, each checked."""
    if not isinstance(record, dict):
        raise InputError(where, None, f"is not an evaluation record (a JSON {type(record).__name__})", _FIX_EVAL)
    rows = record.get("tasks")
    if not isinstance(rows, list) or not rows:
        raise InputError(where, None, "holds no per-task results (a non-empty 'tasks' list)",
                         "evaluate again with tirl eval --json (tirl records each task's outcome)")  # fmt: skip
    out = []
    for i, row in enumerate(rows):
        ok = isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("correct"), bool)
        if not ok:
            raise InputError(f"{where}: tasks[{i}]", None, "needs a string 'id' and a boolean 'correct'",
                             "give the file tirl eval --json wrote, unedited")  # fmt: skip
        out.append(TaskOutcome(row["id"], row["correct"], str(row.get("termination", "")), 0))
    return out


def _side(where: str, record: Any, *, model: str = "not recorded", split: str = "not recorded") -> EvalSide:
    outcomes = _outcomes(where, record)
    try:
        solved_counts(outcomes)
    except UnevenSamples as exc:
        raise InputError(where, None, str(exc), "give an evaluation with the same episodes per task") from None
    decoding = str(record.get("decoding", "greedy"))  # a run's own evaluations are greedy and do not say so
    return EvalSide(where, str(record.get("model", model)), str(record.get("split", split)), decoding, outcomes)


def _run_sides(run_dir: Path) -> tuple[EvalSide, EvalSide]:
    """A run directory's evaluations before and after training, from its ``summary.json``."""
    path = run_dir / run_files.SUMMARY
    if not path.is_file():
        raise InputError(str(run_dir), None, "has no summary.json (the run did not finish)",
                         "give a finished run directory, or the JSON of tirl eval --json")  # fmt: skip
    summary = read_json(path)
    keys = ("eval/before", "eval/after")
    if not isinstance(summary, dict) or not all(isinstance(summary.get(k), dict) for k in keys):
        raise InputError(str(path), None, "holds no evaluation before and after training",
                         "run with trainer.eval_before_after=true, or compare two tirl eval --json files")  # fmt: skip
    if (run_dir / run_files.EVAL_AFTER_SAMPLED).is_file():
        print(f"note: {run_dir} also has sampled evaluations (trainer.eval_samples): compare them with --sampled",
              file=sys.stderr)  # fmt: skip
    model, split = str(summary.get("run_dir", run_dir)), "the run's evaluation set"
    return (_side(f"{path} (before)", summary["eval/before"], model=model, split=split),
            _side(f"{path} (after)", summary["eval/after"], model=model, split=split))  # fmt: skip


def _sampled_side(run_dir: Path, name: str) -> EvalSide:
    """One of a run directory's sampled evaluation files (``trainer.eval_samples``)."""
    path = run_dir / name
    if not path.is_file():
        when = "before" if name == run_files.EVAL_BEFORE_SAMPLED else "after"
        why = "the run did not finish, or it ran" if when == "after" else "it ran"
        raise InputError(str(run_dir), None,
                         f"has no sampled evaluation {when} training ({name}: {why} without trainer.eval_samples)",
                         "train with --set trainer.eval_samples=K, or compare the greedy evaluations: drop "
                         "--sampled")  # fmt: skip
    return _side(str(path), read_json(path, missing_fix=_FIX_EVAL))


def read_side(text: str, *, sampled: bool = False) -> EvalSide:
    """One argument as an evaluation: a run directory's after-training one, or an evaluation JSON file."""
    path = Path(text)
    if path.is_dir():
        return _sampled_side(path, run_files.EVAL_AFTER_SAMPLED) if sampled else _run_sides(path)[1]
    return _side(text, read_json(path, missing_fix=_FIX_EVAL))


def sides(first: str, second: str | None, *, sampled: bool = False) -> tuple[EvalSide, EvalSide]:
    """The two evaluations the arguments name (see the module doc)."""
    dirs = [Path(p).is_dir() for p in (first, second) if p is not None]
    if sampled and not any(dirs):
        raise InputError("--sampled", None, "picks a run directory's sampled evaluations, and no argument is one",
                         "drop --sampled (a file is compared as it is), or give a run directory")  # fmt: skip
    if second is None:
        if not dirs[0]:  # it said "is one evaluation" of a path that is nothing ('-', a device, a dangling link)
            input_file(first, "give a run directory, or two `tirl eval --json` files")
        if not dirs[0]:
            raise InputError(first, None, "is one evaluation: a comparison needs two",
                             "give a second evaluation, or a run directory alone (before -> after)")  # fmt: skip
        if sampled:
            run_dir = Path(first)
            return (_sampled_side(run_dir, run_files.EVAL_BEFORE_SAMPLED),
                    _sampled_side(run_dir, run_files.EVAL_AFTER_SAMPLED))  # fmt: skip
        return _run_sides(Path(first))
    sides = read_side(first, sampled=sampled), read_side(second, sampled=sampled)
    if Path(first).resolve() == Path(second).resolve():  # it printed +0.0 points, p = 1: a result of nothing
        raise InputError(second, None, f"is {first} again: an evaluation compared with itself never changes",
                         "give two evaluations, or a run directory alone (before -> after)")  # fmt: skip
    return sides


def run(args: argparse.Namespace) -> int:
    """Entry point of ``tirl compare``."""
    a, b = sides(args.first, args.second, sampled=args.sampled)
    try:
        result = PairedSamples.of(a.outcomes, b.outcomes)
    except ValueError as exc:
        raise InputError(f"{a.where} and {b.where}", None, str(exc),
                         "compare evaluations of the same tasks (same env, split, seed and --n)") from None  # fmt: skip
    if args.json:
        record = {"first": a.describe(), "second": b.describe(), **result.to_dict()}
        print(json.dumps(record))
        return 0
    if a.decoding != b.decoding:
        print(
            printable(f"note: the two evaluations decode differently ({a.decoding} vs {b.decoding})"), file=sys.stderr
        )
    print(printable(f"first:  {a.describe()}"))  # the model and split as the files name them: shown, not obeyed
    print(printable(f"second: {b.describe()}"))
    for line in result.lines():
        print(line)
    return 0
