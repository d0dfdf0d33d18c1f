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
same path twice (links resolved).

Two evaluations of different tasks are refused too (a paired comparison of other tasks is wrong, not noisy): another
env, task file (two spellings of one file on this machine, relative, absolute or through a link, are one), split,
seed (without a task file: a task file's held-out tasks are its first ones whatever the
seed) or number of tasks, each named with both values and the option to align (:func:`check_settings`). The same
tasks run differently (decoding, episodes per task, ``ood_rate``, ``max_turns``) are compared with one
``warning:`` line; a setting one record does not carry (written by an older tirl) gets a ``note:`` that it was
not checked. A run's greedy evaluations (``summary.json``) take their settings from the run's ``config.json``;
a run directory alone (before -> after) is one run's config and is not checked.
"""

from __future__ import annotations

import argparse
import json
import os
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


#: What decides an evaluation's tasks: a difference is refused (a paired comparison of other tasks is wrong).
#: ``seed`` only counts without a task file (a task file's held-out tasks are its first ones, whatever the seed).
TASK_SETTINGS = (("env", "--env"), ("tasks_file", "env.tasks_file"), ("split", "--split"), ("seed", "--seed"))
#: How the tasks were run: a difference between two evaluations of the same tasks is a warning.
PROTOCOL_SETTINGS = (("decoding", "--sampled, generation.temperature/top_p"), ("ood_rate", "env.eval_ood_rate"),
                     ("max_turns", "env.max_turns"))  # fmt: skip
#: Every setting a record may carry, by name.
SETTING_KEYS = tuple(k for k, _ in (*TASK_SETTINGS, *PROTOCOL_SETTINGS))


@dataclass(frozen=True, slots=True)
class EvalSide:
    """One side of the comparison: where it was read, what it says about itself, and its task rows.

    ``settings`` holds the :data:`TASK_SETTINGS` and :data:`PROTOCOL_SETTINGS` the record carries (an older
    record lacks some: they are left out, and :func:`check_settings` says they could not be checked).
    """

    where: str
    model: str
    split: str
    decoding: str
    outcomes: list[TaskOutcome]
    settings: dict[str, Any]

    def task_count(self) -> int:
        """How many distinct tasks the record holds."""
        return len(self.task_ids())

    def task_ids(self) -> set[str]:
        """The ids of the tasks the record holds."""
        return {o.id for o in self.outcomes}

    def samples(self) -> int:
        """Episodes per task (the same for every task: checked when read)."""
        return len(self.outcomes) // self.task_count()

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


def _side(where: str, record: Any, *, model: str = "not recorded", run: dict[str, Any] | None = None) -> EvalSide:
    """One evaluation record as a side; ``run``: the settings a run's own greedy evaluations do not carry."""
    outcomes = _outcomes(where, record)
    try:
        solved_counts(outcomes)
    except UnevenSamples as exc:
        raise InputError(where, None, str(exc), "give an evaluation with the same episodes per task") from None
    settings = {**(run or {}), **{k: record[k] for k in SETTING_KEYS if k in record}}
    settings.setdefault("decoding", "greedy")  # a run's own evaluations are greedy and do not say so
    split = str(settings.get("split", "not recorded"))
    return EvalSide(where, str(record.get("model", model)), split, str(settings["decoding"]), outcomes, settings)


def _run_settings(run_dir: Path) -> dict[str, Any]:
    """The settings of a run's greedy evaluations, from its ``config.json`` (none when it cannot be read)."""
    path = run_dir / run_files.CONFIG
    if not path.is_file():  # missing, or not a regular file (a FIFO there blocked the read, as summary.json's did)
        return {}
    try:
        env = read_json(path).get("env")  # tirl's one JSON reader
    except (InputError, AttributeError):
        return {}
    if not isinstance(env, dict):
        return {}
    names = {"name": "env", "tasks_file": "tasks_file", "eval_split": "split", "seed": "seed",
             "eval_ood_rate": "ood_rate", "max_turns": "max_turns"}  # fmt: skip
    return {ours: env[theirs] for theirs, ours in names.items() if theirs in env}


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _same_file(first: Any, second: Any) -> bool:
    """Two recorded task-file paths that name one file here (``x`` and ``./x``, an absolute path, a link)."""
    if not (isinstance(first, str) and isinstance(second, str)) or first == second:
        return first == second
    try:
        return os.path.samefile(first, second)
    except (OSError, ValueError):  # either is gone (or unreadable) on this machine: the spellings decide
        return os.path.normpath(first) == os.path.normpath(second)


def _differences(a: EvalSide, b: EvalSide, keys: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """``("setting A vs B", option)`` of each setting both record and that differs."""
    out = []
    for key, option in keys:
        if key == "seed" and (a.settings.get("tasks_file") or b.settings.get("tasks_file")):
            continue
        if key == "tasks_file" and _same_file(a.settings.get(key), b.settings.get(key)):
            continue
        if key in a.settings and key in b.settings and a.settings[key] != b.settings[key]:
            out.append((f"{key} {_shown(a.settings[key])} vs {_shown(b.settings[key])}", option))
    return out


def check_settings(a: EvalSide, b: EvalSide) -> list[str]:
    """Refuse two evaluations of different tasks; the ``warning:``/``note:`` lines for the rest.

    Different tasks (:data:`TASK_SETTINGS`, or another number of tasks where the smaller set is not within the
    larger) raise :class:`InputError` naming both values and the options to align; a larger ``--n`` that holds
    the smaller one's tasks (its first ones) is compared on the tasks both hold, with a ``note:`` line. The same
    tasks run differently (:data:`PROTOCOL_SETTINGS`, or another number of episodes per task) give one
    ``warning:`` line; a setting a record does not carry (an older tirl) one ``note:`` line naming it. Not
    covered: settings no record carries (the model's context, tool budgets).
    """
    tasks = _differences(a, b, TASK_SETTINGS)
    lines = []
    if a.task_count() != b.task_count():
        small, large = sorted((a, b), key=EvalSide.task_count)
        if small.task_ids() <= large.task_ids():  # a larger --n draws the smaller one's tasks first, then more
            lines.append(f"note: {large.where} holds {large.task_count()} tasks, {small.where} {small.task_count()}: "
                         f"the {small.task_count()} both hold are compared")  # fmt: skip
        else:
            tasks.append((f"{a.task_count()} vs {b.task_count()} tasks, not one set within the other", "--n"))
    if tasks:
        raise InputError(f"{a.where} and {b.where}", None,
                         f"were measured on different tasks ({'; '.join(t for t, _ in tasks)}): a paired "
                         "comparison of different tasks is wrong",
                         f"evaluate both with the same {', '.join(o for _, o in tasks)}")  # fmt: skip
    protocol = [text for text, _ in _differences(a, b, PROTOCOL_SETTINGS)]
    if a.samples() != b.samples():
        protocol.append(f"{a.samples()} vs {b.samples()} episodes per task")
    if protocol:
        lines.append(f"warning: the same tasks were evaluated differently ({'; '.join(protocol)}): the change "
                     "mixes the model's with the setting's")  # fmt: skip
    for side in (a, b):
        missing = [k for k in SETTING_KEYS if k not in side.settings]
        if missing:
            lines.append(f"note: {side.where} does not record {', '.join(missing)} (an older tirl): "
                         "not checked against the other evaluation")  # fmt: skip
    return lines


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
    model, run = str(summary.get("run_dir", run_dir)), _run_settings(run_dir)
    return (_side(f"{path} (before)", summary["eval/before"], model=model, run=run),
            _side(f"{path} (after)", summary["eval/after"], model=model, run=run))  # fmt: skip


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
    # a run directory alone: one run's config measured both (a resume may not change its evaluation set)
    notes = check_settings(a, b) if args.second is not None else []
    try:
        result = PairedSamples.of(a.outcomes, b.outcomes)
    except ValueError as exc:
        raise InputError(f"{a.where} and {b.where}", None, str(exc),
                         "compare evaluations of the same tasks (same env, split, seed and --n)") from None  # fmt: skip
    for line in notes:
        print(printable(line), file=sys.stderr)
    if args.json:
        record = {"first": a.describe(), "second": b.describe(), **result.to_dict()}
        print(json.dumps(record))
        return 0
    print(printable(f"first:  {a.describe()}"))  # the model and split as the files name them: shown, not obeyed
    print(printable(f"second: {b.describe()}"))
    for line in result.lines():
        print(line)
    return 0
