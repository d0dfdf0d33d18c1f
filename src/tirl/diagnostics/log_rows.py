"""The rows of a training log, file by file, checked before any rule sees them.

:func:`read_file_runs` reads one file — a JSONL log (tirl's ``metrics.jsonl``, verl's ``file`` logger, any
JSONL of one object per step), TRL's ``trainer_state.json`` or a wandb CSV export — into
:class:`FileRows`: each run's rows with the place each came from (a line, or ``log_history[i]`` of a JSON
document) and notes for the user (a torn last line that was skipped). Then:

* :func:`file_steps`: the step of every row. The step column is the first of :data:`STEP_KEYS` that any
  row of the file has; each row must hold it as a whole number >= 0 (``"x"``, ``-1``, ``1.5``, a missing or
  null step are errors naming the line). A file with no step column at all is numbered 0, 1, 2… in order.
* :func:`check_cells`: a cell of a metric key the adapters read (``known``, with wandb's ``__MIN``/``__MAX``)
  holds a number, a numeric string (``"0.5"``, ``"inf"``), or nothing (``null``, ``NaN``, an empty cell:
  missing). Anything else — ``"big"``, ``"n/a"``, ``true``, a list — is an error naming the line and the key
  (the old reader read it as missing, or ``true`` as 1.0, and could call the log healthy).
* :func:`merge_by_step`: the rows of every file of one run joined on the step, in step order. Rows of one
  step are one row (a logger that writes a step in several calls; verl's validation line at step 0); a key
  the adapters read with two different values at one step — in one file (a resumed run that re-logged
  steps, every row ``step 1``) or across files (two runs passed together) — is an error naming both places,
  the step and the key. The old merge kept the last file's value, so ``a b`` and ``b a`` could disagree.
  Columns the adapters do not read (a wall time, ``_runtime``) keep their first value and never conflict.

TensorBoard event files (``events.out.tfevents.*``, or a directory of them) are read by
:mod:`tirl.diagnostics.tb_events` into the same :class:`FileRows`; :func:`resolve_training_log` only says which
path a command-line path stands for. Not covered: a value that two places write in different spellings of one
number beyond float equality (``"0.1"`` and ``0.1`` are equal; ``0.30000000000000004`` and ``0.3`` are not).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.diagnostics.wandb_csv import read_wandb_csv
from tirl.errors import InputError, cut
from tirl.inputs import input_file
from tirl.jsonl import read_json, read_jsonl

STEP_KEYS: tuple[str, ...] = ("step", "_step", "Step", "training/global_step", "global_step", "trainer/global_step")

Position = int | str  # a line number, or where in a JSON document (``log_history[3]``)


@dataclass(frozen=True, slots=True)
class FileRows:
    """The rows of one run in one file, where each came from, and notes for the user."""

    path: str
    rows: list[dict[str, Any]]
    positions: list[Position]
    notes: list[str] = field(default_factory=list)


def located(path: str, pos: Position | None, problem: str, fix: str) -> InputError:
    """The error for ``pos`` of ``path``: ``path:line: problem`` or ``path: log_history[3]: problem``."""
    if isinstance(pos, str):
        return InputError(path, None, f"{pos}: {problem}", fix)
    return InputError(path, pos, problem, fix)


def _where(path: str, pos: Position, here: str) -> str:
    """How another place is named in a message about a place of ``here`` (the same file: only its line)."""
    if path == here:
        return f"line {pos}" if isinstance(pos, int) else str(pos)
    return f"{path}:{pos}" if isinstance(pos, int) else f"{path} ({pos})"


def shown(value: Any) -> str:
    """A cell as the file spells it (JSON: ``true``, ``"big"``, ``[1, 2]``), cut to 60 characters."""
    try:
        return cut(json.dumps(value, ensure_ascii=False, allow_nan=True))
    except (TypeError, ValueError):  # not JSON-shaped (cannot come from a file); repr, cut
        return cut(repr(value))


def raw_number(value: Any) -> float | None:
    """The float in a JSON value or a CSV cell (``inf``/``Infinity``/``NaN`` included); ``None`` when there is none.

    A boolean is not a number (``true`` is not 1.0).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond the float range
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def is_missing(value: Any) -> bool:
    """``null``, ``NaN`` and an empty (or blank) cell: a missing value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    f = raw_number(value)
    return f is not None and math.isnan(f)


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """Unwrap a line of verl's ``file`` logger, ``{"step": N, "data": {...}}`` (+ ``elapsed_seconds`` lately)."""
    data = obj.get("data")
    if isinstance(data, dict) and "step" in obj and set(obj) <= {"step", "data", "elapsed_seconds"}:
        return {"step": obj["step"], **data}
    return obj


def resolve_training_log(path: Path) -> Path:
    """The path a path on the command line stands for: a run directory's ``metrics.jsonl`` when it has one.

    A directory without ``metrics.jsonl`` stays as it is (its TensorBoard event files are the log, read by
    :mod:`tirl.diagnostics.tb_events`) when it holds event files; one without either is an InputError that
    says so (it said "DIR/metrics.jsonl: file not found", a file the user never named).
    """
    if not path.is_dir():
        return path
    if (path / "metrics.jsonl").exists():
        return path / "metrics.jsonl"
    if next(path.rglob("*tfevents*"), None) is not None:
        return path
    raise InputError(str(path), None, "is a directory without metrics.jsonl or TensorBoard event files",
                     "give the training log file, or a run directory that `tirl train` wrote")  # fmt: skip


def _existing(path: str | Path) -> Path:
    # a pipe is refused: the log's format is sniffed, so it is read twice
    return input_file(path, "check the path of the training log", pipe_fix="save the log to a file first")


def _log_history(p: Path) -> FileRows | None:
    """The per-step training rows of a transformers ``trainer_state.json``; None when ``p`` is not one."""
    state = read_json(p, missing_fix="check the path of the training log")
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        return None
    rows: list[dict[str, Any]] = []
    positions: list[Position] = []
    for i, entry in enumerate(state["log_history"]):
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        if "train_runtime" in entry or any(str(k).startswith("eval_") for k in entry):
            continue  # the end-of-training summary and evaluation rows are not training steps
        rows.append(_flatten(entry))
        positions.append(f"log_history[{i}]")
    return FileRows(str(p), rows, positions)


def _jsonl_rows(p: Path) -> FileRows:
    """Rows read with the one JSONL reader (:func:`tirl.jsonl.read_jsonl`); a torn last line is skipped, with a note.

    A ``.json`` file that is one document with a ``log_history`` list (TRL's ``trainer_state.json``) gives
    that list's training rows instead.
    """
    if p.suffix.lower() == ".json" and (history := _log_history(p)) is not None:
        return history
    numbered, notes = jsonl_objects(p, fix="write one JSON object per step")
    rows = [_flatten(_unwrap(obj)) for _, obj in numbered]
    positions: list[Position] = [line for line, _ in numbered]
    return FileRows(str(p), rows, positions, notes)


def jsonl_objects(p: Path, *, fix: str) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    """``(line, object)`` pairs of a log a run appends to, and the notes for the user.

    Read with the one JSONL reader (:func:`tirl.jsonl.read_jsonl`); a torn last line (no newline at its end,
    not valid JSON: a run killed mid-write) is skipped with a note naming ``FILE:LINE``; any other bad line
    raises :class:`InputError` with ``fix``. The training logs and the pipeline trace are read with it.
    """
    notes: list[str] = []

    def torn(line: int) -> None:
        notes.append(
            f"{p}:{line}: the last line is torn (no newline at its end and not valid JSON: a run killed mid-write) "
            "and was skipped"
        )

    rows = list(read_jsonl(p, torn_tail=True, objects=True, fix=fix, on_torn=torn))
    return rows, notes


def read_file_runs(path: str | Path) -> dict[str | None, FileRows]:
    """The rows of each run in one file: a wandb CSV may hold several; a JSONL or JSON file is one run (``None``)."""
    p = _existing(path)
    if p.suffix.lower() == ".csv":
        out: dict[str | None, FileRows] = {}
        for run, numbered in read_wandb_csv(p).items():
            positions: list[Position] = [line for line, _ in numbered]
            out[run] = FileRows(str(p), [row for _, row in numbered], positions)
        return out
    return {None: _jsonl_rows(p)}


def _step_of(fr: FileRows, i: int, key: str) -> int:
    value, pos = fr.rows[i].get(key), fr.positions[i]
    fix = f"every row needs its step as a whole number >= 0 in {key!r} (the file's step column)"
    if is_missing(value):
        raise located(fr.path, pos, f"the row has no step (no {key!r}, which other rows have)", fix)
    f = raw_number(value)
    if f is None or not math.isfinite(f):
        raise located(fr.path, pos, f"{key}={shown(value)} is not a step number", fix)
    if f < 0:
        raise located(fr.path, pos, f"{key}={shown(value)} is negative", fix)
    if f != int(f):
        raise located(fr.path, pos, f"{key}={shown(value)} is not a whole number", fix)
    return int(f)


def file_steps(fr: FileRows) -> list[int]:
    """The step of each row (see the module docstring); a bad step raises :class:`InputError` with its place."""
    key = next((k for k in STEP_KEYS if any(k in row for row in fr.rows)), None)
    if key is None:
        return list(range(len(fr.rows)))
    return [_step_of(fr, i, key) for i in range(len(fr.rows))]


def _base(key: str) -> str:
    return key.removesuffix("__MIN").removesuffix("__MAX")


def check_cells(fr: FileRows, known: frozenset[str]) -> None:
    """Every cell of a key in ``known`` is a number or missing; otherwise :class:`InputError` with line and key."""
    for row, pos in zip(fr.rows, fr.positions, strict=True):
        for key, value in row.items():
            if _base(key) not in known or is_missing(value) or raw_number(value) is not None:
                continue
            raise located(
                fr.path,
                pos,
                f"{key}={shown(value)} is not a number",
                "a metric holds a number, or null/NaN/an empty cell where the step has no value",
            )


def _same(a: Any, b: Any) -> bool:
    fa, fb = raw_number(a), raw_number(b)
    if fa is not None and fb is not None:
        return fa == fb
    return str(a).strip() == str(b).strip()


def merge_by_step(
    parts: Iterable[tuple[FileRows, list[int]]], known: frozenset[str]
) -> tuple[list[int], list[dict[str, Any]]]:
    """The steps and rows of one run from its files' rows and steps, joined on the step (module docstring)."""
    merged: dict[int, dict[str, Any]] = {}
    origin: dict[tuple[int, str], tuple[str, Position]] = {}
    for fr, steps in parts:
        for row, pos, step in zip(fr.rows, fr.positions, steps, strict=True):
            target = merged.setdefault(step, {})
            for key, value in row.items():
                if key not in target or (is_missing(target[key]) and not is_missing(value)):
                    target[key] = value
                    origin[step, key] = (fr.path, pos)
                elif _base(key) in known and not is_missing(value) and not _same(target[key], value):
                    raise _conflict(fr.path, pos, step, key, value, target[key], origin[step, key])
    steps_sorted = sorted(merged)
    return steps_sorted, [merged[s] for s in steps_sorted]


def _conflict(
    path: str, pos: Position, step: int, key: str, value: Any, first: Any, where: tuple[str, Position]
) -> InputError:
    there = _where(*where, here=path)
    if where[0] == path:
        return located(
            path,
            pos,
            f"step {step} again, with {key}={shown(value)} here and {shown(first)} on {there}",
            "each step once per file: keep one attempt's lines of a resumed run that logged steps again, "
            "or split a file that holds several runs",
        )
    return located(
        path,
        pos,
        f"step {step}: {key}={shown(value)} here but {shown(first)} in {there}",
        "files passed together are parts of one run and must agree on each step: diagnose each run on its own",
    )
